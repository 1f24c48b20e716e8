//! The defects a hostile client, a careless operator and a misbehaving service found (the
//! correctness issue), each reproduced through the simulator, which runs the server's own code:
//! a begun action dropped at the deadline, money quotas a grant could overspend, secrets
//! reflected back through JSON escapes, records too large for their reader, overflowing
//! manifest numbers, program headers overriding the broker's, refunds in another currency,
//! `warden mcp status` naming no action, and the review's findings (resolve beside a live
//! server, I/O errors read as "absent", missing secrets, a lax journal reader, deadlines on
//! the wall clock).

mod common;

use common::{ask, call, journals, text, usd};
use serde_json::{json, Value};
use warden::env::Point;
use warden::store::journal::JournalRecord;
use warden_sim::checks::check;
use warden_sim::env::executor::Stop;
use warden_sim::env::services::NetFault;
use warden_sim::env::world::{CrashAt, Instance, World};

const STRIPE_KEY: &str = "sk_test_SECRETVALUE_4242";
/// A token with the characters JSON encoders escape: `/` (PHP), `<`, `>`, `&` (Go).
const ECHO_TOKEN: &str = "tok/ECHO<SECRET>&9/9";

const MANIFEST: &str = r#"{
  "server": { "name": "defects", "journals": "journals", "notify": ["/usr/local/bin/notify-operator"] },
  "tools": [
    { "name": "refund_order", "program": "refund.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "deadline": "10s",
      "grants": { "pay": { "cap": "payments.stripe.refund", "each": { "amount": "50.00", "currency": "USD" }, "uses": 1,
        "needs": { "get": { "cap": "net.http.get", "only": ["https://payments.sim/v1/payment_intents/*"] },
                   "post": { "cap": "net.http.post", "only": ["https://payments.sim/v1/refunds"], "idempotency_key": true },
                   "key": { "env": "STRIPE_SECRET_KEY" } } } },
      "once": { "by": ["order"], "keep": "1d" },
      "quota": { "window": "24h", "calls": 100, "money": { "amount": "500.00", "currency": "USD" } } },
    { "name": "slow_note", "program": "note.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "deadline": "10s",
      "grants": { "notes": { "cap": "net.http.post", "only": ["https://notes.sim/notes"] } } },
    { "name": "echo", "program": "echo.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "web": { "cap": "net.http.get", "only": ["https://echo.sim/echo/*", "https://echo.sim/big/*", "https://echo.sim/deep/*", "https://echo.sim/headers/*"],
                           "headers": { "Authorization": { "env": "ECHO_TOKEN", "prefix": "Bearer " } } } } },
    { "name": "echo_with", "program": "echo_with.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "web": { "cap": "net.http.post", "only": ["https://echo.sim/echo/*"], "idempotency_key": true,
                           "headers": { "X-Api-Key": { "env": "ECHO_TOKEN" } } } } },
    { "name": "big_result", "program": "big.star" },
    { "name": "deep_result", "program": "deep.star" },
    { "name": "sql_read", "program": "sql_read.star",
      "grants": { "db": { "cap": "db.sqlite", "path": "data.db", "mode": "read" } } },
    { "name": "sql_mark", "program": "sql_mark.star",
      "grants": { "db": { "cap": "db.sqlite", "path": "data.db", "mode": "write" } } },
    { "name": "refund_twice", "program": "refund_twice.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "pay": { "cap": "payments.stripe.refund", "max": { "amount": "30.00", "currency": "USD" },
        "needs": { "get": { "cap": "net.http.get", "only": ["https://payments.sim/v1/payment_intents/*"] },
                   "post": { "cap": "net.http.post", "only": ["https://payments.sim/v1/refunds"] },
                   "key": { "env": "STRIPE_SECRET_KEY" } } } } }
  ]
}"#;

const REFUND: &str = r#"
def main(pay, order: str, amount: money) -> dict:
    """Refund part of an order.

    Args:
        order: The payment intent, e.g. "pi_1001".
        amount: How much to refund.
    """
    intent = pay.get("https://payments.sim/v1/payment_intents/" + order)
    if intent["status"] != 200:
        fail("no such order: " + order)
    refund = pay.refund(order, amount)
    if "json" not in refund:
        fail("refund failed: " + str(refund.get("error")))
    return {"refund": refund["json"]["id"], "amount": amount.amount}
"#;

const NOTE: &str = r#"
def main(notes, text: str, times: int = 1) -> list:
    """Save a note.

    Args:
        text: The note.
        times: How many times to save it.
    """
    return [notes.post("https://notes.sim/notes", json = {"text": text})["status"] for i in range(times)]
"#;

const ECHO: &str = r#"
def main(web, path: str) -> dict:
    """Fetch from the echo service.

    Args:
        path: The path.
    """
    r = web.get("https://echo.sim" + path)
    return {"status": r.get("status"), "json": r.get("json"), "body": r.get("body"), "error": r.get("error")}
"#;

const ECHO_WITH: &str = r#"
def main(web, name: str, value: str) -> dict:
    """Post with one header of the caller's choice.

    Args:
        name: The header's name.
        value: The header's value.
    """
    r = web.post("https://echo.sim/echo/plain", body = "x", headers = {name: value})
    return {"status": r.get("status")}
"#;

const BIG: &str = r#"
def main(size: int, failing: bool = False) -> str:
    """Return or fail with a large text.

    Args:
        size: How many bytes.
        failing: Fail instead of returning.
    """
    if failing:
        fail("y" * size)
    return "x" * size
