//! Input requests (`ask`, 2026-07-28 multi round-trip) on the real binary: a run that asks
//! answers `input_required` with a sealed `requestState`, waits durably (a kill -9 and a
//! restart lose nothing), and goes on once its client retries with the answers; a tampered,
//! foreign, replayed or malformed retry is refused and changes nothing; a client that declared
//! no input kind is never asked. Every message is schema-validated by the harness.

mod common;

use common::{fixture, Era, Wire};
use serde_json::{json, Value};

const ELICITATION: &str = "io.modelcontextprotocol/clientCapabilities";

fn close(ticket: i64, caps: Value, extra: Value) -> Value {
    let mut params = json!({"name": "close_ticket", "arguments": {"ticket_id": ticket, "note": "fixed"}, "_meta": {ELICITATION: caps}});
    for (key, value) in extra.as_object().unwrap() {
        params[key] = value.clone();
    }
    params
}

fn accept(close: bool) -> Value {
    json!({"confirm": {"action": "accept", "content": {"close": close}}})
}

fn journal_lines(wire: &Wire) -> String {
    common::walk(&wire.dir.path().join("journals/close_ticket"))
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "journal"))
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect()
}

#[test]
fn a_run_asks_waits_durably_through_a_kill_and_goes_on_when_answered() {
    let mut wire = Wire::start(&fixture("ask/manifest.json"));
    let asked = wire.request(Era::Modern, json!(1), "tools/call", close(1, json!({"elicitation": {}}), json!({})));
    let result = &asked["result"];
    assert_eq!(result["resultType"], json!("input_required"), "{asked}");
    assert_eq!(result["inputRequests"]["confirm"]["method"], json!("elicitation/create"));
    assert!(result["inputRequests"]["confirm"]["params"]["message"].as_str().unwrap().contains("Close ticket 1"));
    let state = result["requestState"].clone();
    assert!(journal_lines(&wire).contains("\"record\":\"asked\""), "the question is journaled before the answer");

    // Killed while waiting: the next server knows the run waits, and the state still opens.
    let mut wire = wire.restart();
    let retry = close(1, json!({"elicitation": {}}), json!({"requestState": state, "inputResponses": accept(true)}));
    let done = wire.request(Era::Modern, json!(2), "tools/call", retry.clone());
    assert_eq!(done["result"]["resultType"], json!("complete"), "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["result"],
        json!({"ticket_id": 1, "status": "closed", "confirmed": true})
    );
    let journal = journal_lines(&wire);
    assert_eq!(journal.matches("\"record\":\"answered\"").count(), 1, "{journal}");
    assert_eq!(journal.matches("\"record\":\"begin\"").count(), 1, "one write: {journal}");

    // The same state again: used once, refused, nothing more done.
    wire.send_request(Era::Modern, json!(3), "tools/call", retry);
    let replayed = wire.expect_error(-32602, Some(json!(3)));
    assert!(replayed["error"]["message"].as_str().unwrap().contains("already used"), "{replayed}");
    assert_eq!(journal_lines(&wire).matches("\"record\":\"begin\"").count(), 1);
}

#[test]
fn tampered_foreign_and_malformed_retries_are_refused_and_change_nothing() {
    let mut wire = Wire::start(&fixture("ask/manifest.json"));
    let caps = json!({"elicitation": {}});
    let asked = wire.request(Era::Modern, json!(1), "tools/call", close(2, caps.clone(), json!({})));
    let state = asked["result"]["requestState"].as_str().unwrap().to_string();

    let refusals = [
        // One byte of the claims changed: the seal no longer holds.
        (close(2, caps.clone(), json!({"requestState": tamper(&state), "inputResponses": accept(true)})), "integrity"),
        (close(2, caps.clone(), json!({"requestState": "not.a-state", "inputResponses": accept(true)})), "integrity"),
        (close(2, caps.clone(), json!({"requestState": 7, "inputResponses": accept(true)})), "string"),
        // The state of ticket 2's run, offered for another request (ticket 3).
        (close(3, caps.clone(), json!({"requestState": state, "inputResponses": accept(true)})), "another request"),
        // Answers of the wrong shape.
        (close(2, caps.clone(), json!({"requestState": state, "inputResponses": {"confirm": 12345}})), "object"),
        (
            close(2, caps.clone(), json!({"requestState": state, "inputResponses": {"confirm": {"action": "maybe"}}})),
            "action",
        ),
        (close(2, caps.clone(), json!({"requestState": state, "inputResponses": [1]})), "object of answers"),
    ];
    for (id, (params, says)) in refusals.into_iter().enumerate() {
        let id = json!(10 + id);
        wire.send_request(Era::Modern, id.clone(), "tools/call", params);
        let refused = wire.expect_error(-32602, Some(id));
        assert!(refused["error"]["message"].as_str().unwrap().contains(says), "{says}: {refused}");
    }
    // A retry missing the answer is asked again, with the same state still good.
    let again =
        wire.request(Era::Modern, json!(20), "tools/call", close(2, caps.clone(), json!({"requestState": state})));
    assert_eq!(again["result"]["resultType"], json!("input_required"), "{again}");
    assert_eq!(again["result"]["requestState"], json!(state));
    assert_eq!(journal_lines(&wire).matches("\"record\":\"answered\"").count(), 0, "nothing was taken");

    // Declined: the run ends without writing.
    let decline = json!({"confirm": {"action": "decline"}});
    let done = wire.request(
        Era::Modern,
        json!(21),
        "tools/call",
        close(2, caps, json!({"requestState": state, "inputResponses": decline})),
    );
    assert_eq!(done["result"]["structuredContent"]["result"]["status"], json!("left open"), "{done}");
    assert_eq!(journal_lines(&wire).matches("\"record\":\"begin\"").count(), 0);
}

