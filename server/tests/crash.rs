//! Crash tests of the real binary: built with the `crash-points` feature, `warden` aborts right
//! after each durable step (tikv's `fail` crate, `FAILPOINTS=<point>=return`), and between an
//! action's begin and done records. Each test makes the call that reaches the point, lets the
//! process die for real, restarts it, and checks through the client and the local payments
//! test service that the recovery rule held. Then a bounded kill -9 test under load.
//!
//!   cargo test -p warden --features crash-points --test crash

#![cfg(feature = "crash-points")]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::payments::Payments;
use common::postgres::Pg;
use common::{fixture, private_copy, Era, Wire};
use serde_json::{json, Value};

const SECRET: &str = "sk_test_CRASH_SECRET_1";

fn folder(payments: &Payments) -> tempfile::TempDir {
    let dir = private_copy(&fixture("crash"));
    for file in ["manifest.json", "refund.star", "note.star"] {
        let path = dir.path().join(file);
        let text = std::fs::read_to_string(&path).unwrap().replace("PAYMENTS", &payments.base());
        std::fs::write(&path, text).unwrap();
    }
    dir
}

fn start(dir: tempfile::TempDir, failpoints: Option<&str>) -> Wire {
    start_on(dir, failpoints, None)
}

/// The environment variable the PostgreSQL store's URL is in, for the manifests `on_store` makes.
const STORE_URL_ENV: &str = "WARDEN_STORE_URL";

/// `start`, on the PostgreSQL store at `store` when given (the folder went through `on_store`).
fn start_on(dir: tempfile::TempDir, failpoints: Option<&str>, store: Option<&Pg>) -> Wire {
    let mut env = vec![("STRIPE_SECRET_KEY", SECRET)];
    if let Some(failpoints) = failpoints {
        env.push(("FAILPOINTS", failpoints));
    }
    if let Some(pg) = store {
        env.push((STORE_URL_ENV, pg.url.as_str()));
    }
    Wire::start_dir(dir, &env)
}

/// The folder's manifest, keeping the ledger and the runs' records in the PostgreSQL store.
/// The lease is short (a start after a kill waits for the killed epoch's lease to end before
/// it takes its runs up), and the refund's timeouts with it: every send must fit two thirds of
/// the lease (the action rule, checked at start).
fn on_store(dir: tempfile::TempDir) -> tempfile::TempDir {
    let path = dir.path().join("manifest.json");
    let mut manifest: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    manifest["server"]["store"] = json!({"postgres": {"url": {"env": STORE_URL_ENV}, "lease": "4s"}});
    for tool in manifest["tools"].as_array_mut().unwrap() {
        if tool["net"]["timeout_ms"] == json!(3000) {
            tool["net"] = json!({"connect_timeout_ms": 300, "timeout_ms": 700});
        }
    }
    std::fs::write(&path, manifest.to_string()).unwrap();
    dir
}

/// How many ledger lines of the store hold `event` (`reserve`, `settle`, `release`).
fn store_events(pg: &Pg, event: &str) -> u64 {
    let sql = format!(
        "SELECT count(*) FROM warden_ledger WHERE position('\"event\":\"{event}\"' in convert_from(line, 'UTF8')) > 0"
    );
    pg.sql(&sql).parse().unwrap()
}

/// The store's runs still open: reserved, neither settled nor released.
fn store_open_runs(pg: &Pg) -> u64 {
    store_events(pg, "reserve") - store_events(pg, "settle") - store_events(pg, "release")
}

fn refund(order: &str, amount: &str) -> Value {
    json!({"name": "refund_order", "arguments": {"order": order, "amount": {"amount": amount, "currency": "USD"}}})
}

/// Sends `call`, expects the process to abort at the crash point, and restarts it.
fn crash_and_restart(payments: &Payments, failpoints: &str, call: Value) -> Wire {
    let mut wire = start(folder(payments), Some(failpoints));
    wire.send_request(Era::Modern, json!(1), "tools/call", call);
    let status = wire.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "the process did not die at {failpoints}");
    assert!(wire.stderr().contains("crash point"), "{}", wire.stderr());
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    drop(wire);
    let mut restarted = start(dir, None);
    restarted.assert_serving(900);
    restarted
}

fn status_report(wire: &Wire) -> String {
    common::status_report(wire.dir.path())
}

/// The operator's runbook: resolve action 0 of the waiting run `report` names (as `warden mcp
/// status` printed it), restart the server, and check nothing is left unfinished.
fn resolve_and_restart(mut wire: Wire, report: &str, verdict: &[&str]) -> Wire {
    let journal = common::printed_journal(report);
    // Beside the live server the word goes through its admin channel, checked there: an
    // action the run does not have is refused by the server, and nothing changes.
    let refused = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["resolve", "--journal", &journal, "--op", "7"])
        .args(verdict)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("the run has no action 7"), "{refused:?}");
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    drop(wire);
    let resolved = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["resolve", "--journal", &journal, "--op", "0"])
        .args(verdict)
        .output()
        .unwrap();
    assert!(resolved.status.success(), "{}", String::from_utf8_lossy(&resolved.stderr));
    let mut resumed = start(dir, None);
    resumed.assert_serving(5);
    assert!(status_report(&resumed).contains("unfinished runs: none"), "{}", status_report(&resumed));
    resumed
}

/// After a crash in one of steps 1 to 7 of a refund, the repeated call gets one refund, once.
fn refund_survives(point: &str, expect_first_run_kept: bool) {
    let payments = Payments::start();
    let mut wire = crash_and_restart(&payments, &format!("{point}=return"), refund("pi_1001", "10.00"));
    let before = payments.refunded_minor();
    let answer = wire.request(Era::Modern, json!(2), "tools/call", refund("pi_1001", "10.00"));
    assert_eq!(answer["result"]["isError"], json!(false), "{point}: {answer}");
    assert_eq!(payments.refunded_minor(), 1000, "{point}: exactly one refund of 10.00 (before the repeat: {before})");
    let ledger = std::fs::read_to_string(wire.dir.path().join("journals/server.ledger")).unwrap();
    let settled = ledger.matches("\"event\":\"settle\"").count();
    assert_eq!(settled, 1, "{point}: one run settled: {ledger}");
    if expect_first_run_kept {
        assert!(!ledger.contains("\"event\":\"release\""), "{point}: the started run was kept, not released");
    }
    assert!(status_report(&wire).contains("unfinished runs: none"), "{point}: {}", status_report(&wire));
    let again = wire.request(Era::Modern, json!(3), "tools/call", refund("pi_1001", "10.00"));
    assert_eq!(
        again["result"]["structuredContent"], answer["result"]["structuredContent"],
        "{point}: once answers the original run"
    );
    println!("crash after {point}: recovered; refunds made: 1; settled runs: 1");
}

