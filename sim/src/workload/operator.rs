//! The operator model: beside the live server (its admin channel takes the word) or with it
//! stopped, it looks at each waiting run's service records (for every kind of action: whether the services saw
//! more of its signature than the journals claim, `truth.rs`) and resolves it, or asks for a
//! halted run to be resumed, as the runbook says.

use warden::base::layout::WAITING_DIR;
use warden::run::runs::WaitingRecord;

use crate::checks::check;
use crate::checks::truth;
use crate::env::world::World;
use crate::report::Report;
use crate::report::Violation;

/// The waiting records on disk.
pub fn waiting_records(world: &World) -> Vec<std::path::PathBuf> {
    let waiting_dir = World::path("journals").join(WAITING_DIR);
    world.disk.files().into_iter().filter(|p| p.parent() == Some(waiting_dir.as_path())).collect()
}

fn waiting_record(world: &World, path: &std::path::Path, report: &mut Report) -> Option<WaitingRecord> {
    let bytes = world.disk.peek(path).unwrap_or_default();
    let line = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let record = warden::store::record::decode::<WaitingRecord>(line);
    if record.is_err() {
        report.violations.push(Violation { invariant: 6, message: format!("{} does not parse", path.display()) });
    }
    record.ok()
}

/// A run the operator resolved beside a live server (through its admin channel) must move on
/// in that server, before any restart: its journal gets a record after the operator's word,
/// or the run settles. One that only a restart would move was resolved behind the server's
/// back (the word appended to a journal the server owns, without it knowing).
pub fn resolved_runs_moved_on(world: &World, resolved: &[(String, std::path::PathBuf)], report: &mut Report) {
    let Ok(state) = check::ledger_state(&world.disk, &World::path("journals")) else { return };
    for (run, journal) in resolved {
        if !state.run(run).is_some_and(|entry| entry.is_open()) {
            continue;
        }
        let bytes = world.disk.peek(journal).unwrap_or_default();
        let last = bytes.split(|b| *b == b'\n').rfind(|line| !line.is_empty()).unwrap_or_default();
        let tag = crate::env::oracle::record_tag(last);
        if matches!(tag, Some("resolved" | "retried")) {
            let message = format!(
                "run {run} was resolved beside the live server, which did not resume it (its journal ends with the \
                 operator's word)"
            );
            report.violations.push(Violation { invariant: 10, message });
        }
    }
}

/// On the store, the word goes to the run's owner while it serves: one stopping (its lease lost
/// in a pause) says to start it again, which the liveness phase does before the operator asks
/// again; one running its most runs at once (beside peers, servers run on while the operator
/// types) says to resolve again in a moment. Not a defect: a run still open at the end is.
fn owner_is_down(world: &World, problem: &str) -> bool {
    // A server whose lease ended as it took the word wrote nothing and stops; the run's next
    // owner takes it up, and the operator answers again then.
    let lease_lost = problem.contains("no longer holds its lease") && problem.contains("nothing was written");
    // A server draining when the word comes (on files or the store) says to resolve once it
    // has stopped: the operator's next pass comes after the world settled.
    let stopping = problem.contains("the server is stopping: resolve once it has stopped");
    stopping
        || world.on_the_store()
            && (problem.contains("start the server again") || problem.contains("again in a moment") || lease_lost)
}

/// A halted run: the runbook says resume it again once the server is back.
fn resume_halted(world: &World, journal: std::path::PathBuf, run: &str, report: &mut Report) -> bool {
    let outcome =
        world.start_command(move |env| Box::pin(async move { warden::commands::resume_halted(&env, &journal).await }));
    match &outcome {
        Err(problem) if owner_is_down(world, problem) => {}
        Err(problem) => {
            let message = format!("the operator could not resume halted run {run}: {problem}");
            report.violations.push(Violation { invariant: 10, message });
        }
        Ok(_) => {}
    }
    report.events.push((world.clock.now(), "operator".into(), format!("resumed halted {}", &run[..8])));
    outcome.is_ok()
}

/// The command `warden mcp status` prints for `run` after "resolve with:", as a person would
/// copy it: the run (by the manifest and its id, or by its journal in older records), and the
/// action (`--op`) or `--resume`.
enum Printed {
    Resolve { run: Named, op: u64 },
    Resume { run: Named },
}

/// How a printed command names its run.
enum Named {
    Journal(std::path::PathBuf),
    /// The manifest and the run's id.
    Run(std::path::PathBuf, String),
}

/// The word the simulated operator gives: its account and a note, kept in the journal.
fn word() -> warden::store::journal::Word {
    warden::store::journal::Word { account: "operator".into(), note: Some("checked the service's records".into()) }
}

/// The filled-in `--happened '...'` argument `warden mcp status` prints for `run`.
fn printed_example(status: &str, run: &str) -> Option<String> {
    let line = status.lines().find(|line| line.contains(run))?;
    let (_, after) = line.split_once("--happened '")?;
    after.split_once('\'').map(|(example, _)| example.to_string())
}

