//! The ledger, journals, recovery, `once`, quotas and retention, through the simulated disk
//! and clock (the durable-runs issue's list of cases).

use serde_json::{json, Value};
use warden::env::Point;
use warden::store::ledger::{Event, RunPhase};
use warden::store::record;
use warden_sim::checks::check;
use warden_sim::env::executor::Stop;
use warden_sim::env::world::{CrashAt, Instance, World};

const PROGRAM: &str = r#"
def main(text: str, fail_it: bool = False) -> dict:
    """Echo a text, or fail on request.

    Args:
        text: What to echo.
        fail_it: Fail instead.
    """
    if fail_it:
        fail("asked to fail")
    return {"echo": text}
"#;

fn manifest(extra_tool_keys: &str) -> String {
    format!(
        r#"{{ "server": {{ "name": "durable", "journals": "journals", "keep": 2, "max_concurrent_runs": 8 }},
             "tools": [ {{ "name": "echo", "program": "echo.star", "limits": {{ "max_steps": 10000 }} {extra_tool_keys} }} ] }}"#
    )
}

fn world(seed: u64, extra_tool_keys: &str) -> World {
    let world = World::new(seed);
    world.install("manifest.json", manifest(extra_tool_keys).as_bytes());
    world.install("echo.star", PROGRAM.as_bytes());
    world
}

fn call(id: i64, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "echo", "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
}

fn status_call(id: i64, run: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "warden_run_status", "arguments": {"run": run},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
}

fn journals() -> std::path::PathBuf {
    World::path("journals")
}

/// Sends `message` and runs until quiet; returns the result answering `id`.
fn ask(instance: &Instance, message: &Value) -> Value {
    instance.send(message);
    assert_eq!(instance.run(), Stop::Quiet, "log: {:?}", instance.log());
    let id = message["id"].clone();
    let outputs = instance.outputs();
    let answer = outputs
        .iter()
        .find(|m| m.get("id") == Some(&id))
        .unwrap_or_else(|| panic!("no answer to {id}: {outputs:?}; log {:?}", instance.log()));
    answer["result"].clone()
}

fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

fn started(world: &World) -> Vec<String> {
    world.probes.seen.borrow().iter().filter(|(p, _)| *p == Point::Reserved).map(|(_, r)| r.clone()).collect()
}

fn ledger_bytes(world: &World) -> Vec<u8> {
    world.disk.peek(&journals().join("server.ledger")).unwrap_or_default()
}

fn start_refused(world: &World) -> String {
    let instance = world.start("manifest.json");
    assert_eq!(instance.run(), Stop::Quiet);
    match instance.exited() {
        Some(Err(message)) => message,
        other => panic!("the server started: {other:?}; log {:?}", instance.log()),
    }
}

#[test]
fn a_torn_last_ledger_line_is_discarded() {
    let world = world(1, "");
    let first = world.start("manifest.json");
    ask(&first, &call(1, json!({"text": "a"})));
    drop(first);
    let mut bytes = ledger_bytes(&world);
    let torn = record::encode(&Event::Release { run: "ffffffffffffffffffffffffffffffff".into(), at_ms: 1 });
    bytes.extend_from_slice(&torn[..torn.len() / 2]);
    world.disk.corrupt(&journals().join("server.ledger"), bytes);
    let second = world.start("manifest.json");
    let answer = ask(&second, &call(2, json!({"text": "b"})));
    assert_eq!(answer["isError"], json!(false));
    assert!(second.log().iter().any(|l| l.contains("discarded a torn last line")), "{:?}", second.log());
    assert!(check::at_rest(&world.disk, &journals()).is_empty());
}

