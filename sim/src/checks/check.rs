//! Invariant checks over what a simulated world holds: the ledger and journals on the
//! simulated disk, and what the client was told. Each returns the violations it found,
//! named by invariant (DESIGN.md section 7).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use warden::base::layout::RunFiles;
use warden::store::journal::Journal;
use warden::store::ledger::{self, RunPhase, State, LEDGER_FILE};

use crate::checks::{journal_reader, ledger_reader};
use crate::env::disk::SimDisk;
use crate::report::Violation;

fn violation(invariant: u8, message: String) -> Violation {
    Violation { invariant, message }
}

/// The ledger as it is on the disk now (a torn tail dropped, as recovery would), read by the
/// server's reader and by the checker's own (`ledger_reader`), which must agree, with the
/// runs compaction dropped merged back (`with_dropped_runs`).
pub fn ledger_state(disk: &SimDisk, journals: &Path) -> Result<State, Violation> {
    let state = ledger_file_state(disk, journals)?;
    Ok(with_dropped_runs(disk, &journals.join(LEDGER_FILE), state))
}

/// The ledger as the file holds it now, without what compaction dropped, read both ways.
pub fn ledger_file_state(disk: &SimDisk, journals: &Path) -> Result<State, Violation> {
    let file = journals.join(LEDGER_FILE);
    let bytes = disk.peek(&file).unwrap_or_default();
    let server = ledger::parse(&file, &bytes).map(|(state, _)| state);
    match (server, ledger_reader::read(&bytes)) {
        (Ok(state), Ok(read)) => match read.disagreement(&state) {
            None => Ok(state),
            Some(difference) => {
                Err(violation(6, format!("the server's ledger reader and the checker's differ: {difference}")))
            }
        },
        (Err(damage), Err(_)) => Err(violation(6, damage.to_string())),
        (Ok(_), Err(problem)) => {
            Err(violation(6, format!("the server reads a ledger the checker finds damaged at {problem}")))
        }
        (Err(damage), Ok(_)) => {
            Err(violation(6, format!("the server refuses a ledger the checker reads whole: {damage}")))
        }
    }
}

/// The state with the ended runs compaction dropped from the ledger, as the file held them
/// before: the checker remembers what retention forgets, since an answer it judges or an
/// effect a service saw may come from a run settled longer ago than `server.keep`.
fn with_dropped_runs(disk: &SimDisk, file: &Path, mut state: State) -> State {
    let earlier_versions = disk.unlinked(file);
    if earlier_versions.is_empty() {
        return state;
    }
    for bytes in earlier_versions {
        let Ok((earlier, _)) = ledger::parse(file, &bytes) else { continue };
        for (run, entry) in earlier.runs.into_iter().filter(|(_, entry)| !entry.is_open()) {
            state.runs.entry(run).or_insert(entry);
        }
    }
    // A compacted ledger numbers its reserves afresh: order them all again by their stamps,
    // which never go back (a later reserve is stamped no earlier than any event before it).
    let mut order: Vec<(u64, bool, u64, String)> = (state.runs.values())
        .map(|entry| (entry.reserved_at_ms, !entry.is_open(), entry.sequence, entry.run.clone()))
        .collect();
    order.sort();
    for (sequence, (.., run)) in order.into_iter().enumerate() {
        state.runs.get_mut(&run).expect("a run just listed").sequence = sequence as u64;
    }
    state
}

/// A run's journal: on the disk, or as it was when retention deleted it, read by the server's
/// reader and by the checker's own (`journal_reader`), which must agree.
pub fn journal(disk: &SimDisk, journals: &Path, tool: &str, run: &str) -> Option<Result<Journal, String>> {
    let path = RunFiles::new(journals, tool, run).journal;
    let bytes = disk.peek(&path).or_else(|| disk.unlinked(&path).pop())?;
    Some(journal_read_both_ways(&path, &bytes))
}

fn journal_read_both_ways(path: &Path, bytes: &[u8]) -> Result<Journal, String> {
    let file = path.display();
    match (Journal::parse(path, bytes), journal_reader::read(bytes)) {
        (Ok(journal), Ok(read)) => match read.disagreement(&journal) {
            None => Ok(journal),
            Some(difference) => {
                Err(format!("{file}: the server's journal reader and the checker's differ: {difference}"))
            }
        },
        (Err(damage), Err(_)) => Err(damage),
        (Ok(_), Err(problem)) => {
            Err(format!("{file}: the server reads a journal the checker finds damaged at {problem}"))
        }
        (Err(damage), Ok(_)) => Err(format!("the server refuses a journal the checker reads whole: {damage}")),
    }
}