/// `refund_survives` on the PostgreSQL store: the ledger and the run's records are in the
/// database (the journals folder keeps no record file), and the crash at each durable step is
/// recovered by the same rules.
fn refund_survives_on_the_store(point: &str, expect_first_run_kept: bool) {
    let payments = Payments::start();
    let pg = Pg::create(&format!("crash_store_{point}").replace('-', "_"));
    let mut wire = start_on(on_store(folder(&payments)), Some(&format!("{point}=return")), Some(&pg));
    wire.send_request(Era::Modern, json!(1), "tools/call", refund("pi_1001", "10.00"));
    let status = wire.wait_exit(Duration::from_secs(30));
    assert!(!status.success() && wire.stderr().contains("crash point"), "{point}: {}", wire.stderr());
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    drop(wire);
    let mut wire = start_on(dir, None, Some(&pg));
    wire.assert_serving(900);
    let answer = wire.request(Era::Modern, json!(2), "tools/call", refund("pi_1001", "10.00"));
    assert_eq!(answer["result"]["isError"], json!(false), "{point}: {answer}");
    assert_eq!(payments.refunded_minor(), 1000, "{point}: exactly one refund of 10.00");
    assert_eq!(store_events(&pg, "settle"), 1, "{point}: one run settled");
    if expect_first_run_kept {
        assert_eq!(store_events(&pg, "release"), 0, "{point}: the started run was kept, not released");
    }
    assert_eq!(store_open_runs(&pg), 0, "{point}: no run left unfinished");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_records WHERE kind <> 'journal'"), "0", "{point}: inputs removed");
    let again = wire.request(Era::Modern, json!(3), "tools/call", refund("pi_1001", "10.00"));
    assert_eq!(again["result"]["structuredContent"], answer["result"]["structuredContent"], "{point}: once");
    let record_files: Vec<_> = common::walk(wire.dir.path())
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "journal" || e == "ledger"))
        .collect();
    assert!(record_files.is_empty(), "{point}: records kept as files beside the store: {record_files:?}");
    println!("crash after {point} on the PostgreSQL store: recovered; refunds made: 1; settled runs: 1");
}

#[test]
fn each_step_on_the_postgresql_store() {
    for (point, kept) in [
        ("reserved", false),
        ("inputs-kept", false),
        ("journal-created", true),
        ("run-recorded", true),
        ("settled", true),
        ("answered", true),
    ] {
        refund_survives_on_the_store(point, kept);
    }
}

#[test]
fn step_1_reserved() {
    refund_survives("reserved", false);
}

#[test]
fn step_2_inputs_kept() {
    refund_survives("inputs-kept", false);
}

#[test]
fn step_3_journal_created() {
    refund_survives("journal-created", true);
}

#[test]
fn step_4_run_recorded() {
    refund_survives("run-recorded", true);
}

#[test]
fn step_6_settled() {
    refund_survives("settled", true);
}

#[test]
fn step_7_answered() {
    refund_survives("answered", true);
}

#[test]
fn between_begin_and_done_a_get_is_sent_again() {
    let payments = Payments::start();
    let mut wire = crash_and_restart(&payments, "action-begun=return", refund("pi_1001", "5.00"));
    let gets = payments.ledger.lock().unwrap().requests.iter().filter(|r| r.method == "GET").count();
    assert!(gets >= 1, "the GET begun before the crash was sent again at restart");
    assert_eq!(payments.refunded_minor(), 500);
    assert!(wire.stderr().contains("sending it again (safe)"), "{}", wire.stderr());
    let answer = wire.request(Era::Modern, json!(2), "tools/call", refund("pi_1001", "5.00"));
    assert_eq!(answer["result"]["isError"], json!(false));
}

#[test]
fn between_begin_and_done_an_idempotent_refund_is_sent_again_and_happens_once() {
    let payments = Payments::start();
    // The second action (the refund POST) crashes after its begin record.
    let mut wire = crash_and_restart(&payments, "action-begun=1*off->return", refund("pi_1001", "7.00"));
    assert_eq!(payments.refunded_minor(), 700, "the refund was made once, at restart");
    let answer = wire.request(Era::Modern, json!(2), "tools/call", refund("pi_1001", "7.00"));
    assert_eq!(answer["result"]["isError"], json!(false));
    assert_eq!(payments.refunded_minor(), 700);
}

/// A SQLite write in both gaps: begun and not committed (`action-begun`: not found at
/// restart, done then), and committed before its done record (`db-committed`: found, not
/// done again). Either way one `warden_actions` row, and the ticket closed.
#[test]
fn between_begin_and_done_a_sqlite_write_is_looked_up() {
    for (point, ticket, log) in [
        ("action-begun=return", 2, "not in warden_actions; performing it"),
        ("db-committed=return", 3, "found in warden_actions; not repeated"),
    ] {
        let payments = Payments::start();
        let call = json!({"name": "close_ticket", "arguments": {"ticket_id": ticket, "note": "duplicate of 1"}});
        let mut wire = crash_and_restart(&payments, point, call.clone());
        assert!(wire.stderr().contains(log), "{point}: {}", wire.stderr());
        let answer = wire.request(Era::Modern, json!(2), "tools/call", call);
        let closed = json!({"ticket_id": ticket, "status": "closed"});
        assert_eq!(answer["result"]["structuredContent"]["result"], closed, "{point}");
        let db = rusqlite_count(&wire.dir.path().join("desk.db"));
        assert_eq!(db, 1, "{point}: exactly one warden_actions row");
    }
}

