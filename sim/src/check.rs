//! Invariant checks over what a simulated world holds: the ledger and journals on the
//! simulated disk, and what the client was told. Each returns the violations it found,
//! named by invariant (DESIGN.md section 7).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use warden::base::layout::RunFiles;
use warden::store::journal::Journal;
use warden::store::ledger::{self, RunPhase, State, LEDGER_FILE};

use crate::disk::SimDisk;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: u8,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.invariant {
            0 => write!(f, "a broken assertion: {}", self.message),
            n => write!(f, "invariant {n}: {}", self.message),
        }
    }
}

fn violation(invariant: u8, message: String) -> Violation {
    Violation { invariant, message }
}

/// The ledger as it is on the disk now (a torn tail dropped, as recovery would).
pub fn ledger_state(disk: &SimDisk, journals: &Path) -> Result<State, Violation> {
    let file = journals.join(LEDGER_FILE);
    let bytes = disk.peek(&file).unwrap_or_default();
    ledger::parse(&file, &bytes).map(|(state, _)| state).map_err(|e| violation(6, e.to_string()))
}

pub fn journal(disk: &SimDisk, journals: &Path, tool: &str, run: &str) -> Option<Result<Journal, String>> {
    let path = RunFiles::new(journals, tool, run).journal;
    disk.peek(&path).map(|bytes| Journal::parse(&path, &bytes))
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
            (RunPhase::Released { .. }, Some(Ok(_))) => {
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

/// A journal line's record tag (`begin`, `done`, `end`...), read at its fixed place in the
/// checksummed line (`{"sum":"<16 hex>","rec":{"record":"<tag>"`) without parsing the line:
/// an end record may hold a result of a megabyte.
pub fn record_tag(line: &[u8]) -> Option<&str> {
    const HEAD: usize = "{\"sum\":\"".len() + 16;
    let rest = line.get(HEAD..)?.strip_prefix(b"\",\"rec\":{\"record\":\"")?;
    let end = rest.iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// The lines of `bytes` from the last to the first, each with its newline (the last may
/// have none), found with `memrchr`: a journal's last line may be a megabyte long.
pub fn lines_from_end(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut end = bytes.len();
    std::iter::from_fn(move || {
        if end == 0 {
            return None;
        }
        let body_end = if bytes[end - 1] == b'\n' { end - 1 } else { end };
        let start = memchr::memrchr(b'\n', &bytes[..body_end]).map_or(0, |n| n + 1);
        let line = &bytes[start..end];
        end = start;
        Some(line)
    })
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