#[test]
fn a_client_that_declared_no_input_kind_is_never_asked() {
    let mut wire = Wire::start(&fixture("ask/manifest.json"));
    let done = wire.request(Era::Modern, json!(1), "tools/call", close(4, json!({"sampling": {}}), json!({})));
    assert_eq!(done["result"]["resultType"], json!("complete"), "{done}");
    assert_eq!(done["result"]["structuredContent"]["result"]["confirmed"], json!(false));
    // A 2025-11-25 client is not asked either (it would need a server request).
    wire.initialize();
    let legacy = wire.request(
        Era::Legacy,
        json!(2),
        "tools/call",
        json!({"name": "close_ticket", "arguments": {"ticket_id": 5, "note": "fixed"}}),
    );
    assert_eq!(legacy["result"]["structuredContent"]["result"]["status"], json!("left open"), "{legacy}");
    assert_eq!(journal_lines(&wire).matches("\"record\":\"begin\"").count(), 0);
}

#[test]
fn a_once_repeat_of_a_waiting_run_asks_again_for_the_same_run() {
    let mut wire = Wire::start(&fixture("ask/manifest.json"));
    let caps = json!({"elicitation": {}});
    let first = wire.request(Era::Modern, json!(1), "tools/call", close(6, caps.clone(), json!({})));
    // The client lost that answer and calls again: the same run asks again (no second run).
    let again = wire.request(Era::Modern, json!(2), "tools/call", close(6, caps.clone(), json!({})));
    assert_eq!(again["result"]["resultType"], json!("input_required"), "{again}");
    assert_eq!(again["result"]["inputRequests"], first["result"]["inputRequests"]);
    let state = again["result"]["requestState"].clone();
    let ledger = std::fs::read_to_string(wire.dir.path().join("journals/server.ledger")).unwrap();
    assert_eq!(ledger.matches("\"event\":\"reserve\"").count(), 1, "{ledger}");
    let done = wire.request(
        Era::Modern,
        json!(3),
        "tools/call",
        close(6, caps.clone(), json!({"requestState": state, "inputResponses": accept(true)})),
    );
    assert_eq!(done["result"]["structuredContent"]["result"]["status"], json!("closed"), "{done}");
    // The first state named the same round, now answered: used.
    let stale =
        close(6, caps, json!({"requestState": first["result"]["requestState"], "inputResponses": accept(true)}));
    wire.send_request(Era::Modern, json!(4), "tools/call", stale);
    wire.expect_error(-32602, Some(json!(4)));
}

/// The state with one character of its claims changed.
fn tamper(state: &str) -> String {
    let mut bytes = state.as_bytes().to_vec();
    bytes[5] = if bytes[5] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}

/// The ask fixture served to a 2025-11-25 client that declared elicitation, initialized.
fn legacy_session_with_elicitation() -> Wire {
    let mut wire = Wire::start(&fixture("ask/manifest.json"));
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "t", "version": "1"}});
    wire.request(Era::Legacy, json!(0), "initialize", init);
    wire.send_line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    wire
}

