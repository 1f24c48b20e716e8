//! Recovery at start (seed 000 section 7): before answering anything, the server goes
//! through the ledger and the journal directory together. Each run falls in one cell of a
//! decision table over (ledger phase, inputs file, journal state, waiting record); each cell
//! names its action, and a cell that can only come from a bug or from damage stops the server.

use std::collections::BTreeMap;

use crate::base::layout::WAITING_DIR;
use crate::env::RecordKind;
use crate::run::runs::{binding, Runs};
use crate::run::store::Fatal;
use crate::run::store::RunStore;
use crate::store::journal::Journal;
use crate::store::ledger::RunPhase;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedgerPhase {
    Absent,
    Open,
    Settled,
    Released,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalState {
    Absent,
    /// The file exists but holds no intact record: the header's write was torn.
    Headless,
    /// A header and maybe records, no end.
    Started,
    Ended,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Nothing,
    /// Crash after step 1 or 2: the run never started. Remove the inputs file, release.
    Release,
    /// Crash during steps 3 to 5: resume (re-execute against the journal).
    Resume,
    /// Crash between the journal's end and step 6: settle from the end record.
    SettleFromEnd,
    /// Crash after step 6 before its clean-up: remove the inputs file and waiting record.
    CleanUp,
    /// Nothing can explain this state: stop the server, naming it.
    Refuse(&'static str),
}

/// The decision table. `inputs` and `waiting` say whether those files exist.
pub fn decide(phase: LedgerPhase, inputs: bool, journal: JournalState, waiting: bool) -> Action {
    use Action::*;
    use JournalState as J;
    use LedgerPhase as L;
    match (phase, inputs, journal, waiting) {
        (L::Absent, _, J::Absent, false) if !inputs => Nothing,
        (L::Absent, _, _, _) => Refuse("files of a run with no reservation in the ledger"),

        (L::Open, false, J::Absent | J::Headless, false) => Release,
        (L::Open, true, J::Absent | J::Headless, false) => {
            // Step 2 was durable; step 3 (the header) was not, or was torn: the run had not
            // begun, so it is released like step 1 (its inputs file is removed first).
            Release
        }
        (L::Open, true, J::Started, _) => Resume,
        (L::Open, _, J::Ended, _) => SettleFromEnd,
        (L::Open, false, J::Started, _) => Refuse("an unfinished run whose kept arguments are gone"),
        (L::Open, _, J::Absent | J::Headless, true) => Refuse("a waiting record for a run that never started"),

        (L::Settled, false, J::Ended | J::Absent, false) => Nothing,
        (L::Settled, _, J::Ended | J::Absent, _) => CleanUp,
        (L::Settled, _, J::Started | J::Headless, _) => Refuse("a settled run whose journal has no end"),

        (L::Released, false, J::Absent, false) => Nothing,
        (L::Released, _, J::Absent, _) => CleanUp,
        (L::Released, _, _, _) => Refuse("a journal for a run the ledger released as never started"),
    }
}

/// What recovery did, for the log and for tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub released: Vec<String>,
    pub resumed: Vec<String>,
    pub settled_from_end: Vec<String>,
    pub cleaned: Vec<String>,
}

struct Found {
    tool: String,
    inputs: bool,
    journal: bool,
    waiting: bool,
}

/// Lists the run files under the journals directory: run id -> where its files are.
async fn scan(runs: &Runs) -> Result<BTreeMap<String, Found>, Fatal> {
    let env = &runs.env;
    let root = &runs.journals;
    let io = |what: &str, e: std::io::Error| Fatal::storage(format!("{}: {what}: {e}", root.display()));
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    if !runs.records.in_files_here() {
        return scan_database(runs).await;
    }
    if !env.disk.exists(root).await.map_err(|e| io("cannot see the journals directory", e))? {
        return Ok(found);
    }
    for tool in env.disk.list(root).await.map_err(|e| io("cannot list", e))? {
        let tool_dir = root.join(&tool);
        if tool == WAITING_DIR || tool.starts_with("server.") {
            continue;
        }
        let Some(shards) = listed(env.disk.list(&tool_dir).await, &tool_dir)? else {
            continue;
        };
        for shard in shards {
            let shard_dir = tool_dir.join(&shard);
            let Some(files) = listed(env.disk.list(&shard_dir).await, &shard_dir)? else {
                continue;
            };
            for file in files {
                let Some((run, kind)) = file.split_once('.') else {
                    continue;
                };
                // A run's log is not a record: no cell of the table looks at it.
                if !matches!(kind, "inputs.json" | "journal") || !is_run_id(run) {
                    continue;
                }
                let entry = found.entry(run.to_string()).or_insert(Found {
                    tool: tool.clone(),
                    inputs: false,
                    journal: false,
                    waiting: false,
                });
                match kind {
                    "inputs.json" => entry.inputs = true,
                    _ => entry.journal = true,
                }
            }
        }
    }
    let waiting_dir = root.join(WAITING_DIR);
    if env.disk.exists(&waiting_dir).await.map_err(|e| io("cannot see the waiting directory", e))? {
        for file in env.disk.list(&waiting_dir).await.map_err(|e| io("cannot list waiting", e))? {
            if let Some(run) = file.strip_suffix(".json").filter(|run| is_run_id(run)) {
                let tool = runs.ledger.state().run(run).map(|e| e.tool.clone()).unwrap_or_default();
                found
                    .entry(run.to_string())
                    .or_insert(Found { tool, inputs: false, journal: false, waiting: false })
                    .waiting = true;
            }
        }
    }
    Ok(found)
}

/// The kept arguments and waiting records in the PostgreSQL store: what a crash can leave
/// behind a settled run (its settle is durable before they go). Journals are not listed: the
/// ledger knows every run that has one (the shared ledger is never compacted), and they grow
/// with history, which a start must not read.
async fn scan_database(runs: &Runs) -> Result<BTreeMap<String, Found>, Fatal> {
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    for kind in [RecordKind::Inputs, RecordKind::Waiting] {
        for run in runs.records.listed_in_database(kind).await.map_err(Fatal::storage)? {
            let tool = runs.ledger.state().run(&run).map(|entry| entry.tool.clone()).unwrap_or_default();
            let entry = found.entry(run).or_insert(Found { tool, inputs: false, journal: false, waiting: false });
            match kind {
                RecordKind::Inputs => entry.inputs = true,
                _ => entry.waiting = true,
            }
        }
    }
    Ok(found)
}

/// A directory's names; `None` for a name that is not a directory (or is gone). Any other
/// error stops recovery: a run's files it could not see would be taken as absent.
fn listed(listing: std::io::Result<Vec<String>>, dir: &std::path::Path) -> Result<Option<Vec<String>>, Fatal> {
    match listing {
        Ok(names) => Ok(Some(names)),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => Ok(None),
        Err(e) => Err(Fatal::storage(format!("{}: cannot list: {e}", dir.display()))),
    }
}

/// Applies the decision table to every run this instance owns, resuming interrupted runs one
/// after another; refuses to start while a run needs an operator.
pub async fn recover(runs: &Runs) -> Result<Report, Fatal> {
    let found = scan(runs).await?;
    // Only a run with files on disk or open in the ledger can need anything: a settled or
    // released run whose files are gone is in its final cell (Nothing) already.
    let owners = match runs.records.store() {
        Some(target) => Some(crate::store::owners::listed(&runs.env, target).await.map_err(Fatal::storage)?),
        None => None,
    };
    // Read after the records and the owners: a run they name was reserved before, so the
    // ledger read now knows it.
    caught_up(runs).await?;
    let mut all: Vec<String> = found.keys().cloned().collect();
    all.extend(runs.ledger.state().runs.values().filter(|entry| entry.is_open()).map(|entry| entry.run.clone()));
    all.sort_unstable();
    all.dedup();
    if let Some(owners) = owners {
        all = owned_here(runs, all, &owners).await?;
    }
    let (report, refusals) = apply_the_table(runs, Scope::Start, all, &found).await?;
    if !refusals.is_empty() {
        return Err(Fatal::needs_operator(format!(
            "refusing to start; these runs need an operator (let unfinished runs end before changing tools or \
             upgrading, seed 000 section 7):\n{}",
            refusals.join("\n")
        )));
    }
    Ok(report)
}

/// Applies the decision table to runs this instance took over from one whose lease ended
/// (`run::takeover`), as a start would; a run that needs an operator is named in the second
/// part and left as it is (its journal says why), while the others go on.
pub async fn recover_taken(runs: &Runs, taken: Vec<String>) -> Result<(Report, Vec<String>), Fatal> {
    // Each is held in progress from now until its own recovery is done: the operator's word or
    // a client's retry reaching this instance meanwhile is refused, not carried out beside it.
    let mut held: BTreeMap<String, _> = taken.iter().map(|run| (run.clone(), runs.running(run))).collect();
    caught_up(runs).await?;
    let (mut report, mut refusals) = (Report::default(), Vec::new());
    for run in taken {
        let (done, refused) = apply_the_table(runs, Scope::TakenOver, vec![run.clone()], &BTreeMap::new()).await?;
        held.remove(&run);
        report.released.extend(done.released);
        report.resumed.extend(done.resumed);
        report.settled_from_end.extend(done.settled_from_end);
        report.cleaned.extend(done.cleaned);
        refusals.extend(refused);
    }
    Ok((report, refusals))
}

/// Folds what other instances appended to the shared ledger (nothing for a file).
async fn caught_up(runs: &Runs) -> Result<(), Fatal> {
    let held = runs.ledger.lock().await;
    runs.ledger.catch_up(&held).await.map_err(Fatal::from)
}

/// The runs of `all` this instance acts on: the open runs it owns, the open runs a Warden
/// before owners left without one (claimed first), and the leftovers of finished runs
/// (removing them twice is harmless). An open run another instance owns is left to it.
async fn owned_here(runs: &Runs, all: Vec<String>, owners: &BTreeMap<String, String>) -> Result<Vec<String>, Fatal> {
    let target = runs.records.store().expect("owners are kept in the store");
    let me = crate::store::owners::me(target);
    let mut mine = Vec::with_capacity(all.len());
    for run in all {
        let here = match owners.get(&run) {
            Some(owner) => owner == me || !is_open(runs, &run),
            None => claimed_unless_ended(runs, target, &run).await?,
        };
        if here {
            mine.push(run);
        }
    }
    Ok(mine)
}

fn is_open(runs: &Runs, run: &str) -> bool {
    runs.ledger.state().run(run).is_some_and(|entry| entry.is_open())
}

/// Whether a run the owners did not name is this instance's to act on: ended (its leftovers
/// are anyone's to remove), or open and claimed. A run another instance reserved after the
/// owners were read may end before the claim: the claim is made only on the ledger as read,
/// and each line that came after is read before deciding again.
async fn claimed_unless_ended(runs: &Runs, target: &crate::env::PostgresTarget, run: &str) -> Result<bool, Fatal> {
    for _ in 0..crate::limits::ADMISSION_TRIES_MAX {
        if !is_open(runs, run) {
            return Ok(true);
        }
        let after = runs.ledger.seen().expect("owners are kept beside a shared ledger");
        match crate::store::owners::claim(&runs.env, target, run, after).await.map_err(Fatal::storage)? {
            Some(claimed) => return Ok(claimed),
            None => caught_up(runs).await?,
        }
    }
    Err(Fatal::storage(format!(
        "run {run} has no owner, and other instances kept appending to the shared ledger while this one tried to \
         claim it; start again"
    )))
}

/// Why the table is applied: a start (which refuses to go on while a run needs an operator)
/// or a takeover (which cannot refuse: the runs are its now).
enum Scope {
    Start,
    TakenOver,
}

/// The decision table applied to each of `all`: releases and clean-ups done at once, then the
/// interrupted runs resumed one after another unless some run needs an operator. Returns what
/// was done and the refusals.
async fn apply_the_table(
    runs: &Runs,
    scope: Scope,
    all: Vec<String>,
    found: &BTreeMap<String, Found>,
) -> Result<(Report, Vec<String>), Fatal> {
    let mut report = Report::default();
    let mut refusals = Vec::new();
    let mut to_resume = Vec::new();
    for run in all {
        let examined = match examine(runs, &run, found.get(&run)).await? {
            Ok(examined) => examined,
            Err(problem) => {
                refusals.push(problem);
                continue;
            }
        };
        let Examined { tool, journal, cell: (phase, inputs, journal_state, waiting) } = examined;
        match decide(phase, inputs, journal_state, waiting) {
            Action::Nothing => {}
            Action::Refuse(why) => refusals.push(format!("run {run} of tool `{tool}`: {why}")),
            Action::Release => {
                RunStore::release(runs, &tool, &run).await?;
                report.released.push(run);
            }
            Action::CleanUp => {
                runs.remove_record(&tool, &run, RecordKind::Inputs, true).await?;
                runs.remove_record(&tool, &run, RecordKind::Waiting, true).await?;
                report.cleaned.push(run);
            }
            Action::SettleFromEnd | Action::Resume => {
                let journal = journal.expect("a journal exists in these cells");
                match resumable(runs, &run, &tool, &journal) {
                    Ok(()) => to_resume.push((run, tool, journal, None)),
                    // A run waiting for its client's input has no action in doubt: when its
                    // program or config changed, it ends instead of stopping the start.
                    Err(problem) if journal.awaiting_round().is_some() && runs.catalog.tool(&tool).is_some() => {
                        to_resume.push((run, tool, journal, Some(problem)))
                    }
                    Err(problem) => refusals.push(problem),
                }
            }
        }
    }
    // A start resumes nothing while a run needs an operator; runs taken over go on, each
    // refused one left where it is.
    if !refusals.is_empty() && matches!(scope, Scope::Start) {
        return Ok((report, refusals));
    }
    for (run, tool, journal, changed) in to_resume {
        if let Some(problem) = changed {
            end_waiting(runs, &run, &tool, &problem).await?;
            report.settled_from_end.push(run);
            continue;
        }
        let ended = resume(runs, &run, &tool, &journal, "resuming after a restart").await?;
        if ended {
            report.settled_from_end.push(run);
        } else {
            report.resumed.push(run);
        }
    }
    Ok((report, refusals))
}

/// One run as recovery finds it: its tool, its journal, and its cell of the table.
struct Examined {
    tool: String,
    journal: Option<Journal>,
    cell: (LedgerPhase, bool, JournalState, bool),
}

/// Reads what the ledger and the disk say of `run`. An I/O error stops recovery (the outer
/// `Err`); a damaged journal is a refusal naming it (the inner `Err`).
async fn examine(runs: &Runs, run: &str, files: Option<&Found>) -> Result<Result<Examined, String>, Fatal> {
    let (tool, phase) = match runs.ledger.state().run(run) {
        Some(entry) => (entry.tool.clone(), phase_of(&entry.phase)),
        None => (files.map(|f| f.tool.clone()).unwrap_or_default(), LedgerPhase::Absent),
    };
    if matches!(phase, LedgerPhase::Settled | LedgerPhase::Released) {
        return Ok(Ok(finished(tool, phase, files)));
    }
    // A run the ledger knows is checked at its own paths, not only through the scan. An I/O
    // error is not "absent": reading it so could release an open run and delete its journal.
    let known = phase != LedgerPhase::Absent && is_run_id(run);
    let exists = |kind| {
        let tool = &tool;
        async move { runs.records.exists(tool, run, kind).await.map_err(Fatal::storage) }
    };
    let (journal_exists, inputs, waiting) = match known {
        true => {
            (exists(RecordKind::Journal).await?, exists(RecordKind::Inputs).await?, exists(RecordKind::Waiting).await?)
        }
        false => (files.is_some_and(|f| f.journal), files.is_some_and(|f| f.inputs), files.is_some_and(|f| f.waiting)),
    };
    let journal = match journal_exists {
        true => match runs.read_journal(&tool, run).await {
            Ok(journal) => journal,
            Err(problem) => return Ok(Err(problem)),
        },
        false => None,
    };
    let journal_state = match &journal {
        None => JournalState::Absent,
        Some(j) if j.header.is_none() => JournalState::Headless,
        Some(j) if j.end.is_some() => JournalState::Ended,
        Some(_) => JournalState::Started,
    };
    Ok(Ok(Examined { tool, journal, cell: (phase, inputs, journal_state, waiting) }))
}

fn phase_of(phase: &RunPhase) -> LedgerPhase {
    match phase {
        RunPhase::Open => LedgerPhase::Open,
        RunPhase::Settled { .. } => LedgerPhase::Settled,
        RunPhase::Released { .. } => LedgerPhase::Released,
    }
}

/// A settled or released run, from the scan alone: start-up reads no journal of a finished
/// run, so it does not grow with history. The ledger settles a run only once its journal's
/// end is durable, so a settled run's journal has ended by construction (the simulator checks
/// that every settled run's journal ends as the ledger says); a released run's journal must
/// not exist, which the scan tells. What is left to do is cleaning up files left over, and
/// the scan lists every file (a listing that fails stops recovery, never reads as absent).
fn finished(tool: String, phase: LedgerPhase, files: Option<&Found>) -> Examined {
    let (journal, inputs, waiting) = files.map_or((false, false, false), |f| (f.journal, f.inputs, f.waiting));
    let journal_state = match (journal, phase) {
        (false, _) => JournalState::Absent,
        (true, LedgerPhase::Settled) => JournalState::Ended,
        // A journal the ledger says never started: refused by the table, whatever it holds.
        (true, _) => JournalState::Started,
    };
    Examined { tool, journal: None, cell: (phase, inputs, journal_state, waiting) }
}

/// Whether an unfinished run can resume under the current manifest and binary.
/// A run whose journal has ended runs no program again (only its settle is left), so a
/// changed program, config or version does not stop it.
fn resumable(runs: &Runs, run: &str, tool: &str, journal: &Journal) -> Result<(), String> {
    let current = runs
        .catalog
        .tool(tool)
        .ok_or_else(|| format!("run {run} is unfinished but its tool `{tool}` is no longer in the manifest"))?;
    if journal.end.is_some() {
        return Ok(());
    }
    match binding_problem(journal, current) {
        Some(problem) => Err(format!("run {run} of tool `{tool}` cannot resume: {problem}")),
        None => Ok(()),
    }
}

/// Ends a run that waits for its client's input and cannot resume (`problem`): its end says
/// why, its program does not run.
async fn end_waiting(runs: &Runs, run: &str, tool_name: &str, problem: &str) -> Result<(), Fatal> {
    let tool = runs.catalog.tool(tool_name).expect("checked before");
    let inputs = runs.read_inputs(tool_name, run).await.map_err(Fatal::storage)?.unwrap_or_default();
    let why = format!("it waited for its client's input and cannot resume: {problem}");
    runs.log_run(tool_name, run, &format!("ends: {why}")).await;
    runs.execute_to_end(tool, run, &inputs, crate::run::driver::Entry::Abandoned(why), &[]).await.map(|_| ())
}

/// Resumes `run` in a live server after the operator's word was journaled (the admin
/// channel), by the same rules as a start: it must still be resumable under this manifest.
/// A run that cannot resume stays unfinished, for the next start to refuse with its reason.
pub async fn resume_now(runs: &Runs, run: &str, tool: &str) -> Result<(), Fatal> {
    let journal = runs.read_journal(tool, run).await.map_err(Fatal::storage)?;
    let journal = journal.ok_or_else(|| Fatal::storage(format!("run {run}: its journal vanished")))?;
    if let Err(problem) = resumable(runs, run, tool, &journal) {
        runs.env.log(&format!("run {run} stays unfinished: {problem}"));
        return Ok(());
    }
    resume(runs, run, tool, &journal, "resuming after the operator's word").await.map(|_| ())
}

/// Resumes one run through its state machine; returns whether its journal had ended.
async fn resume(runs: &Runs, run: &str, tool_name: &str, journal: &Journal, why: &str) -> Result<bool, Fatal> {
    let tool = runs.catalog.tool(tool_name).expect("checked by resumable");
    if journal.torn_tail_bytes > 0 {
        runs.drop_torn_tail(tool_name, run, journal.intact_len).await?;
    }
    let ended = journal.end.is_some();
    let inputs = match runs.read_inputs(tool_name, run).await.map_err(Fatal::storage)? {
        Some(inputs) => inputs,
        None if ended => Default::default(),
        None => return Err(Fatal::storage(format!("run {run}: its kept arguments vanished during recovery"))),
    };
    let line = if ended { "settling from its journal's end after a restart" } else { why };
    runs.log_run(tool_name, run, line).await;
    // No client waits on a resumed run: a round it reaches asks every kind, and waits (a
    // `once` repeat reaches it; else it expires) rather than going on with no answers.
    let every_kind: Vec<String> = crate::program::ask::INPUT_KINDS.iter().map(|k| k.to_string()).collect();
    runs.execute_to_end(tool, run, &inputs, crate::run::driver::Entry::Resumed, &every_kind).await?;
    Ok(ended)
}

/// Run ids are 32 lowercase hexadecimal characters; any other name is not a run's file.
fn is_run_id(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn binding_problem(journal: &Journal, tool: &crate::catalog::Tool) -> Option<String> {
    let (_, recorded, _) = journal.header.as_ref()?;
    let current = binding(tool);
    if recorded.program != current.program {
        Some(format!("its program changed since it started ({})", tool.program.path.display()))
    } else if recorded.config != current.config {
        Some("the tool's configuration in the manifest changed since it started".to_string())
    } else if recorded.version != current.version {
        Some(format!("it was started by Warden {}, this is {}", recorded.version, current.version))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;
    use JournalState as J;
    use LedgerPhase as L;

    /// Every cell of the table, so a change to it is a visible change to this list.
    #[test]
    fn the_decision_table() {
        let cells = [
            ((L::Open, false, J::Absent, false), Release),
            ((L::Open, true, J::Absent, false), Release),
            ((L::Open, true, J::Headless, false), Release),
            ((L::Open, true, J::Started, false), Resume),
            ((L::Open, true, J::Started, true), Resume),
            ((L::Open, true, J::Ended, false), SettleFromEnd),
            ((L::Open, false, J::Ended, false), SettleFromEnd),
            ((L::Open, false, J::Started, false), Refuse("an unfinished run whose kept arguments are gone")),
            ((L::Settled, false, J::Ended, false), Nothing),
            ((L::Settled, false, J::Absent, false), Nothing),
            ((L::Settled, true, J::Ended, false), CleanUp),
            ((L::Settled, false, J::Ended, true), CleanUp),
            ((L::Released, false, J::Absent, false), Nothing),
            ((L::Released, true, J::Absent, false), CleanUp),
        ];
        for ((phase, inputs, journal, waiting), expected) in cells {
            assert_eq!(decide(phase, inputs, journal, waiting), expected, "{phase:?} {inputs} {journal:?} {waiting}");
        }
        assert!(matches!(decide(L::Absent, false, J::Started, false), Refuse(_)));
        assert!(matches!(decide(L::Absent, true, J::Absent, false), Refuse(_)));
        assert!(matches!(decide(L::Released, false, J::Ended, false), Refuse(_)));
        assert!(matches!(decide(L::Settled, false, J::Started, false), Refuse(_)));
        assert_eq!(decide(L::Absent, false, J::Absent, false), Nothing);
    }
}
