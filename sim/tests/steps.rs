//! Crash right after each durable step of a call (seed 000 section 7), through the
//! simulated disk (losing whatever was not fsynced, tearing what was being appended), start
//! a new server on the same files, and check the step's recovery rule and invariants 3, 4,
//! 6 and 7. Each step runs under many seeds, so torn cuts and schedules vary.

use serde_json::{json, Value};
use warden::env::Point;
use warden::store::ledger::RunPhase;
use warden_sim::checks::check;
use warden_sim::env::executor::Stop;
use warden_sim::env::world::{CrashAt, World};

const SEEDS: u64 = 25;

const MANIFEST: &str = r#"{
  "server": { "name": "steps", "journals": "journals", "keep": 1 },
  "tools": [ { "name": "echo", "program": "echo.star", "limits": { "max_steps": 10000 },
               "once": { "by": ["text"], "keep": "1h" }, "quota": { "window": "1h", "calls": 5 } } ]
}"#;

const PROGRAM: &str = r#"
def main(text: str) -> dict:
    """Echo a text.

    Args:
        text: What to echo.
    """
    print("echoing", text)
    return {"echo": text}
"#;

fn world(seed: u64) -> World {
    let world = World::new(seed);
    world.install("manifest.json", MANIFEST.as_bytes());
    world.install("echo.star", PROGRAM.as_bytes());
    world
}

fn call(id: i64, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": text},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
}

fn answer_to(outputs: &[Value], id: i64) -> Option<Value> {
    outputs.iter().find(|m| m.get("id") == Some(&json!(id))).map(|m| m["result"].clone())
}

fn journals() -> std::path::PathBuf {
    World::path("journals")
}

/// Crashes after `point`, restarts, and returns (answer seen before the crash, the repeat's answer).
fn crash_after(seed: u64, point: Point) -> (Option<Value>, Value, World) {
    let world = world(seed);
    world.probes.crash_at.set(Some(CrashAt { point, nth: 1 }));
    let first = world.start("manifest.json");
    first.send(&call(1, "a"));
    let stop = first.run();
    assert_eq!(stop, Stop::Crashed, "seed {seed}: the crash at {point:?} did not happen; log: {:?}", first.log());
    let seen = answer_to(&first.outputs(), 1);
    world.crash(first);

    world.probes.crash_at.set(None);
    let second = world.start("manifest.json");
    second.send(&call(2, "a"));
    assert_eq!(second.run(), Stop::Quiet, "seed {seed}");
    let repeat = answer_to(&second.outputs(), 2)
        .unwrap_or_else(|| panic!("seed {seed}: no answer after restart; log {:?}", second.log()));
    assert!(second.exited().is_none(), "seed {seed}: the server stopped: {:?}", second.exited());
    let violations = check::at_rest(&world.disk, &journals());
    assert!(violations.is_empty(), "seed {seed} {point:?}: {violations:?}");
    assert!(check::open_runs(&world.disk, &journals()).is_empty(), "seed {seed}: runs left open");
    second.close_stdin();
    assert_eq!(second.run(), Stop::Quiet);
    assert_eq!(second.exited(), Some(Ok(())), "seed {seed}");
    (seen, repeat, world)
}

fn runs_of(world: &World) -> Vec<(String, RunPhase)> {
    let state = check::ledger_file_state(&world.disk, &journals()).unwrap();
    let mut runs: Vec<_> = state.runs.values().map(|e| (e.sequence, e.run.clone(), e.phase.clone())).collect();
    runs.sort_by_key(|(sequence, _, _)| *sequence);
    runs.into_iter().map(|(_, run, phase)| (run, phase)).collect()
}

/// The crashed run was released at the next start (compaction then drops it: it never
/// started and holds nothing), and the repeated call became one new run. Returns the crashed
/// run's id.
fn assert_released_and_replaced(seed: u64, world: &World) -> String {
    let crashed = world.probes.seen.borrow().first().map(|(_, run)| run.clone()).expect("a run reached the point");
    let runs = runs_of(world);
    assert_eq!(runs.len(), 1, "seed {seed}: {runs:?}");
    assert_ne!(runs[0].0, crashed, "seed {seed}: the crashed run was not released");
    assert!(matches!(runs[0].1, RunPhase::Settled { .. }), "seed {seed}: {runs:?}");
    crashed
}

fn is_done_echo(answer: &Value) -> bool {
    answer["isError"] == json!(false) && answer["structuredContent"]["result"] == json!({"echo": "a"})
}

#[test]
fn step_1_reserve_then_crash_releases_the_run_and_frees_the_key() {
    for seed in 0..SEEDS {
        let (seen, repeat, world) = crash_after(seed, Point::Reserved);
        assert!(seen.is_none());
        assert!(is_done_echo(&repeat), "seed {seed}: {repeat}");
        assert_released_and_replaced(seed, &world);
    }
}

#[test]
fn step_2_inputs_then_crash_releases_the_run_and_removes_the_inputs() {
    for seed in 0..SEEDS {
        let (seen, repeat, world) = crash_after(seed, Point::InputsKept);
        assert!(seen.is_none());
        assert!(is_done_echo(&repeat), "seed {seed}: {repeat}");
        let crashed = assert_released_and_replaced(seed, &world);
        let files = warden::base::layout::RunFiles::new(&journals(), "echo", &crashed);
        assert!(world.disk.peek(&files.inputs).is_none(), "seed {seed}: the released run's inputs are still kept");
        assert!(world.disk.peek(&files.journal).is_none(), "seed {seed}: the released run has a journal");
    }
}

/// Steps 3, 4 and 6: the run had begun, so it is finished at the next start and the repeated
/// call is answered from it: one run for the key, never two.
fn finished_at_restart(point: Point) {
    for seed in 0..SEEDS {
        let (seen, repeat, world) = crash_after(seed, point);
        assert!(seen.is_none(), "seed {seed}: answered before the crash at {point:?}");
        assert!(is_done_echo(&repeat), "seed {seed}: {repeat}");
        let runs = runs_of(&world);
        assert_eq!(runs.len(), 1, "seed {seed} {point:?}: {runs:?}");
        assert!(matches!(runs[0].1, RunPhase::Settled { .. }));
        let journal = check::journal(&world.disk, &journals(), "echo", &runs[0].0).unwrap().unwrap();
        assert_eq!(journal.prints, 1, "seed {seed}: a replay must not journal its prints twice");
    }
}

#[test]
fn step_3_journal_created_then_crash_resumes_the_run() {
    finished_at_restart(Point::JournalCreated);
}

#[test]
fn step_4_records_then_crash_settles_from_the_journal() {
    finished_at_restart(Point::RunRecorded);
}

#[test]
fn step_6_settle_then_crash_cleans_up_and_keeps_the_answer() {
    finished_at_restart(Point::Settled);
}

#[test]
fn step_7_answer_then_crash_answers_a_repeat_identically() {
    for seed in 0..SEEDS {
        let (seen, repeat, world) = crash_after(seed, Point::Answered);
        let seen = seen.expect("the answer was written before the crash");
        assert!(is_done_echo(&seen));
        // Invariant 7: what the client saw survives; the repeat gets exactly the same result.
        assert_eq!(repeat["structuredContent"], seen["structuredContent"], "seed {seed}");
        assert_eq!(repeat["content"], seen["content"], "seed {seed}");
        assert_eq!(runs_of(&world).len(), 1);
    }
}