#[test]
fn a_damaged_middle_line_stops_the_server_naming_it() {
    let world = world(2, "");
    let first = world.start("manifest.json");
    ask(&first, &call(1, json!({"text": "a"})));
    ask(&first, &call(2, json!({"text": "b"})));
    drop(first);
    let mut bytes = ledger_bytes(&world);
    let second_line = bytes.iter().position(|&b| b == b'\n').unwrap() + 30;
    bytes[second_line] ^= 0x20;
    world.disk.corrupt(&journals().join("server.ledger"), bytes);
    let refusal = start_refused(&world);
    assert!(refusal.contains("server.ledger:2: the ledger is damaged"), "{refusal}");
}

#[test]
fn a_clock_set_back_does_not_move_ledger_time_back_or_shorten_a_window() {
    let world = world(3, r#", "quota": { "window": "1h", "calls": 2 }"#);
    let instance = world.start("manifest.json");
    ask(&instance, &call(1, json!({"text": "a"})));
    world.clock.advance(10 * 60 * 1000);
    ask(&instance, &call(2, json!({"text": "b"})));
    // Said only when the clock is behind (events stamped within one millisecond are not).
    assert!(!instance.log().iter().any(|l| l.contains("behind the ledger")), "{:?}", instance.log());
    // The wall clock jumps back two hours: a window counted from it would be empty.
    world.clock.step_wall(-2 * 3600 * 1000);
    let refused = ask(&instance, &call(3, json!({"text": "c"})));
    assert_eq!(refused["isError"], json!(true));
    assert!(text(&refused).contains("over the quota of `echo`: 2 calls per 1h"), "{}", text(&refused));
    assert!(instance.log().iter().any(|l| l.contains("behind the ledger")), "{:?}", instance.log());
    let state = check::ledger_state(&world.disk, &journals()).unwrap();
    let mut times: Vec<u64> = state.runs.values().map(|e| e.reserved_at_ms).collect();
    times.sort();
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn quota_exhaustion_and_freeing() {
    let world = world(4, r#", "quota": { "window": "1h", "calls": 2 }"#);
    let instance = world.start("manifest.json");
    assert_eq!(ask(&instance, &call(1, json!({"text": "a"})))["isError"], json!(false));
    world.clock.advance(20 * 60 * 1000);
    assert_eq!(ask(&instance, &call(2, json!({"text": "b"})))["isError"], json!(false));
    let refused = ask(&instance, &call(3, json!({"text": "c"})));
    assert!(text(&refused).contains("leaves the window in 40m"), "{}", text(&refused));
    assert_eq!(started(&world).len(), 2, "a refused call reserved nothing");
    world.clock.advance(40 * 60 * 1000 + 1);
    assert_eq!(ask(&instance, &call(4, json!({"text": "d"})))["isError"], json!(false));
    // The quota holds across a restart: the ledger is the authority.
    drop(instance);
    let again = world.start("manifest.json");
    let refused = ask(&again, &call(5, json!({"text": "e"})));
    assert!(text(&refused).contains("over the quota"), "{}", text(&refused));
}

#[test]
fn once_repeated_when_done_failed_running_and_with_other_arguments() {
    let world = world(5, r#", "once": { "by": ["text"], "keep": "1h" }"#);
    let instance = world.start("manifest.json");
    let done = ask(&instance, &call(1, json!({"text": "a"})));
    assert_eq!(ask(&instance, &call(2, json!({"text": "a"}))), done, "done: answered exactly as before");
    assert_eq!(
        ask(&instance, &call(3, json!({"text": "a", "fail_it": false}))),
        done,
        "defaults are filled in before comparing"
    );
    let other = ask(&instance, &call(4, json!({"text": "a", "fail_it": true})));
    assert!(text(&other).contains("with different arguments"), "{}", text(&other));
    let failed = ask(&instance, &call(5, json!({"text": "f", "fail_it": true})));
    assert!(text(&failed).starts_with("value: fail: asked to fail"), "{}", text(&failed));
    assert_eq!(ask(&instance, &call(6, json!({"text": "f", "fail_it": true}))), failed, "failed: the earlier failure");
    assert_eq!(started(&world).len(), 2, "repeats start no run");

    // Running: two identical calls at once; the second finds the first in progress.
    instance.send(&call(7, json!({"text": "r"})));
    instance.send(&call(8, json!({"text": "r"})));
    assert_eq!(instance.run(), Stop::Quiet);
    let outputs = instance.outputs();
    let answers: Vec<&Value> =
        [7, 8].iter().map(|id| &outputs.iter().find(|m| m["id"] == json!(id)).unwrap()["result"]).collect();
    let in_progress = answers.iter().filter(|a| text(a).contains("already in progress as run")).count();
    let done = answers.iter().filter(|a| a["isError"] == json!(false)).count();
    assert_eq!((in_progress + done, started(&world).len()), (2, 3), "{answers:?}");

    // After `keep`, counted from the run's end, the same arguments start a new run.
    world.clock.advance(3600 * 1000 + 1);
    ask(&instance, &call(9, json!({"text": "a"})));
    assert_eq!(started(&world).len(), 4);
    let violations = check::at_rest_with_once_keep(&world.disk, &journals(), 3600 * 1000);
    assert!(violations.is_empty(), "{violations:?}");
}

/// A settled run's journal whose end was lost to damage (rot, not a crash: the end is durable
/// before the settle): a once repeat is told the journal cannot be read, and the server keeps
/// serving (a mutant cargo-mutants found missed took the end for present and panicked).
#[test]
fn a_repeat_of_a_settled_run_whose_journal_lost_its_end_is_refused_not_a_panic() {
    let world = world(11, r#", "once": { "by": ["text"], "keep": "1h" }"#);
    let instance = world.start("manifest.json");
    assert_eq!(ask(&instance, &call(1, json!({"text": "a"})))["isError"], json!(false));
    let run = started(&world)[0].clone();
    let journal = warden::base::layout::RunFiles::new(&journals(), "echo", &run).journal;
    let bytes = world.disk.peek(&journal).unwrap();
    let without_end = &bytes[..bytes[..bytes.len() - 1].iter().rposition(|b| *b == b'\n').unwrap() + 1];
    world.disk.corrupt(&journal, without_end.to_vec());
    let repeat = ask(&instance, &call(2, json!({"text": "a"})));
    assert_eq!(repeat["isError"], json!(true), "{repeat}");
    assert!(text(&repeat).contains(&format!("run {run} already did this operation; its journal holds no answer")));
    assert!(instance.log().iter().any(|line| line.contains("holds no end record")), "{:?}", instance.log());
    assert!(instance.exited().is_none(), "{:?}", instance.exited());
    assert_eq!(ask(&instance, &call(3, json!({"text": "b"})))["isError"], json!(false), "still serving");
}

#[test]
fn a_hundred_concurrent_calls_against_eight_slots() {
    for seed in 0..5 {
        let world = world(100 + seed, r#", "quota": { "window": "1h", "calls": 60 }"#);
        let instance = world.start("manifest.json");
        for id in 0..100 {
            instance.send(&call(id, json!({"text": format!("t{id}")})));
        }
        assert_eq!(instance.run(), Stop::Quiet);
        let outputs = instance.outputs();
        let results: Vec<&Value> = outputs.iter().filter(|m| m.get("id").is_some()).map(|m| &m["result"]).collect();
        assert_eq!(results.len(), 100, "every call is answered");
        let busy = results.iter().filter(|r| text(r).contains("the server is busy")).count();
        let over = results.iter().filter(|r| text(r).contains("over the quota")).count();
        let done = results.iter().filter(|r| r["isError"] == json!(false)).count();
        assert_eq!(busy + over + done, 100, "seed {seed}");
        assert!(busy > 0, "seed {seed}: 100 calls at once found a slot each");
        assert!(done <= 60, "seed {seed}: {done} runs over a quota of 60");
        assert_eq!(started(&world).len(), done, "seed {seed}: only admitted calls reserve");
        let state = check::ledger_state(&world.disk, &journals()).unwrap();
        assert!(
            state
                .quota_use(
                    "echo",
                    3600 * 1000,
                    warden_sim::env::clock::EPOCH_MS + world.clock.now(),
                    warden::store::ledger::Counting::AllRuns
                )
                .0
                <= 60
        );
    }
}

#[test]
fn a_journal_with_no_reservation_stops_the_server() {
    let world = world(6, "");
    let stray = journals().join("echo/ab/ab000000000000000000000000000000.journal");
    world.disk.install(&stray, b"");
    let refusal = start_refused(&world);
    assert!(
        refusal.contains("run ab000000000000000000000000000000 of tool `echo`: files of a run with no reservation"),
        "{refusal}"
    );
}

/// Files in a tool's folder that are no run's records, a run's log left alone and journals
/// whose names are no run ids (not 32 characters, not hexadecimal), are not taken for a run at start (a mutant cargo-mutants found
/// missed read them so, and files of a run with no reservation stop the server).
#[test]
fn files_that_are_no_runs_records_do_not_stop_a_start() {
    let world = world(12, "");
    world.disk.install(&journals().join("echo/cd/cd000000000000000000000000000000.log"), b"a line\n");
    world.disk.install(&journals().join("echo/no/notes.journal"), b"");
    world.disk.install(&journals().join("echo/ab/abc.journal"), b"");
    let instance = world.start("manifest.json");
    assert_eq!(ask(&instance, &call(1, json!({"text": "a"})))["isError"], json!(false));
    assert!(instance.exited().is_none(), "{:?}", instance.exited());
}

/// A tool's folder that cannot be listed (an I/O error, not absence) stops the start naming
/// it: a run's files recovery could not see would be taken as absent (a mutant cargo-mutants
/// found missed took every listing error for absence).
#[test]
fn a_folder_that_cannot_be_listed_stops_the_start_naming_it() {
    let world = world(13, "");
    let setup = world.start("manifest.json");
    assert_eq!(ask(&setup, &call(1, json!({"text": "a"})))["isError"], json!(false));
    drop(setup);
    let run = started(&world)[0].clone();
    let shard = journals().join("echo").join(&run[..2]);
    *world.disk.fail_list_containing.borrow_mut() = Some(shard.display().to_string());
    let refusal = start_refused(&world);
    assert!(refusal.contains(&format!("{}: cannot list", shard.display())), "{refusal}");
}

/// Crashed after its journal was created (step 3), an unfinished run is resumed; with its
/// journal emptied (a header a crash lost) it had not begun and is released; with its kept
/// arguments gone it is refused, naming them. Each cell of the recovery table its own way (two
/// mutants cargo-mutants found missed read a headless journal as begun, or any as ended).
#[test]
fn an_unfinished_run_is_resumed_released_or_refused_by_what_its_files_hold() {
    let crashed_after_step_3 = |seed: u64| {
        let world = world(seed, "");
        world.probes.crash_at.set(Some(CrashAt { point: Point::JournalCreated, nth: 1 }));
        let first = world.start("manifest.json");
        first.send(&call(1, json!({"text": "a"})));
        assert_eq!(first.run(), Stop::Crashed);
        world.crash(first);
        world.probes.crash_at.set(None);
        let run = started(&world)[0].clone();
        (world, run)
    };
    let (world, run) = crashed_after_step_3(14);
    let files = warden::base::layout::RunFiles::new(&journals(), "echo", &run);
    world.disk.corrupt(&files.journal, Vec::new());
    let again = world.start("manifest.json");
    assert_eq!(again.run(), Stop::Quiet);
    assert!(again.exited().is_none(), "{:?}", again.exited());
    // Released (then dropped by the start's compaction: the checker's view keeps it).
    let state = check::ledger_state(&world.disk, &journals()).unwrap();
    assert!(matches!(state.run(&run).unwrap().phase, RunPhase::Released { .. }), "{:?}", state.run(&run));

    let (world, run) = crashed_after_step_3(15);
    world.disk.delete(&warden::base::layout::RunFiles::new(&journals(), "echo", &run).inputs);
    let refusal = start_refused(&world);
    assert!(refusal.contains(&format!("run {run} of tool `echo`: an unfinished run whose kept arguments are gone")));
}

#[test]
fn an_upgrade_with_an_unfinished_run_refuses_to_start_naming_it() {
    let world = world(7, "");
    world.probes.crash_at.set(Some(CrashAt { point: Point::JournalCreated, nth: 1 }));
    let first = world.start("manifest.json");
    first.send(&call(1, json!({"text": "a"})));
    assert_eq!(first.run(), Stop::Crashed);
    let run = started(&world)[0].clone();
    world.crash(first);
    world.probes.crash_at.set(None);
    world.install("echo.star", format!("{PROGRAM}\n# changed\n").as_bytes());
    let refusal = start_refused(&world);
    assert!(refusal.contains(&format!("run {run} of tool `echo` cannot resume: its program changed")), "{refusal}");
    // Putting the program back lets it resume and finish.
    world.install("echo.star", PROGRAM.as_bytes());
    let again = world.start("manifest.json");
    assert_eq!(again.run(), Stop::Quiet);
    assert!(again.exited().is_none());
    assert!(check::open_runs(&world.disk, &journals()).is_empty());
}

#[test]
fn an_upgrade_after_a_runs_end_was_journaled_still_settles_it() {
    // The end is durable, the settle is not: no program runs again, so a changed program
    // does not stop the start.
    let world = world(17, "");
    world.probes.crash_at.set(Some(CrashAt { point: Point::RunRecorded, nth: 1 }));
    let first = world.start("manifest.json");
    first.send(&call(1, json!({"text": "a"})));
    assert_eq!(first.run(), Stop::Crashed);
    world.crash(first);
    world.probes.crash_at.set(None);
    world.install("echo.star", format!("{PROGRAM}\n# changed\n").as_bytes());
    let again = world.start("manifest.json");
    assert_eq!(again.run(), Stop::Quiet);
    assert!(again.exited().is_none(), "{:?}", again.exited());
    assert!(check::open_runs(&world.disk, &journals()).is_empty());
}

#[test]
fn compaction_crashed_at_every_disk_operation_leaves_old_or_new() {
    // A ledger with one settled run and two released ones, which compaction drops.
    let world = world(8, "");
    let setup = world.start("manifest.json");
    ask(&setup, &call(1, json!({"text": "a"})));
    drop(setup);
    let mut bytes = ledger_bytes(&world);
    for run in ["aa000000000000000000000000000000", "bb000000000000000000000000000000"] {
        let reserve = Event::Reserve {
            run: run.into(),
            tool: "echo".into(),
            at_ms: 1,
            calls: 1,
            money: vec![],
            once: None,
            principal: None,
            tokens: 0,
        };
        bytes.extend(record::encode(&reserve));
        bytes.extend(record::encode(&Event::Release { run: run.into(), at_ms: 2 }));
    }
    world.disk.corrupt(&journals().join("server.ledger"), bytes);
    let before = check::ledger_state(&world.disk, &journals()).unwrap();
    assert_eq!(before.runs.len(), 3);
    let snapshot: Vec<_> = world
        .disk
        .files()
        .into_iter()
        .map(|p| {
            let bytes = world.disk.peek(&p).unwrap();
            (p, bytes)
        })
        .collect();
    // Count the disk operations of one clean start-up, then crash at each of them.
    let start_ops = world.disk.operations.get();
    let probe = world.start("manifest.json");
    assert_eq!(probe.run(), Stop::Quiet);
    let ops = world.disk.operations.get() - start_ops;
    world.crash(probe);
    let mut outcomes = std::collections::BTreeSet::new();
    for k in 1..=ops + 1 {
        let attempt = World::new(9);
        for (path, bytes) in &snapshot {
            attempt.disk.install(path, bytes);
        }
        attempt.disk.crash_at_operation.set(Some(attempt.disk.operations.get() + k));
        let instance = attempt.start("manifest.json");
        let stop = instance.run();
        attempt.crash(instance);
        attempt.disk.crash_at_operation.set(None);
        // The file as it is: the checker's usual view merges back what compaction dropped.
        let state = check::ledger_file_state(&attempt.disk, &journals());
        let state =
            state.unwrap_or_else(|v| panic!("crash at start-up operation {k} ({stop:?}) left no readable ledger: {v}"));
        // Old (three runs), or new (the released runs dropped), never neither.
        assert!(state.runs.len() == 3 || state.runs.len() == 1, "op {k}: {} runs", state.runs.len());
        outcomes.insert(state.runs.len());
        let fine = attempt.start("manifest.json");
        assert_eq!(fine.run(), Stop::Quiet);
        assert!(fine.exited().is_none(), "op {k}: {:?}", fine.exited());
    }
    assert!(outcomes.contains(&1) && outcomes.contains(&3), "both old and new ledgers were seen: {outcomes:?}");
}

#[test]
fn retention_deletes_only_what_it_may() {
    let world = world(10, r#", "once": { "by": ["text"], "keep": "2d" }"#);
    let instance = world.start("manifest.json");
    ask(&instance, &call(1, json!({"text": "old"})));
    let old = started(&world)[0].clone();
    world.clock.advance(24 * 3600 * 1000);
    ask(&instance, &call(2, json!({"text": "newer"})));
    let newer = started(&world)[1].clone();
    drop(instance);
    // Almost three days on: `old` settled over 2 days ago and its once key (2d) has expired
    // too; `newer` settled under 2 days ago.
    world.clock.advance(2 * 24 * 3600 * 1000 - 3600 * 1000);
    let again = world.start("manifest.json");
    assert_eq!(again.run(), Stop::Quiet);
    let journal_of =
        |run: &str| world.disk.peek(&warden::base::layout::RunFiles::new(&journals(), "echo", run).journal);
    assert!(journal_of(&old).is_none(), "an expired run's journal is deleted");
    assert!(journal_of(&newer).is_some(), "a run within keep is kept");
    let expired = ask(&again, &status_call(3, &old));
    assert!(
        matches!(expired["structuredContent"]["result"]["status"].as_str(), Some("expired" | "unknown")),
        "{expired}"
    );
    let kept = ask(&again, &status_call(4, &newer));
    assert_eq!(kept["structuredContent"]["result"]["status"], json!("done"));
}

#[test]
fn the_daily_sweep_runs_a_day_apart_while_the_server_is_up() {
    let world = world(14, "");
    let instance = world.start("manifest.json");
    assert_eq!(instance.run(), Stop::Quiet, "the server starts (and sweeps) at 0");
    let hours = |n: u64| {
        for _ in 0..n {
            world.clock.advance(3_600_000);
            assert_eq!(instance.run(), Stop::Quiet);
        }
    };
    // The call an hour after the start: it expires (keep is 2 days) an hour after the second
    // day's sweep, so the third day's is the first to delete it.
    hours(1);
    ask(&instance, &call(1, json!({"text": "a"})));
    let run = started(&world)[0].clone();
    let journal = warden::base::layout::RunFiles::new(&journals(), "echo", &run).journal;
    hours(59);
    assert!(
        world.disk.peek(&journal).is_some(),
        "no sweep between the second day's and the third's: {:?}",
        instance.log_timed()
    );
    hours(13);
    assert!(world.disk.peek(&journal).is_none(), "the third day's sweep deleted it: {:?}", instance.log());
}

#[test]
fn run_status_answers_done_failed_and_unknown() {
    let world = world(11, "");
    let instance = world.start("manifest.json");
    ask(&instance, &call(1, json!({"text": "a"})));
    ask(&instance, &call(2, json!({"text": "b", "fail_it": true})));
    let runs = started(&world);
    let done = ask(&instance, &status_call(3, &runs[0]));
    assert_eq!(done["structuredContent"]["result"]["status"], json!("done"));
    assert_eq!(done["structuredContent"]["result"]["result"], json!({"echo": "a"}));
    let failed = ask(&instance, &status_call(4, &runs[1]));
    assert_eq!(failed["structuredContent"]["result"]["status"], json!("failed"));
    let unknown = ask(&instance, &status_call(5, "0123456789abcdef0123456789abcdef"));
    assert_eq!(unknown["structuredContent"]["result"]["status"], json!("unknown"));
    let bad = ask(&instance, &status_call(6, "nope"));
    assert_eq!(bad["isError"], json!(true));
}

#[test]
fn run_status_answers_expired_when_the_journal_is_gone_but_the_ledger_keeps_the_run() {
    // keep is 2 days; a 7-day quota window keeps the run in the ledger after its files go.
    let world = world(12, r#", "quota": { "window": "7d", "calls": 100 }"#);
    let instance = world.start("manifest.json");
    ask(&instance, &call(1, json!({"text": "a"})));
    let run = started(&world)[0].clone();
    assert!(!swept(&instance), "nothing to sweep at the first start: {:?}", instance.log());
    drop(instance);
    world.clock.advance(3 * 24 * 3600 * 1000);
    let again = world.start("manifest.json");
    let status = ask(&again, &status_call(2, &run));
    assert_eq!(status["structuredContent"]["result"]["status"], json!("expired"), "{status}");
    assert!(
        again.log().iter().any(|l| l.contains("deleted the files of 1 run(s); compaction dropped 0 run(s)")),
        "the files deleted, the run kept for its window: {:?}",
        again.log()
    );
    drop(again);
    // Past the window: the run leaves the ledger, and there were no files left to delete.
    world.clock.advance(5 * 24 * 3600 * 1000);
    let last = world.start("manifest.json");
    assert_eq!(last.run(), Stop::Quiet);
    assert!(
        last.log().iter().any(|l| l.contains("deleted the files of 0 run(s); compaction dropped 1 run(s)")),
        "{:?}",
        last.log()
    );
}

fn swept(instance: &Instance) -> bool {
    instance.log().iter().any(|l| l.contains("retention:"))
}

/// A caller's runs waiting for input are bounded: past `AWAITING_RUNS_PER_CALLER_MAX` of one
/// tool, the next run that would ask ends, said so, holding nothing; the ones before it wait.
#[test]
fn a_callers_runs_waiting_for_input_are_bounded() {
    const ASKS: &str = r#"
def main(text: str) -> dict:
    """Asks before it echoes.

    Args:
        text: What to echo.
    """
    answers = ask({"go": {"method": "elicitation/create", "params": {"message": "Go?",
        "requestedSchema": {"type": "object", "properties": {"go": {"type": "boolean"}}}}}})
    return {"echo": text, "answers": answers}
"#;
    let world = World::new(31);
    let manifest = r#"{ "server": { "name": "asks", "journals": "journals" },
        "tools": [ { "name": "asks", "program": "asks.star" } ] }"#;
    world.install("manifest.json", manifest.as_bytes());
    world.install("asks.star", ASKS.as_bytes());
    let instance = world.start("manifest.json");
    let limit = warden::limits::AWAITING_RUNS_PER_CALLER_MAX as i64;
    let asking = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "asks", "arguments": {"text": id.to_string()},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}}})
    };
    for id in 1..=limit {
        let answer = ask(&instance, &asking(id));
        assert_eq!(answer["resultType"], json!("input_required"), "call {id}: {answer}");
    }
    let refused = ask(&instance, &asking(limit + 1));
    assert_eq!(refused["isError"], json!(true), "{refused}");
    assert!(text(&refused).contains("too many runs wait for their clients' input"), "{refused}");
}