/// Whether `warden resolve --happened` refuses a result that is not in the action's shape
/// (`Err`: what it said instead).
fn refuses_a_wrong_shape(world: &World, journal: &std::path::Path, op: u64) -> Result<(), String> {
    let journal = journal.to_path_buf();
    let outcome = world.start_command(move |env| {
        Box::pin(async move { warden::commands::resolve(&env, &journal, op, Some(r#"{"note": "seen"}"#), None).await })
    });
    match outcome {
        Err(problem) if problem.contains("for example") => Ok(()),
        // Refused before its shape was looked at, for a moment (the server runs its most
        // runs at once) or because the owner is down: nothing was taken (seed 326620).
        Err(problem) if problem.contains("again in a moment") || owner_is_down(world, &problem) => Ok(()),
        Ok(said) => Err(format!("it took it: {said}")),
        Err(problem) => Err(format!("it refused it for another reason: {problem}")),
    }
}

fn printed_command(status: &str, run: &str) -> Result<Printed, String> {
    let line = status.lines().find(|line| line.contains(run)).ok_or("it does not list the run")?;
    let (_, command) = line.split_once("resolve with: ").ok_or_else(|| format!("it names no command: {line}"))?;
    let words: Vec<&str> = command.split_whitespace().collect();
    let after = |flag: &str| words.iter().position(|w| *w == flag).and_then(|at| words.get(at + 1)).copied();
    let run = match (after("--journal"), words.get(2..4)) {
        (Some(journal), _) => Named::Journal(journal.into()),
        (None, Some([manifest, run])) if !manifest.starts_with("--") => Named::Run(manifest.into(), run.to_string()),
        _ => return Err(format!("its command names neither a journal nor a manifest and a run: {command}")),
    };
    if words.contains(&"--resume") {
        return Ok(Printed::Resume { run });
    }
    let op = after("--op").and_then(|op| op.parse().ok());
    let op = op.ok_or_else(|| format!("its command names no action: {command}"))?;
    Ok(Printed::Resolve { run, op })
}

/// The journal the printed command's run has, as `warden resolve` finds it: by the manifest
/// and the run's id (what it shows must name the action whole), or the journal named.
fn journal_of(world: &World, named: Named, record: &WaitingRecord, report: &mut Report) -> Option<std::path::PathBuf> {
    let (manifest, run) = match named {
        Named::Journal(journal) => return Some(on_the_simulated_disk(world, journal, record)),
        Named::Run(manifest, run) => (manifest, run),
    };
    // A record made on another machine (`--from-journals`) names that machine's manifest.
    let manifest = if world.disk.peek(&manifest).is_some() { manifest } else { World::path("manifest.json") };
    // The command's answer is text: the journal's path on its first line, then what it shows.
    let found = world.start_command(move |env| {
        Box::pin(async move {
            let (journal, shown) = warden::commands::waiting_run(&env, &manifest, &run).await?;
            Ok(format!("{}\n{shown}", journal.display()))
        })
    });
    let found = found.map(|text| text.split_once('\n').map(|(journal, shown)| (journal.into(), shown.to_string())));
    let problem = match found {
        Ok(Some((journal, shown))) if shows_the_action_whole(&shown, record) => return Some(journal),
        Ok(None) => "`warden resolve` found no journal".to_string(),
        Ok(Some((_, shown))) => {
            format!("what `warden resolve` shows leaves out the action's target or amount:\n{shown}")
        }
        Err(problem) if owner_is_down(world, &problem) => return None,
        Err(problem) => format!("`warden resolve` could not find run {} by its id: {problem}", record.run),
    };
    report.violations.push(Violation { invariant: 10, message: problem });
    None
}

/// Whether the text `warden resolve` shows names the action's amount and target (a halted
/// run's shows why it halted).
fn shows_the_action_whole(shown: &str, record: &WaitingRecord) -> bool {
    let action = serde_json::from_value::<warden::broker::Action>(record.action.clone());
    let Some(action) = action.ok().filter(|_| !record.halted) else {
        return shown.contains("why:");
    };
    let amount =
        action.money().is_none_or(|money| shown.contains(&format!("{} {}", money.amount_text(), money.currency)));
    let target =
        record.halted || action.target.is_empty() || shown.contains(&warden::base::text::printable(&action.target));
    amount && target
}

/// The operator follows the runbook, beside a live server (its admin channel takes the word)
/// or with it stopped: `warden mcp status` lists the waiting runs and the command that
/// resolves each; for each, look at the service's own records and run that command. Returns
/// the runs resolved, with their journals.
pub fn operator(world: &World, report: &mut Report) -> Vec<(String, std::path::PathBuf)> {
    let mut resolved = Vec::new();
    let records = waiting_records(world);
    if records.is_empty() {
        return resolved;
    }
    let manifest = World::path("manifest.json");
    let status =
        world.start_command(move |env| Box::pin(async move { warden::commands::status(&env, &manifest, false).await }));
    let status = match status {
        Ok(status) => status,
        Err(problem) => {
            let message = format!("`warden mcp status` failed with runs waiting: {problem}");
            report.violations.push(Violation { invariant: 10, message });
            return resolved;
        }
    };
    let status_json = status_as_json(world);
    for path in &records {
        let Some(record) = waiting_record(world, path, report) else { continue };
        json_status_agrees(&status_json, &record, report);
        let printed = match printed_command(&status, &record.run) {
            Ok(printed) => printed,
            Err(problem) => {
                let message = format!("`warden mcp status` does not tell how to resolve run {}: {problem}", record.run);
                report.violations.push(Violation { invariant: 10, message });
                continue;
            }
        };
        let (journal, op) = match printed {
            Printed::Resolve { run, op } => match journal_of(world, run, &record, report) {
                Some(journal) => (journal, op),
                None => continue,
            },
            Printed::Resume { run } => {
                let Some(journal) = journal_of(world, run, &record, report) else { continue };
                if resume_halted(world, journal.clone(), &record.run, report) {
                    resolved.push((record.run.clone(), journal));
                }
                continue;
            }
        };
        let Some(answer) = answer_for(world, &status, &record, &journal, op, report) else { continue };
        let happened = answer.is_some();
        let journal_resolved = journal.clone();
        let outcome = world.start_command(move |env| {
            Box::pin(
                async move { warden::commands::resolve(&env, &journal, op, answer.as_deref(), Some(&word())).await },
            )
        });
        match &outcome {
            Ok(_) => resolved.push((record.run.clone(), journal_resolved)),
            Err(problem) if owner_is_down(world, problem) => {}
            Err(problem) => report.violations.push(Violation {
                invariant: 10,
                message: format!("the operator could not resolve {}: {problem}", record.run),
            }),
        }
        report.events.push((
            world.clock.now(),
            "operator".into(),
            format!("resolved {} as {}", &record.run[..8], if happened { "happened" } else { "not happened" }),
        ));
    }
    resolved
}

/// The journal a printed command names, as the operator finds it here: a waiting record made
/// on another machine (`--from-journals`) names the journal where that machine kept it, which
/// the operator reads as the same run's journal in this server's journals folder.
fn on_the_simulated_disk(world: &World, printed: std::path::PathBuf, record: &WaitingRecord) -> std::path::PathBuf {
    if world.disk.peek(&printed).is_some() {
        return printed;
    }
    warden::base::layout::RunFiles::new(&World::path("journals"), &record.tool, &record.run).journal
}

/// What the operator answers for a waiting run's action, from the services' own records:
/// `Some(None)` it did not happen, `Some(Some(result))` it did (the example the status
/// printed), `None` when the status gives no example to copy (a violation, recorded).
fn answer_for(
    world: &World,
    status: &str,
    record: &WaitingRecord,
    journal: &std::path::Path,
    op: u64,
    report: &mut Report,
) -> Option<Option<String>> {
    let happened = match serde_json::from_value::<warden::broker::Action>(record.action.clone()) {
        Ok(action) => check::ledger_state(&world.disk, &World::path("journals"))
            .is_ok_and(|state| truth::happened(world, &state, &record.run, &action)),
        Err(_) => false,
    };
    // A careless operator first writes a result of the wrong shape: it must be refused,
    // naming what is wrong. Then the filled-in example the status printed, as a person
    // would copy it.
    if let (true, Err(said)) = (happened, refuses_a_wrong_shape(world, journal, op)) {
        let message = format!(
            "`warden resolve --happened` did not refuse a result of the wrong shape for {}: {said}",
            record.run
        );
        report.violations.push(Violation { invariant: 5, message });
    }
    match (happened, printed_example(status, &record.run)) {
        (false, _) => Some(None),
        (true, Some(example)) => Some(Some(example)),
        (true, None) => {
            let message = format!("`warden mcp status` shows no example result for run {}", record.run);
            report.violations.push(Violation { invariant: 5, message });
            None
        }
    }
}

/// `warden mcp status --json`, as monitoring would read it (`Null` when it fails: the text
/// report's check names the failure).
fn status_as_json(world: &World) -> serde_json::Value {
    let manifest = World::path("manifest.json");
    let status =
        world.start_command(move |env| Box::pin(async move { warden::commands::status(&env, &manifest, true).await }));
    status.ok().and_then(|text| serde_json::from_str(&text).ok()).unwrap_or_default()
}

/// The JSON report lists a waiting run as waiting, with the command its waiting record names.
fn json_status_agrees(status: &serde_json::Value, record: &WaitingRecord, report: &mut Report) {
    let listed = status["unfinished"].as_array().into_iter().flatten().find(|run| run["run"] == record.run.as_str());
    let agrees =
        listed.is_some_and(|run| run["waiting_for_operator"] == true && run["resolve"] == record.resolve.as_str());
    if !agrees {
        let message =
            format!("`warden mcp status --json` does not list run {} as waiting with its command", record.run);
        report.violations.push(Violation { invariant: 10, message });
    }
}