/// The same two gaps for `db.postgres`, against the throwaway cluster of
/// `scripts/postgres.sh`: begun and not committed (done at restart), committed and not
/// recorded done (found at restart). Each write happens once.
#[test]
fn between_begin_and_done_a_postgres_write_is_looked_up() {
    for (point, log) in [
        ("action-begun=return", "not in warden_actions; performing it"),
        ("db-committed=return", "found in warden_actions; not repeated"),
    ] {
        let pg = Pg::create(if point.starts_with("action") { "crash_begun" } else { "crash_committed" });
        pg.desk();
        let dir = private_copy(&fixture("postgres"));
        let mut wire = Wire::start_dir(dir, &[("DESK_PG_URL", &pg.url), ("FAILPOINTS", point)]);
        let call = json!({"name": "close_ticket", "arguments": {"ticket_id": 2, "note": "crash"}});
        wire.send_request(Era::Modern, json!(1), "tools/call", call);
        assert!(!wire.wait_exit(Duration::from_secs(30)).success(), "the process did not die at {point}");
        let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
        drop(wire);
        let mut wire = Wire::start_dir(dir, &[("DESK_PG_URL", &pg.url)]);
        wire.assert_serving(900);
        assert!(wire.stderr().contains(log), "{point}: {}", wire.stderr());
        assert_eq!(pg.sql("SELECT count(*) FROM warden_actions"), "1", "{point}");
        assert_eq!(pg.sql("SELECT status FROM tickets WHERE id = 2"), "closed", "{point}");
        wire.close_stdin();
        wire.wait_exit(Duration::from_secs(20));
        let written: String = common::walk(wire.dir.path())
            .iter()
            .map(|path| String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned())
            .collect();
        assert!(!written.contains(&pg.password()) && !wire.stderr().contains(&pg.password()));
    }
}

/// A write begun before a crash, and PostgreSQL unreachable at restart: the lookup cannot
/// tell, so the run waits for an operator (its reason says why), and the server keeps
/// serving; it does not stop at start, and it does not guess.
#[test]
fn a_postgres_write_that_cannot_be_looked_up_at_restart_waits_for_the_operator() {
    let pg = Pg::create("crash_unreachable");
    pg.desk();
    let dir = private_copy(&fixture("postgres"));
    let mut wire = Wire::start_dir(dir, &[("DESK_PG_URL", &pg.url), ("FAILPOINTS", "action-begun=return")]);
    let call = json!({"name": "close_ticket", "arguments": {"ticket_id": 1, "note": "crash"}});
    wire.send_request(Era::Modern, json!(1), "tools/call", call);
    assert!(!wire.wait_exit(Duration::from_secs(30)).success(), "the process did not die at action-begun");
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    drop(wire);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let unreachable = format!("postgres://warden:gone-away-4b1c@127.0.0.1:{port}/desk");
    let mut wire = Wire::start_dir(dir, &[("DESK_PG_URL", &unreachable)]);
    wire.assert_serving(900);
    let report = status_report(&wire);
    assert!(report.contains("waiting for an operator at action 0: "), "{report}");
    assert!(report.contains("warden_actions could not be read"), "{report}");
    assert!(!report.contains("gone-away-4b1c") && !wire.stderr().contains("gone-away-4b1c"));
    assert_eq!(pg.sql("SELECT status FROM tickets WHERE id = 1"), "open", "nothing was guessed");
}

