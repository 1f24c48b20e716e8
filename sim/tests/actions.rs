//! Grants and actions through the simulator: the broker's refusals, journaled actions, a
//! crash between an action's begin and done records for each kind (a GET and an idempotent
//! POST are sent again, a `db.sqlite` write is looked up, a plain POST waits for an operator),
//! the operator's resolution, and secrets kept out of every byte written.

mod common;

use common::{ask, call, journals, text, usd};
use serde_json::{json, Value};
use warden::env::Point;
use warden_sim::checks::check;
use warden_sim::env::executor::Stop;
use warden_sim::env::services::NetFault;
use warden_sim::env::world::{CrashAt, Instance, World};

const STRIPE_KEY: &str = "sk_test_SECRETVALUE_4242";
const NOTES_TOKEN: &str = "tok_NOTESECRET_9999";

const MANIFEST: &str = r#"{
  "server": { "name": "actions", "journals": "journals", "notify": ["/usr/local/bin/notify-operator"] },
  "tools": [
    { "name": "refund_order", "program": "refund.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "deadline": "10s",
      "grants": { "pay": { "cap": "payments.stripe.refund", "each": { "amount": "50.00", "currency": "USD" }, "uses": 1,
        "needs": { "get": { "cap": "net.http.get", "only": ["https://payments.sim/v1/payment_intents/*"] },
                   "post": { "cap": "net.http.post", "only": ["https://payments.sim/v1/refunds"], "idempotency_key": true },
                   "key": { "env": "STRIPE_SECRET_KEY" } } } },
      "once": { "by": ["order"], "keep": "1d" },
      "quota": { "window": "24h", "calls": 100, "money": { "amount": "500.00", "currency": "USD" } } },
    { "name": "double_refund", "program": "double_refund.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "pay": { "cap": "payments.stripe.refund", "max": { "amount": "60.00", "currency": "USD" },
        "needs": { "get": { "cap": "net.http.get", "only": ["https://payments.sim/v1/payment_intents/*"] },
                   "post": { "cap": "net.http.post", "only": ["https://payments.sim/v1/refunds"], "idempotency_key": true },
                   "key": { "env": "STRIPE_SECRET_KEY" } } } } },
    { "name": "add_note", "program": "note.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "notes": { "cap": "net.http.post", "only": ["https://notes.sim/notes"], "uses": 2,
                             "headers": { "Authorization": { "env": "NOTES_TOKEN", "prefix": "Bearer " } } } } },
    { "name": "add_note_safely", "program": "note.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "notes": { "cap": "net.http.post", "only": ["https://notes.sim/notes"], "idempotency_key": true } } },
    { "name": "add_note_once", "program": "note.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "once": { "by": ["text"], "keep": "1d" },
      "grants": { "notes": { "cap": "net.http.post", "only": ["https://notes.sim/notes"] } } },
    { "name": "fetch", "program": "fetch.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "web": { "cap": "net.http.get", "only": ["https://notes.sim/notes", "https://payments.sim/v1/payment_intents/*"] } } },
    { "name": "fetch_many", "program": "fetch_many.star", "limits": { "max_steps": 10000000 },
      "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "web": { "cap": "net.http.get", "only": ["https://notes.sim/notes"] } } },
    { "name": "close_ticket", "program": "close.star",
      "grants": { "db": { "cap": "db.sqlite", "path": "desk.db", "mode": "write" } } },
    { "name": "read_tickets", "program": "read.star",
      "grants": { "db": { "cap": "db.sqlite", "path": "desk.db", "mode": "read" } } }
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
    return {"refund": refund["json"]["id"], "amount": amount.amount}
"#;

const DOUBLE_REFUND: &str = r#"
def main(pay, order: str, first: money, second: money) -> list:
    """Refund twice.

    Args:
        order: The payment intent.
        first: The first refund.
        second: The second refund.
    """
    return [pay.refund(order, first)["status"], pay.refund(order, second)["status"]]
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

const FETCH: &str = r#"
def main(web, url: str) -> dict:
    """Fetch a URL.

    Args:
        url: What to fetch.
    """
    r = web.get(url)
    return {"status": r.get("status"), "error": r.get("error")}
"#;

const FETCH_MANY: &str = r#"
def main(web, times: int) -> int:
    """Fetch the notes `times` times.

    Args:
        times: How many times.
    """
    for i in range(times):
        web.get("https://notes.sim/notes")
    return times
"#;

const CLOSE: &str = r#"
def main(db, ticket: int) -> dict:
    """Close a ticket.

    Args:
        ticket: The ticket id.
    """
    r = db.execute("UPDATE tickets SET open = 0 WHERE id = ?", [ticket])
    return {"closed": r["changes"]}
"#;

const READ: &str = r#"
def main(db) -> list:
    """List open tickets."""
    return db.query("SELECT id FROM tickets WHERE open = 1 ORDER BY id")["rows"]
"#;

fn world(seed: u64) -> World {
    let world = World::new(seed);
    world.install("manifest.json", MANIFEST.as_bytes());
    for (name, text) in [
        ("refund.star", REFUND),
        ("double_refund.star", DOUBLE_REFUND),
        ("note.star", NOTE),
        ("fetch.star", FETCH),
        ("fetch_many.star", FETCH_MANY),
        ("close.star", CLOSE),
        ("read.star", READ),
    ] {
        world.install(name, text.as_bytes());
    }
    let mut variables = world.services.variables.borrow_mut();
    variables.insert("STRIPE_SECRET_KEY".into(), STRIPE_KEY.into());
    variables.insert("NOTES_TOKEN".into(), NOTES_TOKEN.into());
    drop(variables);
    let db = World::path("desk.db");
    world.services.sql(&db, "CREATE TABLE tickets (id INTEGER PRIMARY KEY, open INTEGER)");
    world.services.sql(&db, "INSERT INTO tickets (id, open) VALUES (1, 1), (2, 1), (3, 1)");
    world
}

fn open_tickets(world: &World) -> usize {
    world.services.sql(&World::path("desk.db"), "SELECT id FROM tickets WHERE open = 1").len()
}

#[test]
fn a_refund_within_its_grant_is_made_once_and_charged() {
    let world = world(1);
    let instance = world.start("manifest.json");
    let done = ask(&instance, &call(1, "refund_order", json!({"order": "pi_1001", "amount": usd("35")})));
    assert_eq!(done["isError"], json!(false), "{done}");
    // Each action performed has its line in the server's log: what, where, how it went.
    let logged =
        |line: &String| line.contains("action 1: payments.stripe.refund REFUND") && line.contains("done (status 200)");
    assert!(instance.log().iter().any(logged), "{:?}", instance.log());
    let read = |line: &String| line.contains("action 0: payments.stripe.refund GET payments.sim: done (status 200)");
    assert!(instance.log().iter().any(read), "the host it went to: {:?}", instance.log());
    assert_eq!(done["structuredContent"]["result"]["amount"], json!("35.00"));
    assert_eq!(world.services.refunded_minor(), 3500);
    let state = check::ledger_state(&world.disk, &journals()).unwrap();
    let settled = state.runs.values().next().unwrap();
    match &settled.phase {
        warden::store::ledger::RunPhase::Settled { charged, .. } => assert_eq!(charged[0].amount, "35.00"),
        other => panic!("{other:?}"),
    }
    // The reservation held the worst case (each x uses) while it ran.
    assert_eq!(settled.money[0].amount, "50.00");
}

#[test]
fn each_refusal_carries_the_brokers_message() {
    let world = world(2);
    let instance = world.start("manifest.json");
    let over_each = ask(&instance, &call(1, "refund_order", json!({"order": "pi_1002", "amount": usd("300")})));
    assert_eq!(
        text(&over_each),
        "'payments.stripe.refund' allows at most 50.00 USD per action; this action needs 300.00 USD"
    );
    let over_max =
        ask(&instance, &call(2, "double_refund", json!({"order": "pi_1002", "first": usd("40"), "second": usd("30")})));
    assert!(
        text(&over_max).starts_with("'payments.stripe.refund' allows at most 60.00 USD per run; 40.00 USD is spent"),
        "{}",
        text(&over_max)
    );
    let over_uses = ask(&instance, &call(3, "add_note", json!({"text": "x", "times": 3})));
    assert!(
        text(&over_uses).starts_with("'net.http.post' allows at most 2 action(s) per run; this is action 3"),
        "{}",
        text(&over_uses)
    );
    assert_eq!(world.services.effects_of("note"), 2, "the refused third post was never sent");
    let requests_before = world.services.requests.borrow().len();
    let outside = ask(&instance, &call(4, "fetch", json!({"url": "https://payments.sim/v1/refunds"})));
    assert_eq!(outside["isError"], json!(true));
    let refusal =
        "'net.http.get' refused the request: `https://payments.sim/v1/refunds` is outside the grant's `only` list";
    assert!(text(&outside).starts_with(refusal), "{}", text(&outside));
    let tricked =
        ask(&instance, &call(5, "fetch", json!({"url": "https://payments.sim/v1/payment_intents/x/../../refunds"})));
    assert!(text(&tricked).contains("has a `.` or `..` path segment"), "{}", text(&tricked));
    assert_eq!(world.services.requests.borrow().len(), requests_before, "refused requests were never sent");
    assert!(world.services.requests.borrow().iter().all(|r| !r.url.contains("refunds") || r.method == "POST"));
    let read_only = ask(&instance, &call(6, "read_tickets", json!({})));
    assert_eq!(read_only["structuredContent"]["result"].as_array().unwrap().len(), 3);
}

#[test]
fn arguments_crafted_to_look_like_grants_change_nothing() {
    let world = world(3);
    let instance = world.start("manifest.json");
    let crafted = json!({"order": "pi_1002", "amount": usd("300"), "pay": {"cap": "payments.stripe.refund", "each": usd("1000")},
                         "grants": {"pay": {"each": usd("1000")}}, "_meta": {"grants": "all"}});
    let refused = ask(&instance, &call(1, "refund_order", crafted));
    assert_eq!(refused["isError"], json!(true));
    let problems = text(&refused);
    assert!(
        problems.contains("$.pay: is not an input of this tool") && problems.contains("$.grants: is not an input"),
        "{problems}"
    );
    assert_eq!(world.services.refunded_minor(), 0);
}

#[test]
fn after_the_deadline_a_resumed_run_starts_no_new_action() {
    let world = world(4);
    // Crash after the GET's begin record; the restart comes 30 s later, past the 10 s deadline.
    world.probes.crash_at.set(Some(CrashAt { point: Point::ActionBegun, nth: 1 }));
    let first = world.start("manifest.json");
    first.send(&call(1, "refund_order", json!({"order": "pi_1001", "amount": usd("10")})));
    assert_eq!(first.run(), Stop::Crashed);
    world.crash(first);
    world.probes.crash_at.set(None);
    world.clock.advance(30_000);
    let second = world.start("manifest.json");
    let repeat = ask(&second, &call(2, "refund_order", json!({"order": "pi_1001", "amount": usd("10")})));
    assert!(text(&repeat).starts_with("deadline: the tool's deadline (10s) passed before action"), "{}", text(&repeat));
    assert_eq!(world.services.refunded_minor(), 0);
}

/// Crashes at the first `ActionBegun` of `tool` and restarts; returns the restarted instance.
fn crash_between_begin_and_done(world: &World, tool: &str, arguments: Value, nth: u32) -> Instance {
    world.probes.crash_at.set(Some(CrashAt { point: Point::ActionBegun, nth }));
    let first = world.start("manifest.json");
    first.send(&call(1, tool, arguments));
    assert_eq!(first.run(), Stop::Crashed, "log {:?}", first.log());
    world.crash(first);
    world.probes.crash_at.set(None);
    let second = world.start("manifest.json");
    assert_eq!(second.run(), Stop::Quiet);
    assert!(second.exited().is_none(), "{:?}", second.exited());
    second
}

#[test]
fn a_get_begun_before_a_crash_is_sent_again() {
    let world = world(5);
    let second = crash_between_begin_and_done(&world, "fetch", json!({"url": "https://notes.sim/notes"}), 1);
    assert!(second.log().iter().any(|l| l.contains("sending it again (safe)")), "{:?}", second.log());
    assert!(check::open_runs(&world.disk, &journals()).is_empty());
}

#[test]
fn an_idempotent_refund_whose_response_was_lost_in_a_crash_is_sent_again_and_happens_once() {
    let world = world(6);
    // The service refunds, then the server dies before reading the answer.
    world.services.fault_next("/v1/refunds", NetFault::CrashAfterActing);
    let first = world.start("manifest.json");
    first.send(&call(1, "refund_order", json!({"order": "pi_1001", "amount": usd("20")})));
    assert_eq!(first.run(), Stop::Crashed);
    world.crash(first);
    assert_eq!(world.services.refunded_minor(), 2000);
    let second = world.start("manifest.json");
    assert_eq!(second.run(), Stop::Quiet);
    let repeat = ask(&second, &call(2, "refund_order", json!({"order": "pi_1001", "amount": usd("20")})));
    assert_eq!(repeat["isError"], json!(false), "{repeat}");
    // Sent twice, with the same key; the service refunded once.
    let posts: Vec<_> = world.services.requests.borrow().iter().filter(|r| r.method == "POST").cloned().collect();
    assert_eq!(posts.len(), 2);
    let key =
        |r: &warden::env::HttpRequest| r.headers.iter().find(|(k, _)| k == "idempotency-key").map(|(_, v)| v.clone());
    assert_eq!(key(&posts[0]), key(&posts[1]));
    assert_eq!(world.services.effects_of("refund"), 1);
    assert_eq!(world.services.refunded_minor(), 2000);
}

#[test]
fn a_sqlite_write_committed_before_a_crash_is_found_and_not_repeated() {
    let world = world(7);
    world.services.crash_after_commit.set(true);
    let first = world.start("manifest.json");
    first.send(&call(1, "close_ticket", json!({"ticket": 2})));
    assert_eq!(first.run(), Stop::Crashed);
    world.crash(first);
    assert_eq!(open_tickets(&world), 2);
    let second = world.start("manifest.json");
    assert_eq!(second.run(), Stop::Quiet);
    assert!(second.log().iter().any(|l| l.contains("found in warden_actions; not repeated")), "{:?}", second.log());
    let actions = world.services.sql(&World::path("desk.db"), "SELECT COUNT(*) AS n FROM warden_actions");
    assert_eq!(actions[0]["n"], json!(1));
    assert!(check::open_runs(&world.disk, &journals()).is_empty());
    drop(second);

    // And one begun but not committed (a crash before the statement ran) is performed.
    let again = crash_between_begin_and_done(&world, "close_ticket", json!({"ticket": 3}), 2);
    assert!(again.log().iter().any(|l| l.contains("not in warden_actions; performing it")), "{:?}", again.log());
    assert_eq!(open_tickets(&world), 1);
}

#[test]
fn a_plain_post_in_doubt_waits_for_an_operator_who_resolves_it() {
    let world = world(8);
    world.services.notify_failures.set(2);
    world.services.fault_next("notes.sim", NetFault::LoseResponse);
    let instance = world.start("manifest.json");
    let stopped = ask(&instance, &call(1, "add_note", json!({"text": "hello"})));
    assert_eq!(stopped["isError"], json!(true));
    assert_eq!(stopped["_meta"]["dev.warden/run"]["status"], json!("waiting_for_operator"));
    let run = stopped["_meta"]["dev.warden/run"]["run"].as_str().unwrap().to_string();
    assert!(text(&stopped).contains("Do not call this tool again"), "{}", text(&stopped));
    // The waiting record is on disk, stderr names the resolve command, notify was retried.
    let files = warden::base::layout::RunFiles::new(&journals(), "add_note", &run);
    assert!(world.disk.peek(&files.waiting).is_some());
    assert!(instance.log().iter().any(|l| l.contains(&format!("run {run}: stopped, waiting for an operator"))
        && l.contains("warden resolve ")
        && l.contains(&format!("manifest.json {run} --op 0"))));
    world.clock.advance(10_000);
    assert_eq!(instance.run(), Stop::Quiet);
    assert_eq!(world.services.notify_calls.borrow().len(), 3, "two failures, then success");
    assert!(instance.log().iter().any(|l| l.contains("the operator was notified (attempt 3)")));
    // The reservation stays held; status says waiting.
    assert_eq!(check::open_runs(&world.disk, &journals()), vec![run.clone()]);
    let status = ask(
        &instance,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "warden_run_status", "arguments": {"run": run},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}),
    );
    assert_eq!(status["structuredContent"]["result"]["status"], json!("waiting"));
    drop(instance);

    // A restart without a resolution stops it again; the record stays as first written.
    let record = world.disk.peek(&files.waiting).unwrap();
    let again = world.start("manifest.json");
    assert_eq!(again.run(), Stop::Quiet);
    assert_eq!(world.disk.peek(&files.waiting).unwrap(), record);
    drop(again);

    // The operator checks the notes service: the note was saved. They resolve it as happened.
    assert_eq!(world.services.effects_of("note"), 1);
    let operator = world.start_command(|env| {
        let journal = files.journal.clone();
        Box::pin(async move { warden::commands::resolve(&env, &journal, 0, Some(r#"{"status": 201}"#), None).await })
    });
    assert!(operator.is_ok(), "{operator:?}");
    let resumed = world.start("manifest.json");
    assert_eq!(resumed.run(), Stop::Quiet);
    assert!(check::open_runs(&world.disk, &journals()).is_empty(), "the resolved run finished");
    assert!(world.disk.peek(&files.waiting).is_none());
    assert_eq!(world.services.effects_of("note"), 1, "nothing was sent again");
    let violations = check::at_rest(&world.disk, &journals());
    assert!(violations.is_empty(), "{violations:?}");
}

#[test]
fn an_action_resolved_as_not_happened_is_performed_on_resume() {
    let world = world(9);
    world.probes.crash_at.set(Some(CrashAt { point: Point::ActionBegun, nth: 1 }));
    let first = world.start("manifest.json");
    first.send(&call(1, "add_note", json!({"text": "again"})));
    assert_eq!(first.run(), Stop::Crashed);
    world.crash(first);
    world.probes.crash_at.set(None);
    let second = world.start("manifest.json");
    assert_eq!(second.run(), Stop::Quiet);
    let run = check::open_runs(&world.disk, &journals()).pop().expect("a waiting run");
    drop(second);
    let journal = warden::base::layout::RunFiles::new(&journals(), "add_note", &run).journal;
    let resolved = world
        .start_command(|env| Box::pin(async move { warden::commands::resolve(&env, &journal, 0, None, None).await }));
    assert!(resolved.is_ok(), "{resolved:?}");
    let third = world.start("manifest.json");
    assert_eq!(third.run(), Stop::Quiet);
    assert!(check::open_runs(&world.disk, &journals()).is_empty());
    assert_eq!(world.services.effects_of("note"), 1);
}

#[test]
fn secrets_appear_in_no_byte_written() {
    let world = world(10);
    let instance = world.start("manifest.json");
    let mut everything: Vec<u8> = Vec::new();
    everything.extend(
        ask(&instance, &call(1, "refund_order", json!({"order": "pi_1001", "amount": usd("5")}))).to_string().bytes(),
    );
    everything.extend(ask(&instance, &call(2, "add_note", json!({"text": "note"}))).to_string().bytes());
    world.services.fault_next("notes.sim", NetFault::LoseResponse);
    everything.extend(ask(&instance, &call(3, "add_note", json!({"text": "doubt"}))).to_string().bytes());
    everything.extend(
        ask(&instance, &call(4, "refund_order", json!({"order": "pi_9999", "amount": usd("5")}))).to_string().bytes(),
    );
    for path in world.disk.files() {
        everything.extend(world.disk.peek(&path).unwrap());
    }
    for line in instance.log() {
        everything.extend(line.as_bytes());
    }
    for notify in world.services.notify_calls.borrow().iter() {
        everything.extend(notify);
    }
    let text = String::from_utf8_lossy(&everything);
    assert!(text.contains("Bearer") || text.contains("notes.sim"), "the search covered the run files");
    for secret in [STRIPE_KEY, NOTES_TOKEN] {
        assert!(!text.contains(secret), "secret {secret} was written somewhere");
    }
    // The services did receive them.
    assert!(world.services.requests.borrow().iter().any(|r| r.headers.iter().any(|(_, v)| v.contains(STRIPE_KEY))));
}

#[test]
fn once_repeated_while_its_run_waits_for_an_operator_gets_the_same_stopped_answer() {
    let world = world(11);
    world.services.fault_next("notes.sim", NetFault::LoseResponse);
    let instance = world.start("manifest.json");
    let stopped = ask(&instance, &call(1, "add_note_once", json!({"text": "once"})));
    assert_eq!(stopped["_meta"]["dev.warden/run"]["status"], json!("waiting_for_operator"));
    let again = ask(&instance, &call(2, "add_note_once", json!({"text": "once"})));
    assert_eq!(again, stopped, "the repeat gets the same stopped result, and nothing runs");
    assert_eq!(world.services.effects_of("note"), 1);
    assert_eq!(check::open_runs(&world.disk, &journals()).len(), 1);
}

/// A run may take as many transitions as its actions need: 600 actions (two transitions
/// each, begun and done) end well inside the driver's bound (four per action of the most a
/// run may perform), and a bound below that would stop the server as a bug.
#[test]
fn a_run_of_six_hundred_actions_ends() {
    let world = world(1);
    let instance = world.start("manifest.json");
    let done = ask(&instance, &call(1, "fetch_many", json!({"times": 600})));
    assert_eq!(done["structuredContent"]["result"], json!(600), "{done}");
    assert!(instance.exited().is_none(), "the server stopped: {:?}", instance.exited());
}
