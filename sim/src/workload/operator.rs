//! The operator model: with the server stopped (resolve refuses beside a live one), it looks
//! at each waiting run's service records (for every kind of action: whether the services saw
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

/// A careless operator runs the resolve command with the server still running: it must
/// refuse (the server holds the journals' lock), or the journal gets a record the live
/// server does not know of.
pub fn resolve_beside_live_server(world: &World, report: &mut Report) {
    let Some(path) = waiting_records(world).into_iter().next() else { return };
    let Some(record) = waiting_record(world, &path, report).filter(|record| !record.halted) else { return };
    let (journal, op) = (std::path::PathBuf::from(&record.journal), record.op);
    let outcome = world
        .start_command(move |env| Box::pin(async move { warden::commands::resolve(&env, &journal, op, None).await }));
    report.events.push((
        world.clock.now(),
        "operator".into(),
        format!("tried resolving {} beside the server", &record.run[..8]),
    ));
    if outcome.is_ok() {
        let message = format!("`warden resolve` of run {} was accepted beside a live server", record.run);
        report.violations.push(Violation { invariant: 6, message });
    }
}

/// A halted run: the runbook says resume it again once the server is back.
fn resume_halted(world: &World, journal: std::path::PathBuf, run: &str, report: &mut Report) {
    let outcome =
        world.start_command(move |env| Box::pin(async move { warden::commands::resume_halted(&env, &journal).await }));
    if let Err(problem) = outcome {
        let message = format!("the operator could not resume halted run {run}: {problem}");
        report.violations.push(Violation { invariant: 10, message });
    }
    report.events.push((world.clock.now(), "operator".into(), format!("resumed halted {}", &run[..8])));
}

/// The command `warden mcp status` prints for `run` after "resolve with:", as a person would
/// copy it: the journal, and the action (`--op`) or `--resume`.
enum Printed {
    Resolve { journal: std::path::PathBuf, op: u64 },
    Resume { journal: std::path::PathBuf },
}

/// The filled-in `--happened '...'` argument `warden mcp status` prints for `run`.
fn printed_example(status: &str, run: &str) -> Option<String> {
    let line = status.lines().find(|line| line.contains(run))?;
    let (_, after) = line.split_once("--happened '")?;
    after.split_once('\'').map(|(example, _)| example.to_string())
}

/// Whether `warden resolve --happened` refuses a result that is not in the action's shape.
fn refuses_a_wrong_shape(world: &World, journal: &std::path::Path, op: u64) -> bool {
    let journal = journal.to_path_buf();
    let outcome = world.start_command(move |env| {
        Box::pin(async move { warden::commands::resolve(&env, &journal, op, Some(r#"{"note": "seen"}"#)).await })
    });
    matches!(outcome, Err(problem) if problem.contains("for example"))
}

fn printed_command(status: &str, run: &str) -> Result<Printed, String> {
    let line = status.lines().find(|line| line.contains(run)).ok_or("it does not list the run")?;
    let (_, command) = line.split_once("resolve with: ").ok_or_else(|| format!("it names no command: {line}"))?;
    let words: Vec<&str> = command.split_whitespace().collect();
    let after = |flag: &str| words.iter().position(|w| *w == flag).and_then(|at| words.get(at + 1)).copied();
    let journal = after("--journal").ok_or_else(|| format!("its command names no journal: {command}"))?.into();
    if words.contains(&"--resume") {
        return Ok(Printed::Resume { journal });
    }
    let op = after("--op").and_then(|op| op.parse().ok());
    let op = op.ok_or_else(|| format!("its command names no action: {command}"))?;
    Ok(Printed::Resolve { journal, op })
}

/// The operator follows the runbook with the server stopped (resolve refuses beside a live
/// one): `warden mcp status` lists the waiting runs and the command that resolves each; for
/// each, look at the service's own records and run that command.
pub fn operator(world: &World, report: &mut Report) {
    let records = waiting_records(world);
    if records.is_empty() {
        return;
    }
    let manifest = World::path("manifest.json");
    let status =
        world.start_command(move |env| Box::pin(async move { warden::commands::status(&env, &manifest).await }));
    let status = match status {
        Ok(status) => status,
        Err(problem) => {
            let message = format!("`warden mcp status` failed with runs waiting: {problem}");
            report.violations.push(Violation { invariant: 10, message });
            return;
        }
    };
    for path in &records {
        let Some(record) = waiting_record(world, path, report) else { continue };
        let printed = match printed_command(&status, &record.run) {
            Ok(printed) => printed,
            Err(problem) => {
                let message = format!("`warden mcp status` does not tell how to resolve run {}: {problem}", record.run);
                report.violations.push(Violation { invariant: 10, message });
                continue;
            }
        };
        let (journal, op) = match printed {
            Printed::Resolve { journal, op } => (journal, op),
            Printed::Resume { journal } => {
                resume_halted(world, journal, &record.run, report);
                continue;
            }
        };
        let happened = match serde_json::from_value::<warden::broker::Action>(record.action.clone()) {
            Ok(action) => check::ledger_state(&world.disk, &World::path("journals"))
                .is_ok_and(|state| truth::happened(world, &state, &record.run, &action)),
            Err(_) => false,
        };
        // A careless operator first writes a result of the wrong shape: it must be refused,
        // naming what is wrong. Then the filled-in example the status printed, as a person
        // would copy it.
        if happened && !refuses_a_wrong_shape(world, &journal, op) {
            let message = format!("`warden resolve --happened` took a result of the wrong shape for {}", record.run);
            report.violations.push(Violation { invariant: 5, message });
        }
        let answer = match (happened, printed_example(&status, &record.run)) {
            (false, _) => None,
            (true, Some(example)) => Some(example),
            (true, None) => {
                let message = format!("`warden mcp status` shows no example result for run {}", record.run);
                report.violations.push(Violation { invariant: 5, message });
                continue;
            }
        };
        let outcome = world.start_command(move |env| {
            Box::pin(async move { warden::commands::resolve(&env, &journal, op, answer.as_deref()).await })
        });
        if let Err(problem) = outcome {
            report.violations.push(Violation {
                invariant: 10,
                message: format!("the operator could not resolve {}: {problem}", record.run),
            });
        }
        report.events.push((
            world.clock.now(),
            "operator".into(),
            format!("resolved {} as {}", &record.run[..8], if happened { "happened" } else { "not happened" }),
        ));
    }
}
