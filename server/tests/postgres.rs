//! `db.postgres` on the real binary against a real PostgreSQL server (the throwaway cluster of
//! `scripts/postgres.sh`): a write and its `warden_actions` row in one transaction, reads in a
//! READ ONLY transaction, typed columns as JSON, the statement timeout from `net`, a server
//! that refuses or is gone, a write begun before a kill -9 done exactly once at restart, and
//! the connection password in no output. Every message is schema-validated by the harness.

mod common;

use std::time::{Duration, Instant};

use common::postgres::Pg;
use common::{fixture, private_copy, walk, Era, Wire};
use serde_json::{json, Value};

fn start(url: &str) -> Wire {
    Wire::start_dir(private_copy(&fixture("postgres")), &[("DESK_PG_URL", url)])
}

fn call(wire: &mut Wire, id: i64, name: &str, arguments: Value) -> Value {
    let answer = wire.request(Era::Modern, json!(id), "tools/call", json!({"name": name, "arguments": arguments}));
    answer["result"].clone()
}

fn result(answer: &Value) -> &Value {
    &answer["structuredContent"]["result"]
}

fn error_text(answer: &Value) -> String {
    assert_eq!(answer["isError"], json!(true), "{answer}");
    answer["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

/// Every byte the server wrote: its answers, its log, its journals.
fn everything_written(wire: &mut Wire) -> String {
    wire.close_stdin();
    wire.wait_exit(Duration::from_secs(20));
    let mut all = serde_json::to_string(&wire.received).unwrap() + &wire.stderr();
    for path in walk(wire.dir.path()) {
        all.push_str(&String::from_utf8_lossy(&std::fs::read(path).unwrap()));
    }
    all
}

#[test]
fn a_write_commits_with_its_action_row_and_reads_come_back_typed() {
    let pg = Pg::create("write");
    pg.desk();
    let mut wire = start(&pg.url);
    let closed = call(&mut wire, 1, "close_ticket", json!({"ticket_id": 1, "note": "fixed in 2.1"}));
    assert_eq!(result(&closed), &json!({"ticket_id": 1, "changes": 1}), "{closed}");
    assert_eq!(pg.sql("SELECT status || ' ' || note FROM tickets WHERE id = 1"), "closed fixed in 2.1");
    // The write's (run, action) row, committed with it.
    let run = closed["_meta"]["dev.warden/run"]["run"].as_str().unwrap().to_string();
    assert_eq!(pg.sql("SELECT run || ' ' || action FROM warden_actions"), format!("{run} 0"));

    let found = call(&mut wire, 2, "find_ticket", json!({"ticket_id": 1}));
    let row = &result(&found)["rows"][0];
    assert_eq!(
        row,
        &json!({"id": 1, "status": "closed", "note": "fixed in 2.1", "urgent": true, "score": 2.5,
                            "meta": {"tier": "gold"}}),
        "{found}"
    );
    let empty = call(&mut wire, 3, "find_ticket", json!({"ticket_id": 2}));
    assert_eq!(result(&empty)["rows"][0]["score"], Value::Null, "{empty}");

    // A column of a type Warden does not read is named, with the cast that reads it.
    let opened = call(&mut wire, 4, "run_sql", json!({"sql": "SELECT opened FROM tickets", "write": false}));
    let problem = result(&opened)["error"].as_str().unwrap_or_default().to_string();
    assert!(problem.contains("column `opened` has type timestamptz") && problem.contains("opened::text"), "{opened}");
    let text = call(&mut wire, 5, "run_sql", json!({"sql": "SELECT opened::text AS t FROM tickets", "write": false}));
    assert!(result(&text)["rows"][0]["t"].is_string(), "{text}");
    // Floats JSON has no number for come back as PostgreSQL writes them; an f32 as its
    // shortest decimal.
    let floats = "SELECT 'NaN'::float8 AS n, '-Infinity'::float4 AS i, 0.1::float4 AS f";
    let floats = call(&mut wire, 6, "run_sql", json!({"sql": floats, "write": false}));
    assert_eq!(result(&floats)["rows"][0], json!({"n": "NaN", "i": "-Infinity", "f": 0.1}), "{floats}");
    assert!(!everything_written(&mut wire).contains(&pg.password()));
}

#[test]
fn a_read_grant_cannot_write_by_either_method() {
    let pg = Pg::create("readonly");
    pg.desk();
    let mut wire = start(&pg.url);
    // `execute` through a read grant is refused by the broker, before any connection.
    let refused = call(&mut wire, 1, "run_sql", json!({"sql": "DELETE FROM tickets", "write": true}));
    assert!(error_text(&refused).contains("read-only"), "{refused}");
    // A write hidden in `query` runs in a READ ONLY transaction: PostgreSQL refuses it.
    let hidden = call(&mut wire, 2, "run_sql", json!({"sql": "DELETE FROM tickets RETURNING id", "write": false}));
    let problem = result(&hidden)["error"].as_str().unwrap_or_default().to_string();
    assert!(problem.contains("read-only transaction"), "{hidden}");
    let sneaky = "SELECT 1 AS x; DELETE FROM tickets";
    let several = call(&mut wire, 3, "run_sql", json!({"sql": sneaky, "write": false}));
    assert!(result(&several)["error"].is_string(), "{several}");
    assert_eq!(pg.sql("SELECT count(*) FROM tickets"), "2", "nothing was deleted");
    // A statement that would end Warden's transaction, or lift its time limit, is refused,
    // comments before it or not.
    for (id, sql) in
        [(4, "COMMIT"), (5, "/* a /* nested */ comment */ -- and a line\n rollback"), (6, "SET statement_timeout = 0")]
    {
        let control = call(&mut wire, id, "run_sql", json!({"sql": sql, "write": false}));
        let problem = result(&control)["error"].as_str().unwrap_or_default().to_string();
        assert!(problem.contains("statements are refused"), "{sql}: {control}");
    }
    wire.assert_serving(9);
}

/// Issue 23 item 9: PostgreSQL drops an empty statement before the next, so `;ROLLBACK` is a
/// ROLLBACK: through a write grant it would remove the action's own `warden_actions` row while
/// the action is journaled done. Refused, whatever empty statements come first.
#[test]
fn transaction_control_behind_empty_statements_is_refused() {
    let pg = Pg::create("emptystatements");
    pg.desk();
    let mut wire = start(&pg.url);
    let statements = [";ROLLBACK", "; COMMIT", ";;rollback", "/* c */ ; SET statement_timeout = 0", " ;\n;abort"];
    for (id, sql) in (1..).zip(statements) {
        let control = call(&mut wire, id, "write_sql", json!({"sql": sql, "write": true}));
        let problem = result(&control)["error"].as_str().unwrap_or_default().to_string();
        assert!(problem.contains("statements are refused"), "{sql}: {control}");
    }
    let written =
        call(&mut wire, 9, "write_sql", json!({"sql": "UPDATE tickets SET note = 'x' WHERE id = 1", "write": true}));
    assert_eq!(result(&written)["changes"], json!(1), "{written}");
    // The refused statements left no row; the write left its own.
    assert_eq!(pg.sql("SELECT count(*) FROM warden_actions"), "1");
}

#[test]
fn a_slow_statement_is_cancelled_at_the_tools_timeout_and_the_server_goes_on() {
    let pg = Pg::create("slow");
    let mut wire = start(&pg.url);
    let began = Instant::now();
    // `run_sql`'s `net.timeout_ms` is 500: PostgreSQL cancels the statement.
    let slow = call(&mut wire, 1, "run_sql", json!({"sql": "SELECT pg_sleep(30)", "write": false}));
    let problem = result(&slow)["error"].as_str().unwrap_or_default().to_string();
    assert!(problem.contains("statement timeout"), "{slow}");
    assert!(began.elapsed() < Duration::from_secs(20), "the statement was not cut at its timeout");
    wire.assert_serving(9);
}

#[test]
fn a_server_that_refuses_or_rejects_the_password_is_an_error_without_the_password() {
    let pg = Pg::create("refused");
    pg.desk();
    let wrong = pg.url_with_password("not-the-password-9f2c");
    let mut wire = start(&wrong);
    let rejected = call(&mut wire, 1, "close_ticket", json!({"ticket_id": 1, "note": "never"}));
    assert!(error_text(&rejected).contains("password authentication failed"), "{rejected}");
    let written = everything_written(&mut wire);
    assert!(!written.contains("not-the-password-9f2c"), "the password was written");

    // Nothing listens on the port: refused, nothing committed, not in doubt.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let closed = format!("postgres://warden:nobody-listens-7d1e@127.0.0.1:{port}/desk");
    let mut wire = start(&closed);
    let refused = call(&mut wire, 1, "close_ticket", json!({"ticket_id": 1, "note": "never"}));
    assert!(error_text(&refused).contains("PostgreSQL"), "{refused}");
    assert_eq!(pg.sql("SELECT status FROM tickets WHERE id = 1"), "open");
    let written = everything_written(&mut wire);
    assert!(!written.contains("nobody-listens-7d1e") && !written.contains("waiting"), "{written}");
}

/// A write blocked on a lock another session holds is begun (journaled) and not committed
/// when the server is killed with SIGKILL; the lock is let go, and at restart the write is
/// looked up in `warden_actions`, not found, and done: once.
#[test]
fn a_write_begun_before_a_kill_9_is_done_exactly_once() {
    let pg = Pg::create("kill");
    pg.desk();
    let mut holder = std::process::Command::new("psql")
        .arg(&pg.url)
        .args(["-Atq", "-c", "BEGIN; LOCK TABLE tickets IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(120); COMMIT;"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let locked = || pg.sql("SELECT count(*) FROM pg_locks WHERE mode = 'AccessExclusiveLock' AND granted");
    wait_until(|| locked() != "0", "the other session to lock the table");
    let mut wire = start(&pg.url);
    let call = json!({"name": "close_ticket", "arguments": {"ticket_id": 2, "note": "after the kill"}});
    wire.send_request(Era::Modern, json!(1), "tools/call", call.clone());
    let journals = wire.dir.path().join("journals");
    let begun = || walk(&journals).iter().any(|p| std::fs::read_to_string(p).unwrap_or_default().contains("\"begin\""));
    wait_until(begun, "the write's begin record");
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'";
    wait_until(|| pg.sql(waiting) != "0", "the write to wait for the lock");
    assert!(wire.kill_now(), "the server was still running");
    let _ = holder.kill();
    let _ = holder.wait();
    pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()");
    assert_eq!(pg.sql("SELECT status FROM tickets WHERE id = 2"), "open", "the killed write did not commit");

    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    drop(wire);
    let mut wire = Wire::start_dir(dir, &[("DESK_PG_URL", &pg.url)]);
    wire.assert_serving(900);
    wait_until(|| pg.sql("SELECT status FROM tickets WHERE id = 2") == "closed", "the resumed write");
    assert!(wire.stderr().contains("not in warden_actions; performing it"), "{}", wire.stderr());
    assert_eq!(pg.sql("SELECT count(*) FROM warden_actions"), "1");
    assert_eq!(pg.sql("SELECT note FROM tickets WHERE id = 2"), "after the kill");
    assert!(!everything_written(&mut wire).contains(&pg.password()));
}

fn wait_until(mut done: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