/// Invariants 3 and 6 at rest (no server running, or between calls): one reserve per run is
/// enforced by parsing; here, the ledger and the journals must agree, and a `once` key
/// maps to at most one run that did not get released.
pub fn at_rest(disk: &SimDisk, journals: &Path) -> Vec<Violation> {
    at_rest_with_once_keep(disk, journals, u64::MAX)
}

/// As `at_rest`, for tools whose `once.keep` is `once_keep_ms`: a key may map to a new run
/// once the earlier run's key expired (counted from its end).
pub fn at_rest_with_once_keep(disk: &SimDisk, journals: &Path, once_keep_ms: u64) -> Vec<Violation> {
    at_rest_with(disk, journals, &|_| once_keep_ms)
}

/// As `at_rest`, with each tool's `once.keep` given by `once_keep_ms_of(tool)`.
pub fn at_rest_with(disk: &SimDisk, journals: &Path, once_keep_ms_of: &dyn Fn(&str) -> u64) -> Vec<Violation> {
    at_rest_since(disk, journals, once_keep_ms_of, &mut BTreeSet::new())
}

/// As `at_rest_with`, skipping the journals of runs in `verified` (settled runs found to agree
/// with their journals by an earlier check: nothing appends to a settled run's journal), and
/// adding the runs it verifies. A sweep checks after every call; this keeps that linear.
pub fn at_rest_since(
    disk: &SimDisk,
    journals: &Path,
    once_keep_ms_of: &dyn Fn(&str) -> u64,
    verified: &mut BTreeSet<String>,
) -> Vec<Violation> {
    let mut found = Vec::new();
    let state = match ledger_state(disk, journals) {
        Ok(state) => state,
        Err(v) => return vec![v],
    };
    let mut by_key: BTreeMap<String, Vec<&warden::store::ledger::RunEntry>> = BTreeMap::new();
    for entry in state.runs.values() {
        if let (Some(once), false) = (&entry.once, matches!(entry.phase, RunPhase::Released { .. })) {
            by_key.entry(once.key.clone()).or_default().push(entry);
        }
        if verified.contains(&entry.run) {
            continue;
        }
        let files = RunFiles::new(journals, &entry.tool, &entry.run);
        let journal = journal(disk, journals, &entry.tool, &entry.run);
        let ended = !entry.is_open();
        if ended && disk.peek(&files.inputs).is_some() {
            found.push(violation(6, format!("run {} ended but its inputs file is still kept", entry.run)));
        }
        match (&entry.phase, journal) {
            (_, Some(Err(problem))) => found.push(violation(6, problem)),
            (RunPhase::Settled { outcome, .. }, Some(Ok(journal))) => match &journal.end {
                Some(end) if &end.outcome == outcome => {
                    if found.is_empty() {
                        verified.insert(entry.run.clone());
                    }
                }
                Some(end) => found.push(violation(
                    6,
                    format!("run {} settled as {outcome} but its journal ended {}", entry.run, end.outcome),
                )),
                None => found.push(violation(6, format!("run {} is settled but its journal has no end", entry.run))),
            },
            // A journal whose header never became durable (a crash between its write and its
            // fsync, the name made durable by another run's directory fsync) is what recovery
            // releases as never started, removing it: the checker reads removed files too.
            (RunPhase::Released { .. }, Some(Ok(journal))) if journal.header.is_some() => {
                found.push(violation(6, format!("run {} was released as never started but has a journal", entry.run)))
            }
            _ => {}
        }
    }
    for (key, mut runs) in by_key {
        runs.sort_by_key(|entry| entry.sequence);
        for pair in runs.windows(2) {
            let (earlier, later) = (pair[0], pair[1]);
            let still_held = once_expires_at(earlier, once_keep_ms_of(&earlier.tool))
                .is_none_or(|expires| later.reserved_at_ms < expires);
            if still_held {
                found.push(violation(
                    3,
                    format!("once key {key} maps to runs {} and {} while held", earlier.run, later.run),
                ));
            }
        }
    }
    found
}

/// When a run's `once` key stops holding, computed here rather than by the server's own
/// `RunEntry::once_expires_at`, so a bug there cannot blind the check: `keep` after a settle,
/// at once for a released run, never while open.
fn once_expires_at(entry: &warden::store::ledger::RunEntry, keep_ms: u64) -> Option<u64> {
    match &entry.phase {
        RunPhase::Settled { at_ms, .. } => Some(at_ms.saturating_add(keep_ms)),
        RunPhase::Released { at_ms } => Some(*at_ms),
        RunPhase::Open => None,
    }
}

/// Runs still open in the ledger.
pub fn open_runs(disk: &SimDisk, journals: &Path) -> Vec<String> {
    ledger_state(disk, journals)
        .map(|s| s.runs.values().filter(|e| e.is_open()).map(|e| e.run.clone()).collect())
        .unwrap_or_default()
}

pub fn journals_dir(root: &Path) -> PathBuf {
    root.join("journals")
}