"#;

const DEEP: &str = r#"
def main(depth: int) -> list:
    """Return a list nested `depth` deep.

    Args:
        depth: How deep.
    """
    l = []
    for i in range(depth):
        l = [l]
    return l
"#;

const REFUND_TWICE: &str = r#"
def main(pay, order: str, first: money, second: money) -> list:
    """Refund twice, without idempotency keys.

    Args:
        order: The payment intent.
        first: The first refund.
        second: The second refund.
    """
    return [pay.refund(order, first).get("status"), pay.refund(order, second).get("status")]
"#;

const SQL_READ: &str = r#"
def main() -> dict:
    """Read every row."""
    r = db.query("SELECT v FROM t")
    return {"rows": len(r.get("rows") or []), "error": r.get("error")}
"#;

const SQL_MARK: &str = r#"
def main() -> dict:
    """Mark row 1."""
    r = db.execute("UPDATE t SET v = 'marked' WHERE id = 1")
    return {"changes": r.get("changes"), "error": r.get("error")}
"#;

fn world(seed: u64) -> World {
    let world = World::new(seed);
    world.install("manifest.json", MANIFEST.as_bytes());
    for (name, text) in [
        ("refund.star", REFUND),
        ("note.star", NOTE),
        ("echo.star", ECHO),
        ("echo_with.star", ECHO_WITH),
        ("big.star", BIG),
        ("deep.star", DEEP),
        ("refund_twice.star", REFUND_TWICE),
        ("sql_read.star", &SQL_READ.replace("def main()", "def main(db)")),
        ("sql_mark.star", &SQL_MARK.replace("def main()", "def main(db)")),
    ] {
        world.install(name, text.as_bytes());
    }
    let mut variables = world.services.variables.borrow_mut();
    variables.insert("STRIPE_SECRET_KEY".into(), STRIPE_KEY.into());
    variables.insert("ECHO_TOKEN".into(), ECHO_TOKEN.into());
    drop(variables);
    let data = World::path("data.db");
    world.services.sql(&data, "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)");
    world.services.sql(&data, "INSERT INTO t (id, v) VALUES (1, 'fresh')");
    world
}

fn settled_charge(world: &World, run: &str) -> Option<Vec<String>> {
    let state = check::ledger_state(&world.disk, &journals()).unwrap();
    match &state.runs.get(run)?.phase {
        warden::store::ledger::RunPhase::Settled { charged, .. } => {
            Some(charged.iter().map(|m| format!("{} {}", m.amount, m.currency)).collect())
        }
        _ => None,
    }
}

// --- Defect 1: a begun action is resolved before the deadline is looked at. -------------

#[test]
fn a_plain_post_in_doubt_still_waits_for_an_operator_after_the_deadline() {
    let world = world(1);
    let (first, run) = waiting_run(&world);
    drop(first);
    world.clock.advance(60_000);
    let second = world.start("manifest.json");
    assert_eq!(second.run(), Stop::Quiet);
    assert!(second.exited().is_none(), "{:?}", second.exited());
    assert_eq!(check::open_runs(&world.disk, &journals()), vec![run.clone()], "the run still waits");
    let files = warden::base::layout::RunFiles::new(&journals(), "slow_note", &run);
    assert!(world.disk.peek(&files.waiting).is_some(), "the waiting record is kept");
    assert_eq!(world.services.effects_of("note"), 1);
}

#[test]
fn an_idempotent_refund_begun_before_a_crash_is_resent_after_the_deadline_and_charged() {
    let world = world(2);
    world.services.fault_next("/v1/refunds", NetFault::CrashAfterActing);
    let first = world.start("manifest.json");
    first.send(&call(1, "refund_order", json!({"order": "pi_1001", "amount": usd("20")})));
    assert_eq!(first.run(), Stop::Crashed);
    world.crash(first);
    assert_eq!(world.services.refunded_minor(), 2000);
    world.clock.advance(60_000);
    let second = world.start("manifest.json");
    assert_eq!(second.run(), Stop::Quiet);
    assert!(second.exited().is_none(), "{:?}", second.exited());
    let state = check::ledger_state(&world.disk, &journals()).unwrap();
    let run = state.runs.keys().next().unwrap().clone();
    assert_eq!(settled_charge(&world, &run), Some(vec!["20.00 USD".to_string()]), "the refund is charged");
    let repeat = ask(&second, &call(2, "refund_order", json!({"order": "pi_1001", "amount": usd("20")})));
    assert_eq!(repeat["isError"], json!(false), "{repeat}");
    assert_eq!(world.services.effects_of("refund"), 1);
}

// --- Defect 2: every money quota has a finite worst case in its currency. ---------------

fn check_manifest(world: &World, manifest: &str) -> Result<String, String> {
    world.install("check.json", manifest.as_bytes());
    world.start_command(|env| {
        Box::pin(async move { warden::commands::check(&env, &World::path("check.json"), false).await })
    })
}