/// A 2025-11-25 client that declared elicitation at `initialize` is asked with a server
/// request on the session, and the run goes on with its response; one that answers with an
/// error has declined.
#[test]
fn a_2025_client_over_stdio_is_asked_with_a_server_request() {
    let mut wire = legacy_session_with_elicitation();
    for (id, ticket, answer, status) in [
        (1, 3, json!({"result": {"action": "accept", "content": {"close": true}}}), "closed"),
        (2, 4, json!({"error": {"code": -1, "message": "the user closed the dialog"}}), "left open"),
    ] {
        let call = json!({"name": "close_ticket", "arguments": {"ticket_id": ticket, "note": "fixed"}});
        wire.send_request(Era::Legacy, json!(id), "tools/call", call);
        let asked = wire.recv();
        assert_eq!(asked["method"], json!("elicitation/create"), "{asked}");
        assert!(asked["params"]["message"].as_str().unwrap().contains(&format!("Close ticket {ticket}")));
        let mut response = json!({"jsonrpc": "2.0", "id": asked["id"]});
        for (key, value) in answer.as_object().unwrap() {
            response[key] = value.clone();
        }
        wire.send_line(&response);
        let done = wire.recv();
        assert_eq!(done["id"], json!(id), "{done}");
        assert_eq!(done["result"]["structuredContent"]["result"]["status"], json!(status), "{done}");
    }
    // A response to nothing the server asked is dropped, and the server keeps serving.
    wire.send_line(&json!({"jsonrpc": "2.0", "id": "warden-input-99", "result": {}}));
    wire.assert_serving(3);
    assert_eq!(journal_lines(&wire).matches("\"record\":\"begin\"").count(), 1);
}