/// A process paused inside a `db.postgres` write (a stall, SIGSTOP), its transaction open and
/// the row locked: the database ends the transaction after the grant's timeout, so another
/// client of the operator's database is not held for as long as Warden sleeps; Warden, awake,
/// finds its COMMIT failed and its write not in `warden_actions`, and does it once.
#[test]
fn a_process_paused_inside_a_postgres_write_does_not_hold_the_operators_rows() {
    let pg = Pg::create("paused_write");
    pg.desk();
    let dir = private_copy(&fixture("postgres"));
    let paused = ("FAILPOINTS", "db-before-commit=1*sleep(8000)");
    let mut wire = Wire::start_dir(dir, &[("DESK_PG_URL", &pg.url), paused]);
    let call = json!({"name": "close_ticket", "arguments": {"ticket_id": 2, "note": "paused"}});
    wire.send_request(Era::Modern, json!(1), "tools/call", call);
    let idle =
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database()";
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.sql(idle) == "0" {
        assert!(Instant::now() < deadline, "the write never paused before its COMMIT: {}", wire.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Another client of the desk waits for the row at most 6 s; Warden sleeps 8 s (its
    // transaction ends 4 s into the pause: the grant's 3 s timeout and a second's grace).
    pg.sql("SET statement_timeout = 6000; UPDATE tickets SET urgent = true WHERE id = 2");
    let answer = wire.recv();
    assert_eq!(answer["id"], json!(1), "{answer}");
    assert_eq!(answer["result"]["structuredContent"]["result"]["changes"], json!(1), "{answer}");
    assert!(wire.stderr().contains("not in warden_actions; performing it"), "{}", wire.stderr());
    assert_eq!(pg.sql("SELECT status || ' ' || urgent FROM tickets WHERE id = 2"), "closed true");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_actions"), "1");
}

fn rusqlite_count(path: &Path) -> i64 {
    let output = Command::new("python3")
        .args(["-c", "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from warden_actions').fetchone()[0])"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).trim().parse().unwrap_or(-1)
}

#[test]
fn between_begin_and_done_a_plain_post_waits_for_the_operator_who_resolves_it() {
    let payments = Payments::start();
    let call = json!({"name": "add_note", "arguments": {"text": "remember the milk"}});
    let wire = crash_and_restart(&payments, "action-begun=return", call.clone());
    // At restart the run was resumed and stopped in doubt: never sent again.
    assert_eq!(payments.ledger.lock().unwrap().notes.len(), 0);
    let report = status_report(&wire);
    assert!(report.contains("waiting for an operator at action 0: "), "{report}");
    assert!(report.contains("resolve with: warden resolve ") && report.contains(" --op 0 "), "{report}");
    let waiting: Vec<_> = std::fs::read_dir(wire.dir.path().join("journals/waiting")).unwrap().collect();
    assert_eq!(waiting.len(), 1);
    // The notify command failed once, then succeeded (retried with backoff).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !wire.stderr().contains("the operator was notified (attempt 2)") {
        assert!(Instant::now() < deadline, "notify was not retried: {}", wire.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    let inbox = std::fs::read_to_string(wire.dir.path().join("inbox.jsonl")).unwrap();
    assert!(inbox.contains("remember the milk") && !inbox.contains(SECRET));
    // A repeat of the call is a new run (no `once`), so the operator settles the first one.
    let _resumed = resolve_and_restart(wire, &report, &["--did-not-happen"]);
    assert_eq!(
        payments.ledger.lock().unwrap().notes,
        vec!["remember the milk".to_string()],
        "performed once, after the resolution"
    );
}

/// Issue 23 item 12: a run waiting for a person is not a crash loop. Restarted again and again
/// with nobody resolving it, it stays waiting for the happened / did-not-happen verdict (never
/// "halted", whose `--resume` would only bring the question back), and each start's
/// notification is delivered even when the server exits right after recovery.
#[test]
fn an_action_in_doubt_stays_waiting_however_often_the_server_restarts() {
    let payments = Payments::start();
    let call = json!({"name": "add_note", "arguments": {"text": "restart me"}});
    let mut wire = crash_and_restart(&payments, "action-begun=return", call);
    // The notify command fails once (then works): let the first start's retry deliver it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !wire.stderr().contains("the operator was notified") {
        assert!(Instant::now() < deadline, "notify never succeeded: {}", wire.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    for restart in 0..3 {
        let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
        drop(wire);
        let before = std::fs::read_to_string(dir.path().join("inbox.jsonl")).unwrap().lines().count();
        // Started, and its input closed at once: it exits right after recovery.
        wire = start(dir, None);
        wire.close_stdin();
        assert!(wire.wait_exit(Duration::from_secs(30)).success(), "{}", wire.stderr());
        let inbox = std::fs::read_to_string(wire.dir.path().join("inbox.jsonl")).unwrap();
        assert_eq!(inbox.lines().count(), before + 1, "restart {restart}: the notification owed was lost");
        let report = status_report(&wire);
        assert!(report.contains("waiting for an operator at action 0: "), "restart {restart}: {report}");
        assert!(!report.contains("halted") && !report.contains("--resume"), "restart {restart}: {report}");
        assert!(report.contains("--did-not-happen") || report.contains(" --op 0 "), "restart {restart}: {report}");
    }
    assert_eq!(payments.ledger.lock().unwrap().notes.len(), 0, "never sent again");
}

#[test]
fn a_lost_response_of_a_plain_post_stops_the_run_then_crashing_after_the_waiting_record_keeps_it() {
    let payments = Payments::start();
    // The service saves the note but answers after the 500 ms timeout: in doubt.
    let call = json!({"name": "add_note", "arguments": {"text": "slow note"}});
    let wire = crash_and_restart(&payments, "waiting-recorded=return", call);
    assert_eq!(payments.ledger.lock().unwrap().notes.len(), 1, "the service acted once");
    let report = status_report(&wire);
    assert!(report.contains("waiting for an operator"), "{report}");
    let _resumed = resolve_and_restart(wire, &report, &["--happened", r#"{"status": 201, "json": {"saved": 1}}"#]);
    assert_eq!(payments.ledger.lock().unwrap().notes.len(), 1, "nothing was sent again");
}

/// Random kill -9 under load: concurrent refunds (one per order, `once` by order), the server
/// killed at pseudo-random moments, restarted, and the calls resent. At the end: no order
/// refunded twice, every answered call backed by a settled run, nothing left unfinished.
#[test]
fn random_kill_9_under_load() {
    kill_9_under_load(None);
}

/// The same burst on the PostgreSQL store: journals appended line by line to the database by
/// runs in flight together, killed at random.
#[test]
fn random_kill_9_under_load_on_the_postgresql_store() {
    let pg = Pg::create("kill_9_store");
    kill_9_under_load(Some(&pg));
}

fn kill_9_under_load(store: Option<&Pg>) {
    const ROUNDS: u64 = 6;
    const ORDERS_PER_ROUND: u64 = 12;
    let payments = Payments::start();
    let mut dir = match store {
        Some(_) => on_store(folder(&payments)),
        None => folder(&payments),
    };
    let mut answered = 0;
    let mut kills = 0;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..ROUNDS {
        let mut wire = start_on(dir, None, store);
        wire.assert_serving(1);
        for n in 0..ORDERS_PER_ROUND {
            let order = format!("pi_9{:03}", round * 100 + n);
            // Resend the previous round's orders too: once must answer them from their runs.
            wire.send_request(Era::Modern, json!(format!("{round}-{n}")), "tools/call", refund(&order, "1.00"));
            if round > 0 {
                let earlier = format!("pi_9{:03}", (round - 1) * 100 + n);
                wire.send_request(
                    Era::Modern,
                    json!(format!("{round}-again-{n}")),
                    "tools/call",
                    refund(&earlier, "1.00"),
                );
            }
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // A run on the store is slower (a connection per write, no pool yet): waited for
        // ten times as long, so runs are caught at every step there too.
        let wait = Duration::from_millis(5 + seed % 60) * if store.is_some() { 10 } else { 1 };
        std::thread::sleep(wait);
        let killed = wire.kill_now();
        kills += killed as u64;
        answered +=
            wire.drain().iter().filter(|m| m.get("id").is_some() && m["result"]["isError"] == json!(false)).count();
        dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    }
    let mut last = start_on(dir, None, store);
    last.assert_serving(2);
    let by_order = refunds_by_order(&payments);
    assert!(by_order.values().all(|&minor| minor == 100), "an order was refunded twice: {by_order:?}");
    let settled = match store {
        Some(pg) => {
            assert_eq!(store_open_runs(pg), 0, "no run left unfinished");
            store_events(pg, "settle") as usize
        }
        None => {
            let report = status_report(&last);
            assert!(report.contains("unfinished runs: none"), "{report}");
            let ledger = std::fs::read_to_string(last.dir.path().join("journals/server.ledger")).unwrap();
            ledger.matches("\"event\":\"settle\"").count()
        }
    };
    assert_eq!(settled, by_order.len(), "every refund made belongs to one settled run");
    println!(
        "kill -9 under load: {ROUNDS} rounds, {kills} kills, {} calls sent, {answered} answered before a kill, \
         {} refunds made (one per order), {settled} runs settled",
        ROUNDS * ORDERS_PER_ROUND * 2 - ORDERS_PER_ROUND,
        by_order.len()
    );
}

/// Issue 25 item 6: beside a live server, `warden resolve` hands the operator's word to it
/// through the admin channel (a Unix socket in the journals directory, 0600): the server
/// journals it and resumes the run at once, without a restart. `warden runs list/show` read
/// the run beside the live server.
#[test]
fn a_live_server_takes_the_operators_word_and_resumes_the_run() {
    let payments = Payments::start();
    let call = json!({"name": "add_note", "arguments": {"text": "resolved live"}});
    let mut wire = crash_and_restart(&payments, "action-begun=return", call);
    let report = status_report(&wire);
    assert!(report.contains("waiting for an operator at action 0: "), "{report}");
    let journal = common::printed_journal(&report);
    let socket = wire.dir.path().join("journals/server.admin");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the admin socket's mode");
    let manifest = wire.dir.path().join("manifest.json");
    let listed = warden(&["runs", "list", manifest.to_str().unwrap(), "--state", "waiting_for_operator"]);
    assert!(listed.contains("add_note") && listed.contains("waiting_for_operator"), "{listed}");
    let status: Value =
        serde_json::from_str(&warden(&["mcp", "status", manifest.to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(status["server"], "running", "{status}");
    let unfinished = &status["unfinished"][0];
    assert_eq!(unfinished["waiting_for_operator"], true, "{status}");
    let run = unfinished["run"].as_str().unwrap();
    assert!(journal.ends_with(&format!("{run}.journal")), "{status}");
    assert!(unfinished["resolve"].as_str().unwrap().contains(&format!(" {run} --op 0 ")), "{status}");
    let resolved = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["resolve", "--journal", &journal, "--op", "0", "--did-not-happen"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&resolved.stdout);
    assert!(resolved.status.success(), "{}", String::from_utf8_lossy(&resolved.stderr));
    assert!(said.contains("the server resumes the run now"), "{said}");
    // The live server performs it, once, with no restart.
    let deadline = Instant::now() + Duration::from_secs(20);
    while payments.ledger.lock().unwrap().notes.is_empty() {
        assert!(Instant::now() < deadline, "the run was not resumed: {}", wire.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    while !status_report(&wire).contains("unfinished runs: none") {
        assert!(Instant::now() < deadline, "the run did not settle: {}", status_report(&wire));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(payments.ledger.lock().unwrap().notes, vec!["resolved live".to_string()]);
    let run = journal.rsplit('/').next().unwrap().trim_end_matches(".journal").to_string();
    let shown = warden(&["runs", "show", manifest.to_str().unwrap(), &run[..8]]);
    assert!(shown.contains(": done") && shown.contains("did not happen, ") && shown.contains(" said"), "{shown}");
    assert!(shown.contains("#0 net.http.post POST") && shown.contains("done in "), "{shown}");
    assert!(wire.stderr().contains("through the admin channel"), "{}", wire.stderr());
    // A second word for the same run finds nothing waiting.
    let again = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["resolve", "--journal", &journal, "--op", "0", "--did-not-happen"])
        .output()
        .unwrap();
    assert!(!again.status.success());
    wire.assert_serving(9);
}

/// On the PostgreSQL store, the operator's runbook is the same beside a live server: `warden
/// mcp status` (reading the store) lists the run waiting at its action in doubt and the command,
/// `warden resolve` hands the word to the server through its admin channel, and the run is
/// performed once and settles. With the server stopped, the word is refused, saying to start
/// the server first (the run's records are not files the command could write).
#[test]
fn on_the_postgresql_store_the_operator_resolves_beside_the_live_server() {
    let payments = Payments::start();
    let pg = Pg::create("resolve_on_store");
    let mut wire = start_on(on_store(folder(&payments)), Some("action-begun=return"), Some(&pg));
    let call = json!({"name": "add_note", "arguments": {"text": "resolved on the store"}});
    wire.send_request(Era::Modern, json!(1), "tools/call", call);
    assert!(!wire.wait_exit(Duration::from_secs(30)).success(), "the process did not die at the crash point");
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    drop(wire);
    let mut wire = start_on(dir, None, Some(&pg));
    wire.assert_serving(900);
    let manifest = wire.dir.path().join("manifest.json");
    let on_store = |args: &[&str]| {
        let output =
            Command::new(env!("CARGO_BIN_EXE_warden")).args(args).env(STORE_URL_ENV, &pg.url).output().unwrap();
        let said = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
        assert!(!said.contains(&pg.password()), "{said}");
        (output.status.success(), said)
    };
    let (ok, report) = on_store(&["mcp", "status", manifest.to_str().unwrap()]);
    assert!(ok && report.contains("waiting for an operator at action 0: "), "{report}");
    assert!(report.contains("warden_ledger"), "the report names the store's ledger: {report}");
    // Who serves the store and who owns the run: the restart took slot 1 again, at epoch 2.
    assert!(report.contains("server: running, 1 instance(s) on the store: instance-1 (epoch 2"), "{report}");
    assert!(report.contains("reserved") && report.contains("owned by instance-1"), "{report}");
    let run = report.split("add_note ").nth(1).unwrap().split(',').next().unwrap().to_string();
    let (ok, shown) = on_store(&["runs", "show", manifest.to_str().unwrap(), &run]);
    assert!(ok && shown.contains("owned by instance instance-1"), "{shown}");
    let journal = common::printed_journal(&report);
    assert!(!Path::new(&journal).exists(), "no journal file on the store: {journal}");
    let (ok, said) = on_store(&["resolve", "--journal", &journal, "--op", "0", "--did-not-happen"]);
    assert!(ok && said.contains("the server resumes the run now"), "{said}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while store_open_runs(&pg) > 0 {
        assert!(Instant::now() < deadline, "the run did not settle: {}", wire.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(payments.ledger.lock().unwrap().notes, vec!["resolved on the store".to_string()]);
    let (ok, report) = on_store(&["mcp", "status", manifest.to_str().unwrap()]);
    assert!(ok && report.contains("unfinished runs: none"), "{report}");
    let (ok, listed) = on_store(&["runs", "list", manifest.to_str().unwrap()]);
    assert!(ok && listed.contains("add_note") && listed.contains("done"), "{listed}");
    let run = journal.rsplit('/').next().unwrap().trim_end_matches(".journal").to_string();
    let (ok, shown) = on_store(&["runs", "show", manifest.to_str().unwrap(), &run[..8]]);
    assert!(ok && shown.contains("did not happen, ") && shown.contains(" said"), "{shown}");
    assert!(shown.contains("in the PostgreSQL store"), "the journal is named where it is: {shown}");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_records WHERE kind = 'waiting'"), "0");

    // The run is settled: the store says no instance owns it, with the server up or stopped.
    let (ok, said) = on_store(&["resolve", "--journal", &journal, "--op", "0", "--did-not-happen"]);
    assert!(!ok && said.contains("is not open in the PostgreSQL store"), "{said}");
    let _kept = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    drop(wire);
    let (ok, said) = on_store(&["resolve", "--journal", &journal, "--op", "0", "--did-not-happen"]);
    assert!(!ok && said.contains("is not open in the PostgreSQL store"), "{said}");
}

/// The admin channel serves the server's own account only: another account cannot open the
/// socket (0600), and with the socket's mode loosened it is still refused by its peer
/// credentials (root bypasses file modes). The run stays waiting.
#[test]
fn the_admin_channel_refuses_another_account() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Another account can only be borrowed as root; CI runs as root.
        panic!("this test runs as root (it takes the account `nobody` for the other user)");
    }
    let payments = Payments::start();
    let call = json!({"name": "add_note", "arguments": {"text": "not yours"}});
    let mut wire = crash_and_restart(&payments, "action-begun=return", call);
    let report = status_report(&wire);
    let journal = common::printed_journal(&report);
    let run = journal.rsplit('/').next().unwrap().trim_end_matches(".journal").to_string();
    let socket = wire.dir.path().join("journals/server.admin");
    use std::os::unix::fs::PermissionsExt;
    // The way to the socket is opened to everyone: only the socket's own guards stand.
    for dir in [wire.dir.path().to_path_buf(), wire.dir.path().join("journals")] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let request = format!(r#"{{"command":"resolve","run":"{run}","op":0,"happened":null}}"#);
    let by_mode = as_nobody_ask(&socket, &request);
    assert!(by_mode.contains("PermissionError"), "{by_mode}");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let by_credentials = as_nobody_ask(&socket, &request);
    assert!(by_credentials.contains("refused: this server's admin channel serves its own account"), "{by_credentials}");
    assert!(status_report(&wire).contains("waiting for an operator at action 0: "), "{}", status_report(&wire));
    assert!(payments.ledger.lock().unwrap().notes.is_empty());
    wire.assert_serving(9);
}

/// Connects to `socket` as the account `nobody` and sends `request`: what came back, or the
/// error the connection met.
fn as_nobody_ask(socket: &Path, request: &str) -> String {
    // As `warden resolve` does: a failed write (a server that refused without reading) does
    // not stop it reading the answer.
    let script = "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1])\n \
                  try: s.sendall(sys.argv[2].encode()+b'\\n')\n except OSError: pass\n \
                  print(s.makefile().readline())\nexcept Exception as e:\n print(type(e).__name__, e)";
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script])
        .arg(socket)
        .arg(request)
        .output()
        .unwrap();
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn warden(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_warden")).args(args).output().unwrap();
    assert!(output.status.success(), "warden {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A manifest switched from files to the PostgreSQL store (or back) while the other place
/// still holds an open run would abandon it: its reserve never settled, its action never
/// finished. The switch is refused, naming the run and what to do, until the place it was kept
/// in has finished it; a switch with nothing open goes on.
#[test]
fn switching_the_store_with_a_run_open_is_refused_until_it_is_finished() {
    let payments = Payments::start();
    let pg = Pg::create("switch_store");
    let to_files = |dir: tempfile::TempDir| {
        let path = dir.path().join("manifest.json");
        let mut manifest: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        manifest["server"].as_object_mut().unwrap().remove("store");
        // The refund's timeouts as the fixture has them (`on_store` shortens them to its lease):
        // a run begun on files resumes with its tool's configuration unchanged.
        for tool in manifest["tools"].as_array_mut().unwrap() {
            if tool["net"]["timeout_ms"] == json!(700) {
                tool["net"] = json!({"connect_timeout_ms": 1000, "timeout_ms": 3000});
            }
        }
        std::fs::write(&path, manifest.to_string()).unwrap();
        dir
    };
    let refused = |dir: tempfile::TempDir, store: Option<&Pg>, expected: &[&str]| {
        let mut wire = start_on(dir, None, store);
        let status = wire.wait_exit(Duration::from_secs(30));
        let said = wire.stderr();
        assert!(!status.success(), "the switch was not refused: {said}");
        for words in expected {
            assert!(said.contains(words), "{words:?} not in: {said}");
        }
        assert!(!said.contains(&pg.password()), "{said}");
        std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap())
    };
    let crashed = |dir: tempfile::TempDir, store: Option<&Pg>, order: &str| {
        let mut wire = start_on(dir, Some("journal-created=return"), store);
        wire.send_request(Era::Modern, json!(1), "tools/call", refund(order, "10.00"));
        assert!(!wire.wait_exit(Duration::from_secs(30)).success(), "the process did not die at the crash point");
        std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap())
    };
    let finished = |dir: tempfile::TempDir, store: Option<&Pg>| {
        let mut wire = start_on(dir, None, store);
        wire.assert_serving(900);
        assert!(status_report(&wire).contains("unfinished runs: none") || store.is_some());
        std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap())
    };

    // Files to the store, a run open in the files: refused; back on files it finishes.
    let dir = crashed(folder(&payments), None, "pi_1001");
    let dir = refused(on_store(dir), Some(&pg), &["still open in the files", "server.store", "warden runs list"]);
    let tables = pg.sql("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'warden%'");
    assert_eq!(tables, "0", "refused before the store was touched");
    let dir = finished(to_files(dir), None);
    assert_eq!(payments.refunded_minor(), 1000, "the open run finished where it was kept, once");

    // Nothing open: the switch goes on. Then the store holds an open run, and the way back is
    // refused, by the store's own count, or for want of its URL.
    let dir = finished(on_store(dir), Some(&pg));
    let dir = crashed(dir, Some(&pg), "pi_1002");
    assert_eq!(store_open_runs(&pg), 1);
    let dir = refused(to_files(dir), Some(&pg), &["still open in the PostgreSQL store", STORE_URL_ENV]);
    let dir = refused(dir, None, &[STORE_URL_ENV, "is not set"]);
    let dir = finished(on_store(dir), Some(&pg));
    assert_eq!(store_open_runs(&pg), 0, "the store finished its run");
    // Back to files: the store is checked through its URL, found with nothing open.
    let dir = finished(to_files(dir), Some(&pg));

    // A damaged place is refused, naming the file, not taken for files.
    std::fs::write(dir.path().join("journals/server.store"), "{\"kept_in\":\"files\"}\n").unwrap();
    refused(dir, None, &["server.store: not a record line", "restore it"]);
}

/// The refund tool of a folder made to fill its quota: each run reserves 2.00 and is charged
/// what it refunds (1.00), at most 15.00 a window.
fn with_a_tight_money_quota(dir: &tempfile::TempDir) {
    let path = dir.path().join("manifest.json");
    let mut manifest: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    manifest["tools"][0]["grants"]["pay"]["each"] = json!({"amount": "2.00", "currency": "USD"});
    manifest["tools"][0]["quota"] =
        json!({"window": "24h", "calls": 1000, "money": {"amount": "15.00", "currency": "USD"}});
    std::fs::write(&path, manifest.to_string()).unwrap();
}

/// What the payments service refunded, in cents, by order.
fn refunds_by_order(payments: &Payments) -> std::collections::BTreeMap<String, i64> {
    let mut by_order = std::collections::BTreeMap::new();
    for (intent, minor) in payments.ledger.lock().unwrap().refunds.iter() {
        *by_order.entry(intent.clone()).or_insert(0) += minor;
    }
    by_order
}

/// The most money the store's ledger ever held against a quota, in cents, line after line:
/// each open run at what it reserved, each settled run at what it was charged.
/// Open runs `instance` owns on the store.
fn owned_by(pg: &Pg, instance: &str) -> u64 {
    pg.sql(&format!("SELECT count(*) FROM warden_owners WHERE instance = '{instance}'")).trim().parse().unwrap()
}

/// Waits until the lookup of payment intent `intent` (one that lingers) reached the payments
/// service: its run is open, and stays open for the tool's `net.timeout_ms` (700 ms) at least.
fn wait_until_looked_up(payments: &Payments, intent: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let path = format!("/v1/payment_intents/{intent}");
    while !payments.ledger.lock().unwrap().requests.iter().any(|seen| seen.path == path) {
        assert!(Instant::now() < deadline, "the lookup of {intent} never reached the payments service");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn most_held_cents(pg: &Pg) -> i64 {
    use warden::store::ledger::{Event, MoneyRecord};
    let cents = |money: &[MoneyRecord]| -> i64 {
        money.iter().map(|m| (m.amount.parse::<f64>().unwrap() * 100.0).round() as i64).sum()
    };
    let lines = pg.sql("SELECT convert_from(line, 'UTF8') FROM warden_ledger ORDER BY seq");
    let (mut open, mut held, mut most) = (std::collections::BTreeMap::new(), 0, 0);
    for line in lines.lines() {
        match warden::store::record::decode::<Event>(line.as_bytes()).unwrap() {
            Event::Reserve { run, money, .. } => {
                held += cents(&money);
                open.insert(run, cents(&money));
            }
            Event::Settle { run, charged, .. } => held += cents(&charged) - open.remove(&run).unwrap(),
            Event::Release { run, .. } => held -= open.remove(&run).unwrap(),
            // An operator's release of a key holds and frees no money.
            Event::Forget { .. } => {}
        }
        most = most.max(held);
    }
    most
}

/// Issue 28 item 5: three servers on one manifest share the PostgreSQL store. A burst of
/// refunds is spread over them, each order sent to one instance and again to another (`once`
/// holds across instances), under a money quota every instance counts. One instance dies at an
/// action's begin (its refund in doubt) and another is killed (kill -9) in the middle of the
/// burst; neither is started again: the survivor takes their runs over once their leases end,
/// finishes them (the refund in doubt sent again under its idempotency key), and leaves no run
/// open. Every order is refunded once at most, and the quota is held.
#[test]
fn three_instances_share_the_store_through_kills_in_a_burst() {
    const ORDERS: usize = 30;
    let payments = Payments::start();
    let pg = Pg::create("three_instances");
    let dir = on_store(folder(&payments));
    with_a_tight_money_quota(&dir);
    let env = [("STRIPE_SECRET_KEY", SECRET), (STORE_URL_ENV, pg.url.as_str())];
    let mut survivor = Wire::start_dir(dir, &env);
    survivor.assert_serving(1);
    let mut killed = survivor.start_beside(&env);
    killed.assert_serving(1);
    let crashing =
        [("STRIPE_SECRET_KEY", SECRET), (STORE_URL_ENV, pg.url.as_str()), ("FAILPOINTS", "action-begun=return")];
    let mut crashed = survivor.start_beside(&crashing);
    crashed.assert_serving(1);
    crashed.send_request(Era::Modern, json!("first"), "tools/call", refund("pi_97000", "1.00"));
    assert!(!crashed.wait_exit(Duration::from_secs(30)).success(), "the process did not die at the crash point");

    // A refund whose lookup lingers, sent first (within the quota): the instance to be killed
    // surely owns an open run when killed.
    killed.send_request(Era::Modern, json!("lingering"), "tools/call", refund("pi_slowlookup_1", "1.00"));
    let mut instances = [survivor, killed];
    let mut alive = 2;
    for n in 1..ORDERS {
        // After the kill, the calls go to the survivor alone, as a client's retries would.
        let order = format!("pi_97{n:03}");
        instances[n % alive].send_request(Era::Modern, json!(format!("{n}")), "tools/call", refund(&order, "1.00"));
        let again = json!(format!("{n}-again"));
        instances[(n + 1) % alive].send_request(Era::Modern, again, "tools/call", refund(&order, "1.00"));
        if n == ORDERS / 2 {
            // Killed while its lingering refund's lookup is surely in progress.
            wait_until_looked_up(&payments, "pi_slowlookup_1");
            assert!(instances[1].kill_now(), "the instance was alive until the kill");
            assert_ne!(owned_by(&pg, "instance-2"), 0, "the killed instance owned a run to take over");
            alive = 1;
        }
    }
    let [mut survivor, _killed] = instances;
    let deadline = Instant::now() + Duration::from_secs(60);
    while store_open_runs(&pg) > 0 {
        assert!(Instant::now() < deadline, "runs left open: {}", survivor.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    let said = survivor.stderr();
    assert!(said.contains("took over 1 run(s) of instance `instance-3`"), "{said}");
    assert!(said.contains("of instance `instance-2`"), "the killed instance's runs were taken over: {said}");
    assert!(!said.contains(&pg.password()) && !said.contains(SECRET), "{said}");
    let by_order = refunds_by_order(&payments);
    assert!(by_order.values().all(|&minor| minor == 100), "an order was refunded twice: {by_order:?}");
    assert!(by_order.contains_key("pi_97000"), "the refund in doubt was finished once: {by_order:?} {said}");
    let refunded: i64 = by_order.values().sum();
    assert!(refunded <= 1500, "the quota of 15.00 was exceeded: {refunded} cents refunded");
    let most = most_held_cents(&pg);
    assert!(most <= 1500, "the ledger held {most} cents against the quota of 1500 at some line");
    assert!(store_events(&pg, "settle") as usize >= by_order.len(), "every refund belongs to a settled run");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_owners"), "0", "no run is owned any more");
    // Every call the survivor was sent is answered, and it goes on serving.
    survivor.send_request(Era::Modern, json!(900), "tools/list", json!({}));
    let mut answered = 0;
    while survivor.recv()["id"] != json!(900) {
        answered += 1;
    }
    // One call an order until the kill, both after it.
    assert_eq!(answered, ORDERS / 2 + 2 * (ORDERS - 1 - ORDERS / 2), "an answer to every call the survivor was sent");
    println!(
        "three instances: {} orders, {} refunded ({refunded} cents; quota 1500, at most {most} held), {} runs settled, \
         {} released",
        ORDERS,
        by_order.len(),
        store_events(&pg, "settle"),
        store_events(&pg, "release")
    );
}

/// A `warden serve-http` replica of a folder's manifest: its process, address and log.
struct Replica {
    child: std::process::Child,
    address: std::net::SocketAddr,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Replica {
    fn start(dir: &Path, env: &[(&str, &str)]) -> Replica {
        use std::io::BufRead;
        let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
        command.arg("serve-http").arg(dir.join("manifest.json")).args(["--listen", "127.0.0.1:0"]);
        command.envs(env.iter().copied()).stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        let mut child = command.stderr(std::process::Stdio::piped()).spawn().unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let address = loop {
            let line = lines.next().expect("the replica logs where it listens").unwrap();
            stderr.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some((_, rest)) = line.split_once("warden: listening on http://") {
                break rest.strip_suffix("/mcp").unwrap().parse().unwrap();
            }
        };
        let kept = std::sync::Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Replica { child, address, stderr }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A 2026-07-28 `tools/call` of `refund_order` POSTed to `address`: its answer, or `None` when
/// the replica could not be reached or answered nothing (killed meanwhile).
fn post_refund(address: std::net::SocketAddr, id: u64, order: &str) -> Option<Value> {
    use std::io::{Read, Write};
    let mut call = refund(order, "1.00");
    call["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                           "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": call}).to_string();
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-method: tools/call\r\nmcp-name: refund_order\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body.as_bytes()).ok()?;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    serde_json::from_slice(&raw[split + 4..]).ok()
}

/// Issue 28 item 5 over Streamable HTTP: three `warden serve-http` replicas of one manifest on
/// the PostgreSQL store, a client spreading refunds over them (each order to one replica and
/// again to the next, as a load balancer's retries would: `once` holds across them), under a
/// money quota, and one replica killed (kill -9) in the middle of the burst, its calls then
/// sent to the others. Its runs are taken over once its lease ends: every order refunded once
/// at most, the quota held at every line of the ledger, no run left open or owned.
#[test]
fn three_http_replicas_share_the_store_through_a_kill_9_in_a_burst() {
    const ORDERS: u64 = 24;
    let payments = Payments::start();
    let pg = Pg::create("three_replicas");
    let dir = on_store(folder(&payments));
    with_a_tight_money_quota(&dir);
    let env = [("STRIPE_SECRET_KEY", SECRET), (STORE_URL_ENV, pg.url.as_str())];
    let mut replicas: Vec<Replica> = (0..3).map(|_| Replica::start(dir.path(), &env)).collect();
    let addresses: Vec<std::net::SocketAddr> = replicas.iter().map(|r| r.address).collect();
    // A refund whose lookup lingers, sent to the replica to be killed: it surely owns an open
    // run when killed, which a survivor must take over.
    let to_be_killed = addresses[2];
    let lingering = std::thread::spawn(move || post_refund(to_be_killed, 999, "pi_slowlookup_2"));
    // Alone, so no other instance's admission makes it try again: its lookup reaches the service.
    wait_until_looked_up(&payments, "pi_slowlookup_2");
    let dead = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..ORDERS)
            .map(|n| {
                let (addresses, dead) = (addresses.clone(), std::sync::Arc::clone(&dead));
                scope.spawn(move || {
                    std::thread::sleep(Duration::from_millis(20 * n));
                    let order = format!("pi_98{n:03}");
                    let mut answers = 0;
                    for (attempt, offset) in [0, 1].into_iter().enumerate() {
                        // A replica found dead is skipped, as a load balancer would.
                        let mut to = (n as usize + offset) % 3;
                        if to == 2 && dead.load(std::sync::atomic::Ordering::SeqCst) {
                            to = (to + 1) % 3;
                        }
                        let id = n * 10 + attempt as u64;
                        match post_refund(addresses[to], id, &order) {
                            Some(answer) if answer["id"] == json!(id) => answers += 1,
                            _ => {
                                let retried = post_refund(addresses[(to + 1) % 3], id + 5, &order);
                                answers += retried.is_some() as u64;
                            }
                        }
                    }
                    answers
                })
            })
            .collect();
        // Killed in the burst, while its lingering refund's lookup is surely in progress (it
        // times out at 700 ms).
        std::thread::sleep(Duration::from_millis(100));
        let killed = replicas[2].child.kill().is_ok() && replicas[2].child.wait().is_ok();
        dead.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(killed, "the replica was killed");
        assert_ne!(owned_by(&pg, "instance-3"), 0, "the killed replica owned a run to take over");
        clients.into_iter().map(|client| client.join().unwrap()).sum::<u64>()
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while store_open_runs(&pg) > 0 {
        assert!(Instant::now() < deadline, "runs left open: {}", replicas[0].stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    let by_order = refunds_by_order(&payments);
    assert!(by_order.values().all(|&minor| minor == 100), "an order was refunded twice: {by_order:?}");
    let most = most_held_cents(&pg);
    assert!(most <= 1500, "the ledger held {most} cents against the quota of 1500 at some line");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_owners"), "0", "no run is owned any more");
    assert_eq!(answered, 2 * ORDERS, "every call answered, by a live replica");
    for replica in &replicas[..2] {
        let said = replica.stderr();
        assert!(!said.contains(&pg.password()) && !said.contains(SECRET), "{said}");
    }
    let took_over = replicas[..2].iter().any(|replica| replica.stderr().contains("of instance `instance-3`"));
    assert!(took_over, "a survivor took over the killed replica's runs: {}", replicas[0].stderr());
    let _ = lingering.join();
    println!(
        "three HTTP replicas: {ORDERS} orders, {} refunded; at most {most} cents held of 1500; {} runs settled",
        by_order.len(),
        store_events(&pg, "settle")
    );
}