fn refund_tool(grant_limits: &str, quota_money: &str) -> String {
    format!(
        r#"{{ "server": {{ "name": "q", "journals": "journals" }},
  "tools": [ {{ "name": "refund_order", "program": "refund.star", "net": {{ "timeout_ms": 1000, "connect_timeout_ms": 1000 }},
      "grants": {{ "pay": {{ "cap": "payments.stripe.refund", {grant_limits},
        "needs": {{ "get": {{ "cap": "net.http.get", "only": ["https://payments.sim/v1/payment_intents/*"] }},
                   "post": {{ "cap": "net.http.post", "only": ["https://payments.sim/v1/refunds"], "idempotency_key": true }},
                   "key": {{ "env": "STRIPE_SECRET_KEY" }} }} }} }},
      "quota": {{ "window": "24h", "money": {quota_money} }} }} ] }}"#
    )
}

#[test]
fn a_money_quota_without_a_finite_worst_case_is_refused_at_check() {
    let world = world(3);
    let each_only = refund_tool(
        r#""each": { "amount": "50.00", "currency": "USD" }"#,
        r#"{"amount": "100.00", "currency": "USD"}"#,
    );
    let problems = check_manifest(&world, &each_only).unwrap_err();
    assert!(problems.contains("tools[0].quota.money") && problems.contains("tools[0].grants.pay"), "{problems}");
    let other_currency = refund_tool(
        r#""each": { "amount": "50.00", "currency": "USD" }, "uses": 1"#,
        r#"{"amount": "100.00", "currency": "EUR"}"#,
    );
    let problems = check_manifest(&world, &other_currency).unwrap_err();
    assert!(problems.contains("tools[0].quota.money") && problems.contains("EUR"), "{problems}");
    let fine = refund_tool(
        r#""each": { "amount": "50.00", "currency": "USD" }, "uses": 2"#,
        r#"{"amount": "100.00", "currency": "USD"}"#,
    );
    assert!(check_manifest(&world, &fine).is_ok());
}

// --- Defect 3: no secret leaves through a JSON escape. ----------------------------------

/// Every string a reader could decode from `bytes`: JSON lines decoded, and strings that
/// are JSON themselves decoded again.
fn decoded_strings(bytes: &[u8]) -> Vec<String> {
    fn walk(value: &Value, out: &mut Vec<String>, depth: usize) {
        match value {
            Value::String(s) => {
                out.push(s.clone());
                if depth < 4 {
                    if let Ok(inner) = serde_json::from_str::<Value>(s) {
                        walk(&inner, out, depth + 1);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out, depth)),
            Value::Object(map) => map.iter().for_each(|(k, v)| {
                out.push(k.clone());
                walk(v, out, depth)
            }),
            _ => {}
        }
    }
    let mut out = vec![String::from_utf8_lossy(bytes).into_owned()];
    for line in bytes.split(|&b| b == b'\n') {
        if let Ok(value) = serde_json::from_slice::<Value>(line) {
            walk(&value, &mut out, 0);
        }
    }
    // And every JSON escape a reader would undo in text that is not JSON as a whole.
    let unescaped: Vec<String> = out.iter().map(|text| unescape(text)).collect();
    out.extend(unescaped);
    out
}

/// Undoes `\/`, `\\` and `\uXXXX` escapes wherever they appear, twice over.
fn unescape(text: &str) -> String {
    let mut text = text.to_string();
    for _ in 0..2 {
        let mut out = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek()) {
                ('\\', Some('/')) => {
                    chars.next();
                    out.push('/');
                }
                ('\\', Some('\\')) => {
                    chars.next();
                    out.push('\\');
                }
                ('\\', Some('u')) => {
                    let hex: String = chars.clone().skip(1).take(4).collect();
                    match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                        Some(decoded) if hex.len() == 4 => {
                            chars.nth(4);
                            out.push(decoded);
                        }
                        _ => out.push(c),
                    }
                }
                _ => out.push(c),
            }
        }
        text = out;
    }
    text
}

#[test]
fn a_secret_reflected_through_json_escapes_appears_in_no_output() {
    let world = world(4);
    let instance = world.start("manifest.json");
    let mut everything: Vec<u8> = Vec::new();
    for (id, path) in [(1, "/echo/php"), (2, "/echo/go"), (3, "/echo/unicode"), (4, "/echo/plain"), (5, "/echo/xssi")] {
        let answer = ask(&instance, &call(id, "echo", json!({"path": path})));
        everything.extend(answer.to_string().bytes());
        everything.push(b'\n');
    }
    for path in world.disk.files() {
        everything.extend(world.disk.peek(&path).unwrap());
        everything.push(b'\n');
    }
    for line in instance.log() {
        everything.extend(line.as_bytes());
        everything.push(b'\n');
    }
    assert!(world.services.requests.borrow().iter().any(|r| r.headers.iter().any(|(_, v)| v.contains(ECHO_TOKEN))));
    for decoded in decoded_strings(&everything) {
        assert!(!decoded.contains(ECHO_TOKEN), "the secret can be decoded from an output: {decoded:.300}");
    }
}

// --- Defect 4: nothing too large for its reader is written. -----------------------------

fn still_serves_and_restarts(world: &World, instance: Instance) {
    let ok = ask(&instance, &call(90, "big_result", json!({"size": 10})));
    assert_eq!(ok["isError"], json!(false), "{ok}");
    assert!(instance.exited().is_none(), "{:?}", instance.exited());
    drop(instance);
    let again = world.start("manifest.json");
    assert_eq!(again.run(), Stop::Quiet);
    assert!(again.exited().is_none(), "the server starts again: {:?}", again.exited());
    let violations = check::at_rest(&world.disk, &journals());
    assert!(violations.is_empty(), "{violations:?}");
}