/// A 2025-11-25 call left asking (its client never answers) ends as soon as another call
/// takes its run's round: here a `once` repeat, asked again for the same run and answered.
/// (Seed 95237 of the 100,000-seed sweep: the first call waited out the whole round's wait.)
#[test]
fn a_2025_call_left_asking_ends_when_another_call_answers_its_run() {
    let mut wire = legacy_session_with_elicitation();
    let call = json!({"name": "close_ticket", "arguments": {"ticket_id": 5, "note": "fixed"}});
    wire.send_request(Era::Legacy, json!(1), "tools/call", call.clone());
    let left = wire.recv();
    assert_eq!(left["method"], json!("elicitation/create"), "{left}");
    wire.send_request(Era::Legacy, json!(2), "tools/call", call);
    let asked = wire.recv();
    assert_eq!(asked["method"], json!("elicitation/create"), "{asked}");
    assert_ne!(asked["id"], left["id"]);
    wire.send_line(
        &json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"close": true}}}),
    );
    let mut answers = [wire.recv(), wire.recv(), wire.recv()];
    answers.sort_by_key(|answer| answer["id"].as_i64());
    let [withdrawn, first, repeat] = answers;
    // The first call's request, left unanswered, is withdrawn before its call is answered.
    assert_eq!(withdrawn["method"], json!("notifications/cancelled"), "{withdrawn}");
    assert_eq!(withdrawn["params"]["requestId"], left["id"], "{withdrawn}");
    assert_eq!(repeat["result"]["structuredContent"]["result"]["status"], json!("closed"), "{repeat}");
    assert_eq!(first["id"], json!(1), "{first}");
    assert_eq!(first["result"]["isError"], json!(true), "{first}");
    let text = first["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("no longer waits for it (another call answered it"), "{text}");
    // The response the first call's client sends late is to nothing that waits: dropped.
    wire.send_line(&json!({"jsonrpc": "2.0", "id": left["id"], "result": {"action": "decline"}}));
    wire.assert_serving(3);
    assert_eq!(journal_lines(&wire).matches("\"record\":\"begin\"").count(), 1);
}

/// Two 2025-11-25 calls asking their client at once, and the client closes stdin without
/// answering: both calls end (each waited on the connection's end, which woke only the last to
/// wait), and the server exits at once rather than after the round's whole wait.
#[test]
fn every_call_asking_its_client_ends_when_stdin_closes() {
    let mut wire = legacy_session_with_elicitation();
    for (id, ticket) in [(1, 3), (2, 4)] {
        let call = json!({"name": "close_ticket", "arguments": {"ticket_id": ticket, "note": "fixed"}});
        wire.send_request(Era::Legacy, json!(id), "tools/call", call);
        assert_eq!(wire.recv()["method"], json!("elicitation/create"));
    }
    wire.close_stdin();
    let mut ids: Vec<Value> = (0..2).map(|_| wire.recv()["id"].clone()).collect();
    ids.sort_by_key(|id| id.as_i64());
    assert_eq!(ids, [json!(1), json!(2)]);
    assert!(wire.wait_exit(std::time::Duration::from_secs(20)).success(), "{}", wire.stderr());
}

/// A folder with one tool `t` whose program is `program` (no grants).
fn one_tool(program: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.star"), program).unwrap();
    let manifest = json!({"server": {"name": "s", "journals": "journals"},
        "tools": [{"name": "t", "program": "t.star", "once": {"by": ["n"]}}]});
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    dir
}

fn call_t(wire: &mut Wire, id: i64, n: i64, caps: Value, extra: Value) -> Value {
    let mut params = json!({"name": "t", "arguments": {"n": n}, "_meta": {ELICITATION: caps}});
    for (key, value) in extra.as_object().unwrap() {
        params[key] = value.clone();
    }
    wire.request(Era::Modern, json!(id), "tools/call", params)["result"].clone()
}

const ASK_ROOTS: &str = "def main(n: int) -> dict:\n    \"\"\"Ask.\n\n    Args:\n        n: How deep.\n    \"\"\"\n    x = {}\n    for i in range(n):\n        x = {\"a\": x}\n    return {\"got\": ask({\"q\": {\"method\": \"roots/list\", \"params\": {\"x\": x}}})}\n";

/// Requests nested deeper than a record may hold fail the run (found by a hostile review: the
/// journal's writer asserted, the call was never answered, the next start panicked).
#[test]
fn requests_nested_too_deep_fail_the_run_and_the_server_keeps_serving() {
    let mut wire = Wire::start_dir(one_tool(ASK_ROOTS), &[]);
    let failed = call_t(&mut wire, 1, 118, json!({"roots": {}}), json!({}));
    assert!(failed["content"][0]["text"].as_str().unwrap().contains("nest"), "{failed}");
    let asked = call_t(&mut wire, 2, 3, json!({"roots": {}}), json!({}));
    assert_eq!(asked["resultType"], json!("input_required"), "{asked}");
    // Every answer names its run; the round waiting for input too.
    assert!(asked["_meta"]["dev.warden/run"]["run"].is_string(), "{asked}");
    let mut wire = wire.restart();
    wire.assert_serving(3);
}

/// A `once` repeat by a client that cannot answer the waiting round's kinds is told so, never
/// asked what it did not declare (found by a hostile review).
#[test]
fn a_once_repeat_is_asked_only_kinds_it_declared() {
    let mut wire = Wire::start_dir(one_tool(ASK_ROOTS), &[]);
    let asked = call_t(&mut wire, 1, 2, json!({"roots": {}}), json!({}));
    assert_eq!(asked["resultType"], json!("input_required"), "{asked}");
    let repeat = call_t(&mut wire, 2, 2, json!({"elicitation": {}}), json!({}));
    assert_eq!(repeat["isError"], json!(true), "{repeat}");
    assert!(repeat["content"][0]["text"].as_str().unwrap().contains("roots"), "{repeat}");
}

/// A run waiting for input when its program changes does not stop the server from starting:
/// no action is in doubt, so it ends (`deadline`) without its program running (found by a
/// hostile review: no command could get the server out of that refusal).
#[test]
fn a_waiting_run_whose_program_changed_ends_instead_of_blocking_the_start() {
    let mut wire = Wire::start_dir(one_tool(ASK_ROOTS), &[]);
    let asked = call_t(&mut wire, 1, 2, json!({"roots": {}}), json!({}));
    assert_eq!(asked["resultType"], json!("input_required"), "{asked}");
    wire.kill_now();
    let program = wire.dir.path().join("t.star");
    std::fs::write(&program, ASK_ROOTS.replace("Ask.", "Ask again.")).unwrap();
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    let mut wire = Wire::start_dir(dir, &[]);
    wire.assert_serving(2);
    let ended = call_t(&mut wire, 3, 2, json!({"roots": {}}), json!({}));
    assert!(ended["content"][0]["text"].as_str().unwrap().contains("deadline"), "{ended}");
}

/// Issue 45 item 3: a drain while a 2025-11-25 elicitation is pending ends the wait at once
/// (it waited out the whole grace and exited 1 "as a crash would"): the call is answered
/// saying the run waits for its input, and the server exits 0 with the run open.
#[test]
fn a_drain_ends_a_pending_elicitation_and_exits_cleanly() {
    let mut wire = legacy_session_with_elicitation();
    let call = json!({"name": "close_ticket", "arguments": {"ticket_id": 3, "note": "fixed"}});
    wire.send_request(Era::Legacy, json!(1), "tools/call", call);
    assert_eq!(wire.recv()["method"], json!("elicitation/create"));
    let status = std::process::Command::new("kill").args(["-TERM", &wire.pid().to_string()]).status().unwrap();
    assert!(status.success());
    let mut answered = wire.recv();
    while answered.get("id") != Some(&json!(1)) {
        answered = wire.recv();
    }
    assert_eq!(answered["result"]["isError"], json!(true), "{answered}");
    let text = answered["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("stopping") && text.contains("waits for its input"), "{answered}");
    let exit = wire.wait_exit(std::time::Duration::from_secs(60));
    assert!(exit.success(), "a drain that answered every call exits 0: {exit:?}\n{}", wire.stderr());
    let report = common::status_report(wire.dir.path());
    assert!(report.contains("waiting for its client's input"), "{report}");
}