#[test]
fn a_response_too_large_for_a_journal_line_fails_the_action_not_the_server() {
    let world = world(5);
    let instance = world.start("manifest.json");
    let answer = ask(&instance, &call(1, "echo", json!({"path": "/big/9000000"})));
    let result = &answer["structuredContent"]["result"];
    assert!(result["error"].as_str().unwrap_or_default().contains("(net.response_bytes_max)"), "{answer:.500}");
    still_serves_and_restarts(&world, instance);
}

#[test]
fn a_result_or_failure_too_large_for_a_journal_line_fails_the_run_not_the_server() {
    let world = world(6);
    let instance = world.start("manifest.json");
    let answer = ask(&instance, &call(1, "big_result", json!({"size": 9_000_000})));
    assert_eq!(answer["isError"], json!(true));
    assert!(text(&answer).contains("over the limit"), "{}", text(&answer));
    let failed = ask(&instance, &call(2, "big_result", json!({"size": 9_000_000, "failing": true})));
    assert_eq!(failed["isError"], json!(true));
    assert!(text(&failed).contains("over the limit"), "{:.300}", text(&failed));
    still_serves_and_restarts(&world, instance);
}

// --- Defect 6: manifest numbers are range-checked, never overflow. ----------------------

#[test]
fn huge_manifest_numbers_are_refused_at_check_with_their_path() {
    let world = world(7);
    for (limits, path) in [
        (r#""each": { "amount": "50.00", "currency": "USD" }, "uses": 9223372036854775808"#, "grants.pay.uses"),
        (r#""each": { "amount": "5000000000.00", "currency": "USD" }, "uses": 1000000"#, "grants.pay.uses"),
    ] {
        let manifest = refund_tool(limits, r#"{"amount": "100.00", "currency": "USD"}"#);
        let problems = check_manifest(&world, &manifest).unwrap_err();
        assert!(problems.contains(path), "{problems}");
    }
    // Without `uses` or a quota, a run's most actions bound the worst case, which must stay exact.
    let unbounded = refund_tool(r#""each": { "amount": "5000000000000.00", "currency": "USD" }"#, "null")
        .replace(r#", "money": null"#, r#", "calls": 10"#);
    let problems = check_manifest(&world, &unbounded).unwrap_err();
    assert!(problems.contains("tools[0].grants.pay.uses") && problems.contains("holds exactly"), "{problems}");
    let keep = r#"{ "server": { "name": "k", "journals": "journals", "keep": 213503982336 },
        "tools": [ { "name": "big_result", "program": "big.star" } ] }"#;
    let problems = check_manifest(&world, keep).unwrap_err();
    assert!(problems.contains("server.keep"), "{problems}");
    let timeouts = r#"{ "server": { "name": "k", "journals": "journals" },
        "tools": [ { "name": "echo", "program": "echo.star", "net": { "timeout_ms": 18446744073709551615, "connect_timeout_ms": 1000 },
          "grants": { "web": { "cap": "net.http.get", "only": ["https://echo.sim/echo/*"] } } } ] }"#;
    let problems = check_manifest(&world, timeouts).unwrap_err();
    assert!(problems.contains("tools[0].net.timeout_ms"), "{problems}");
}

// --- Defect 7: a program cannot set the headers the broker owns. ------------------------

#[test]
fn headers_the_broker_sets_cannot_come_from_a_program() {
    let world = world(8);
    let instance = world.start("manifest.json");
    for (id, name) in [
        (1, "Host"),
        (2, "authorization"),
        (3, "Idempotency-Key"),
        (4, "Content-Length"),
        (5, "Transfer-Encoding"),
        (6, "x-api-key"),
    ] {
        let answer = ask(&instance, &call(id, "echo_with", json!({"name": name, "value": "1"})));
        assert_eq!(answer["isError"], json!(true), "{name}: {answer}");
        assert!(text(&answer).contains("header"), "{name}: {}", text(&answer));
    }
    assert!(world.services.requests.borrow().is_empty(), "no refused request was sent");
    let fine = ask(&instance, &call(7, "echo_with", json!({"name": "x-trace", "value": "1"})));
    assert_eq!(fine["isError"], json!(false), "{fine}");
}

// --- Defect 8: a refund in the intent's currency is checked against the grant's. --------

#[test]
fn a_refund_of_an_intent_in_another_currency_is_refused_before_sending() {
    let world = world(9);
    let instance = world.start("manifest.json");
    let answer = ask(&instance, &call(1, "refund_order", json!({"order": "pi_2001", "amount": usd("20")})));
    assert_eq!(answer["isError"], json!(true), "{answer}");
    assert!(text(&answer).contains("EUR") || text(&answer).contains("eur"), "{}", text(&answer));
    assert_eq!(world.services.effects_of("refund"), 0);
    assert!(world.services.requests.borrow().iter().all(|r| r.method != "POST"));
}

// --- Defect 9: `warden mcp status` names the action in doubt. ---------------------------

#[test]
fn status_names_the_action_waiting_for_an_operator() {
    let world = world(10);
    world.services.fault_next("notes.sim", NetFault::LoseResponse);
    let instance = world.start("manifest.json");
    let stopped = ask(&instance, &call(1, "slow_note", json!({"text": "hello"})));
    assert_eq!(stopped["_meta"]["dev.warden/run"]["status"], json!("waiting_for_operator"));
    let status = world.start_command(|env| {
        Box::pin(async move { warden::commands::status(&env, &World::path("manifest.json"), false).await })
    });
    let status = status.unwrap();
    assert!(status.contains("--op 0 ") && !status.contains("--op N"), "{status}");
}

// --- Defect 10: the code review's findings. --------------------------------------------

/// A plain POST whose answer was lost: its run waits for an operator.
fn waiting_run(world: &World) -> (Instance, String) {
    world.services.fault_next("notes.sim", NetFault::LoseResponse);
    let instance = world.start("manifest.json");
    let stopped = ask(&instance, &call(1, "slow_note", json!({"text": "hello"})));
    assert_eq!(stopped["_meta"]["dev.warden/run"]["status"], json!("waiting_for_operator"), "{stopped}");
    let run = stopped["_meta"]["dev.warden/run"]["run"].as_str().unwrap().to_string();
    (instance, run)
}

/// Sends `message` to a fresh instance that crashes at the `nth` `point`, and crashes it.
fn crash_during(world: &World, point: Point, nth: u32, message: &Value) {
    world.probes.crash_at.set(Some(CrashAt { point, nth }));
    let instance = world.start("manifest.json");
    instance.send(message);
    assert_eq!(instance.run(), Stop::Crashed, "{:?}", instance.log());
    world.crash(instance);
    world.probes.crash_at.set(None);
}

fn resolve(world: &World, run: &str, tool: &str, happened: Option<&'static str>) -> Result<String, String> {
    let journal = warden::base::layout::RunFiles::new(&journals(), tool, run).journal;
    world.start_command(move |env| {
        Box::pin(async move { warden::commands::resolve(&env, &journal, 0, happened, None).await })
    })
}

/// Beside a live server, `warden resolve` hands the word to it (its admin channel), which
/// checks it as a stopped server's resolve would, journals it and resumes the run at once.
#[test]
fn resolve_beside_a_live_server_goes_through_it_and_refuses_a_run_not_waiting() {
    let world = world(11);
    let (instance, run) = waiting_run(&world);
    let wrong_shape = resolve(&world, &run, "slow_note", Some(r#"{"note": "seen"}"#)).unwrap_err();
    assert!(wrong_shape.contains("for example"), "{wrong_shape}");
    let said = resolve(&world, &run, "slow_note", Some(r#"{"status": 201}"#)).unwrap();
    assert!(said.contains("the server resumes the run now"), "{said}");
    assert_eq!(instance.run(), Stop::Quiet);
    assert!(check::open_runs(&world.disk, &journals()).is_empty(), "{:?}", instance.log());
    assert_eq!(world.services.effects_of("note"), 1, "the note the service saw was not sent again");
    let again = resolve(&world, &run, "slow_note", None).unwrap_err();
    assert!(again.contains("has ended"), "{again}");
    drop(instance);

    // A begun action whose run was never stopped (a crash right after the begin record):
    // the next start decides it, not the operator.
    // The count runs across instances: the first run's action was the first.
    crash_during(&world, Point::ActionBegun, 2, &call(2, "slow_note", json!({"text": "again"})));
    let open = check::open_runs(&world.disk, &journals());
    let other = open.iter().find(|r| **r != run).expect("a second open run").clone();
    let refused = resolve(&world, &other, "slow_note", None).unwrap_err();
    assert!(refused.contains("not waiting for an operator"), "{refused}");
}

/// A stopped run whose kept arguments vanished before the operator's word (damage while the
/// server runs) is not resumed without them (a mutant cargo-mutants found missed resumed it
/// with none).
#[test]
fn a_stopped_run_whose_kept_arguments_vanished_is_not_resumed_without_them() {
    let world = world(12);
    let (instance, run) = waiting_run(&world);
    world.disk.delete(&warden::base::layout::RunFiles::new(&journals(), "slow_note", &run).inputs);
    let answered = resolve(&world, &run, "slow_note", None);
    instance.run();
    let said = format!("{answered:?} {:?} {:?}", instance.exited(), instance.log());
    assert!(said.contains("its kept arguments vanished"), "{said}");
}

/// Sends one raw line to the live server's admin channel, as a process of the operator's
/// account could: what it answered.
fn admin_line(world: &World, line: String) -> String {
    let socket = journals().join("server.admin");
    world
        .start_command(move |env| {
            Box::pin(async move {
                let answer = env.admin.ask(&socket, line.into_bytes(), 30_000).await.map_err(|e| e.to_string())?;
                Ok(String::from_utf8_lossy(&answer).into_owned())
            })
        })
        .unwrap()
}

/// Found by attacking the admin channel: a request its client gave up on (taken from the
/// backlog after the deadline), a request naming another tool's folder, and a request with
/// no verdict at all are refused, and the run still waits.
#[test]
fn the_admin_channel_refuses_stale_misdirected_and_verdictless_requests() {
    let world = world(16);
    let (instance, run) = waiting_run(&world);
    // The wall clock is past 2020 in every world: 0 is long gone, u64::MAX never comes.
    let stale = json!({"command": "resolve", "run": run, "tool": "slow_note", "op": 0, "verdict": "did_not_happen",
                       "deadline_at_ms": 0});
    assert!(admin_line(&world, stale.to_string()).contains("after its client gave up"));
    let elsewhere = json!({"command": "resolve", "run": run, "tool": "echo", "op": 0, "verdict": "did_not_happen",
                           "deadline_at_ms": u64::MAX});
    let misdirected = admin_line(&world, elsewhere.to_string());
    assert!(misdirected.contains("is a run of `slow_note`, not of `echo`"), "{misdirected}");
    let no_verdict =
        json!({"command": "resolve", "run": run, "tool": "slow_note", "op": 0, "deadline_at_ms": u64::MAX});
    assert!(admin_line(&world, no_verdict.to_string()).contains("missing field `verdict`"));
    assert_eq!(instance.run(), Stop::Quiet);
    let waiting = warden::base::layout::RunFiles::new(&journals(), "slow_note", &run).waiting;
    assert!(world.disk.peek(&waiting).is_some(), "the run still waits for an operator");
    assert_eq!(world.services.effects_of("note"), 1, "nothing was sent again");
    // Named in another tool's folder, `warden resolve` is refused before it asks the server.
    let elsewhere = warden::base::layout::RunFiles::new(&journals(), "echo", &run).journal;
    let refused = world.start_command(move |env| {
        Box::pin(async move { warden::commands::resolve(&env, &elsewhere, 0, None, None).await })
    });
    assert!(refused.unwrap_err().contains("is a run of `slow_note`"));
}

#[test]
fn an_io_error_on_exists_stops_recovery_instead_of_meaning_absent() {
    let world = world(12);
    let (instance, run) = waiting_run(&world);
    drop(instance);
    *world.disk.fail_exists_containing.borrow_mut() = Some(format!("{run}.journal"));
    let second = world.start("manifest.json");
    assert_eq!(second.run(), Stop::Quiet);
    let exited = second.exited().expect("recovery stops the server");
    assert!(exited.as_ref().unwrap_err().contains("simulated I/O error"), "{exited:?}");
    *world.disk.fail_exists_containing.borrow_mut() = None;
    let files = warden::base::layout::RunFiles::new(&journals(), "slow_note", &run);
    assert!(world.disk.peek(&files.journal).is_some(), "the journal was not deleted");
    assert_eq!(check::open_runs(&world.disk, &journals()), vec![run]);
}

#[test]
fn a_secret_gone_at_the_point_of_use_fails_the_action_loudly() {
    let world = world(13);
    let instance = world.start("manifest.json");
    assert_eq!(instance.run(), Stop::Quiet, "started with the secret set");
    world.services.variables.borrow_mut().remove("ECHO_TOKEN");
    let answer = ask(&instance, &call(1, "echo", json!({"path": "/echo/plain"})));
    let error = answer["structuredContent"]["result"]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("ECHO_TOKEN"), "{answer}");
    assert!(world.services.requests.borrow().is_empty(), "nothing was sent with an empty secret");
}

#[test]
fn a_wall_clock_step_forward_does_not_expire_a_running_run() {
    let world = world(14);
    let instance = world.start("manifest.json");
    // The clock jumps an hour forward while the first note is in flight.
    world.services.step_wall_on_next_request.set(3_600_000);
    let answer = ask(&instance, &call(1, "slow_note", json!({"text": "hi", "times": 2})));
    assert_eq!(answer["isError"], json!(false), "{answer}");
    assert_eq!(world.services.effects_of("note"), 2);
}

// --- Defect 5, the last part: a run that crashed the server twice is not resumed again. --

#[test]
fn a_run_that_crashed_the_server_twice_waits_for_an_operator_instead_of_a_third_resume() {
    let world = world(15);
    // The first attempt dies right after its read was begun...
    crash_during(&world, Point::ActionBegun, 1, &call(1, "echo", json!({"path": "/echo/plain"})));
    // ...and the second, resumed at start, dies before getting any further.
    world.probes.crash_at.set(Some(CrashAt { point: Point::Resumed, nth: 1 }));
    let second = world.start("manifest.json");
    assert_eq!(second.run(), Stop::Crashed);
    world.crash(second);
    world.probes.crash_at.set(None);
    let requests = world.services.requests.borrow().len();
    let third = world.start("manifest.json");
    assert_eq!(third.run(), Stop::Quiet);
    assert!(third.exited().is_none(), "the server serves: {:?}", third.exited());
    let run = check::open_runs(&world.disk, &journals()).pop().expect("the run is kept open");
    assert_eq!(world.services.requests.borrow().len(), requests, "the halted run was not resumed");
    let status = world
        .start_command(|env| {
            Box::pin(async move { warden::commands::status(&env, &World::path("manifest.json"), false).await })
        })
        .unwrap();
    assert!(status.contains(&run) && status.contains("--resume") && status.contains("not resumed again"), "{status}");
    let journal = warden::base::layout::RunFiles::new(&journals(), "echo", &run).journal;
    let resume = |journal: std::path::PathBuf| {
        world.start_command(move |env| Box::pin(async move { warden::commands::resume_halted(&env, &journal).await }))
    };
    // Beside the live server, its admin channel takes the word and resumes the run at once.
    assert!(resume(journal.clone()).unwrap().contains("the server resumes the run now"));
    assert_eq!(third.run(), Stop::Quiet);
    assert!(check::open_runs(&world.disk, &journals()).is_empty(), "{:?}", third.log());
    assert!(world.services.requests.borrow().len() > requests, "the resumed run sent its read again");
    drop(third);
    let violations = check::at_rest(&world.disk, &journals());
    assert!(violations.is_empty(), "{violations:?}");
}

// --- Found by an adversarial review of the fixes above. --------------------------------

#[test]
fn deeply_nested_responses_and_results_never_make_a_journal_unreadable() {
    // Nesting 128 levels deep takes more stack than a test thread has in a debug build (the
    // server's main thread and its workers have 8 MiB).
    let big_stack = std::thread::Builder::new().stack_size(64 * 1024 * 1024);
    big_stack.spawn(deeply_nested).unwrap().join().unwrap();
}

fn deeply_nested() {
    let world = world(16);
    let instance = world.start("manifest.json");
    for (id, depth) in [(1, 60), (2, 126), (3, 127), (4, 500)] {
        let answer = ask(&instance, &call(id, "echo", json!({"path": format!("/deep/{depth}")})));
        assert!(answer.get("content").is_some(), "{answer:.300}");
    }
    for (id, depth) in [(10, 60), (11, 125), (12, 127), (13, 200)] {
        let answer = ask(&instance, &call(id, "deep_result", json!({"depth": depth})));
        assert!(answer.get("content").is_some(), "{answer:.300}");
    }
    still_serves_and_restarts(&world, instance);
}

#[test]
fn an_operator_resolution_of_null_does_not_make_the_journal_unreadable() {
    let world = world(17);
    let (instance, run) = waiting_run(&world);
    drop(instance);
    // Issue 23 item 13: a result not in the action's shape is refused, saying the shape;
    // the journal is left as it was, and the shaped result is taken.
    let refused = resolve(&world, &run, "slow_note", Some("null"));
    assert!(refused.as_ref().is_err_and(|problem| problem.contains("for example")), "{refused:?}");
    assert!(resolve(&world, &run, "slow_note", Some(r#"{"status": 201}"#)).is_ok());
    let again = world.start("manifest.json");
    assert_eq!(again.run(), Stop::Quiet);
    assert!(again.exited().is_none(), "the server starts: {:?}", again.exited());
    assert!(check::open_runs(&world.disk, &journals()).is_empty());
}

#[test]
fn a_resent_refund_that_fails_before_it_is_sent_waits_instead_of_claiming_nothing_was_refunded() {
    let world = world(18);
    world.services.fault_next("/v1/refunds", NetFault::CrashAfterActing);
    let first = world.start("manifest.json");
    first.send(&call(1, "refund_order", json!({"order": "pi_1001", "amount": usd("20")})));
    assert_eq!(first.run(), Stop::Crashed);
    world.crash(first);
    assert_eq!(world.services.refunded_minor(), 2000);
    // On the resend, reading the intent (to check its currency) fails.
    world.services.fault_next("payment_intents", NetFault::Refuse);
    let second = world.start("manifest.json");
    assert_eq!(second.run(), Stop::Quiet);
    let state = check::ledger_state(&world.disk, &journals()).unwrap();
    let run = state.runs.keys().next().unwrap().clone();
    match settled_charge(&world, &run) {
        None => assert_eq!(check::open_runs(&world.disk, &journals()), vec![run], "it waits for an operator"),
        Some(charged) => assert_eq!(charged, vec!["20.00 USD".to_string()], "or it is charged"),
    }
    assert_eq!(world.services.effects_of("refund"), 1);
}

#[test]
fn a_refund_resolved_as_happened_with_the_services_own_record_is_charged() {
    let world = world(19);
    world.services.fault_next("/v1/refunds", NetFault::LoseResponse);
    let instance = world.start("manifest.json");
    let stopped =
        ask(&instance, &call(1, "refund_twice", json!({"order": "pi_1002", "first": usd("20"), "second": usd("20")})));
    assert_eq!(stopped["_meta"]["dev.warden/run"]["status"], json!("waiting_for_operator"), "{stopped}");
    let run = stopped["_meta"]["dev.warden/run"]["run"].as_str().unwrap().to_string();
    drop(instance);
    // The operator pastes the payment service's own refund object, as the runbook says: as
    // the response's `json` (the bare object is refused, naming the shape).
    let stripe = r#"{"id": "re_0", "object": "refund", "amount": 2000, "currency": "usd", "status": "succeeded"}"#;
    let journal = warden::base::layout::RunFiles::new(&journals(), "refund_twice", &run).journal;
    let resolve_with = |result: String| {
        let journal = journal.clone();
        world.start_command(move |env| {
            Box::pin(async move { warden::commands::resolve(&env, &journal, 0, Some(&result), None).await })
        })
    };
    let bare = resolve_with(stripe.to_string());
    assert!(bare.as_ref().is_err_and(|problem| problem.contains("`id` is not a field")), "{bare:?}");
    let resolved = resolve_with(format!(r#"{{"status": 200, "json": {stripe}}}"#));
    assert!(resolved.is_ok(), "{resolved:?}");
    let again = world.start("manifest.json");
    assert_eq!(again.run(), Stop::Quiet);
    assert_eq!(world.services.effects_of("refund"), 1, "a second 20.00 would pass max 30.00 with the first charged");
    assert_eq!(settled_charge(&world, &run), Some(vec!["20.00 USD".to_string()]));
}

#[test]
fn a_payment_intent_id_has_a_length_limit() {
    let world = world(20);
    let instance = world.start("manifest.json");
    let long = format!("pi_{}", "9".repeat(100_000));
    let arguments = json!({"order": long, "first": usd("1"), "second": usd("1")});
    let answer = ask(&instance, &call(1, "refund_twice", arguments));
    assert_eq!(answer["isError"], json!(true));
    assert!(text(&answer).contains("is not a payment intent id"), "{:.300}", text(&answer));
    assert!(world.services.requests.borrow().is_empty(), "nothing was sent");
    still_serves_and_restarts(&world, instance);
}

#[test]
fn run_status_answers_within_the_result_limit() {
    let world = world(21);
    let instance = world.start("manifest.json");
    // Too large to answer (over 1 MiB), small enough to journal.
    let done = ask(&instance, &call(1, "big_result", json!({"size": 3_000_000})));
    assert!(text(&done).contains("it is kept in the run's journal"), "{:.300}", text(&done));
    let state = check::ledger_state(&world.disk, &journals()).unwrap();
    let run = state.runs.keys().next().unwrap().clone();
    let status = ask(
        &instance,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "warden_run_status", "arguments": {"run": run},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}),
    );
    let size = serde_json::to_vec(&status).unwrap().len();
    assert!(size <= warden::limits::RESULT_BYTES_MAX + 1024, "{size} bytes");
}

#[test]
fn the_deadline_is_checked_again_when_an_action_would_begin() {
    let world = world(22);
    // Each execution of the program takes 6 s: the second note would begin at 12 s, past the
    // tool's 10 s deadline, though its execution started at 6 s, within it.
    world.sandbox.execution_ms.set(6_000);
    let instance = world.start("manifest.json");
    let answer = ask(&instance, &call(1, "slow_note", json!({"text": "late", "times": 2})));
    assert!(text(&answer).starts_with("deadline: the tool's deadline (10s) passed before action 1"), "{answer}");
    assert_eq!(world.services.effects_of("note"), 1);
}

#[test]
fn a_worker_that_cannot_start_stops_the_server_and_the_run_resumes_later() {
    let world = world(23);
    let first = world.start("manifest.json");
    assert_eq!(first.run(), Stop::Quiet);
    world.sandbox.unavailable.set(true);
    first.send(&call(1, "slow_note", json!({"text": "later"})));
    assert_eq!(first.run(), Stop::Quiet);
    let exited = first.exited().expect("the server stops");
    assert!(exited.as_ref().unwrap_err().contains("no worker could run the program"), "{exited:?}");
    assert_eq!(check::open_runs(&world.disk, &journals()).len(), 1, "the run is not ended for it");
    drop(first);
    world.sandbox.unavailable.set(false);
    let second = world.start("manifest.json");
    assert_eq!(second.run(), Stop::Quiet);
    assert!(check::open_runs(&world.disk, &journals()).is_empty(), "{:?}", second.log());
    assert_eq!(world.services.effects_of("note"), 1);
}

// --- Every input has a named limit where it enters. ---------------------------------------

#[test]
fn a_statement_returning_too_many_bytes_of_rows_fails_instead_of_holding_them() {
    let world = world(24);
    let data = World::path("data.db");
    world.services.sql(&data, &format!("INSERT INTO t (v) SELECT '{}' FROM (SELECT 1 UNION SELECT 2)", "x".repeat(10)));
    for _ in 0..10 {
        world.services.sql(&data, &format!("INSERT INTO t (v) SELECT v || '{}' FROM t", "y".repeat(1000)));
    }
    let instance = world.start("manifest.json");
    let answer = ask(&instance, &call(1, "sql_read", json!({})));
    let error = answer["structuredContent"]["result"]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("the statement's rows are over the limit"), "{answer:.300}");
}

#[test]
fn response_headers_have_a_limit() {
    let world = world(25);
    let instance = world.start("manifest.json");
    let answer = ask(&instance, &call(1, "echo", json!({"path": "/headers/100000"})));
    let error = answer["structuredContent"]["result"]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("headers are over the limit"), "{answer:.300}");
    still_serves_and_restarts(&world, instance);
}

#[test]
fn an_operators_resolution_has_a_size_limit() {
    let world = world(26);
    let (instance, run) = waiting_run(&world);
    drop(instance);
    let huge: &'static str = Box::leak(format!("\"{}\"", "z".repeat(2 * 1024 * 1024)).into_boxed_str());
    let refused = resolve(&world, &run, "slow_note", Some(huge)).unwrap_err();
    assert!(refused.contains("over the limit"), "{refused:.200}");
}

#[test]
fn sql_parameters_that_do_not_parse_fail_the_action_instead_of_running_it_without_them() {
    let world = world(27);
    crash_during(&world, Point::ActionBegun, 1, &call(1, "sql_mark", json!({})));
    // The begin record is damaged so that its parameters are not JSON (its checksum is
    // rewritten: only what a reader cannot check is wrong).
    let run = check::open_runs(&world.disk, &journals()).pop().unwrap();
    let path = warden::base::layout::RunFiles::new(&journals(), "sql_mark", &run).journal;
    let parsed = warden::store::record::parse_file::<JournalRecord>(&world.disk.peek(&path).unwrap()).unwrap();
    let mut bytes = Vec::new();
    for mut record in parsed.records {
        if let JournalRecord::Begin { action, .. } = &mut record {
            action["body"] = json!("not json");
        }
        bytes.extend(warden::store::record::encode(&record));
    }
    world.disk.corrupt(&path, bytes);
    let second = world.start("manifest.json");
    assert_eq!(second.run(), Stop::Quiet);
    let rows = world.services.sql(&World::path("data.db"), "SELECT v FROM t WHERE id = 1");
    assert_eq!(rows[0]["v"], json!("fresh"), "the statement did not run without its parameters");
}
