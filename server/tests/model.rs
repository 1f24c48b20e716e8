//! Model calls on the real binary against a local provider on 127.0.0.1: a call answered in
//! each API's shape, retried after a 429 and given up after 5xx, each attempt within
//! `timeout_ms`, replayed after a kill -9 without a second request, tokens reported in the
//! run's usage, a call asking more tokens than its grant refused; the API key sent and never
//! written. Every message is schema-validated by the harness.

mod common;

use common::provider::Provider;
use common::{walk, Era, Wire};
use serde_json::{json, Value};

const KEY: &str = "sk-test-model-key-0123456789abcdef";

const PROGRAM: &str = r#"def main(llm, text: str, confirm: bool = False) -> dict:
    """Ask the model about a text.

    Args:
        text: What to ask.
        confirm: Ask the caller to go on after the model answered.
    """
    answer = llm.complete([{"role": "user", "content": text}], system = "Be brief.")
    if confirm:
        ask({"go": {"method": "elicitation/create", "params": {"message": "Go on?", "requestedSchema": {"type": "object", "properties": {}}}}})
    return {"text": answer.get("text"), "error": answer.get("error"), "usage": answer.get("usage")}
"#;

fn server(provider: &Provider, kind: &str, max_tokens: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ask_model.star"), PROGRAM).unwrap();
    let manifest = json!({
        "server": {"name": "model-test", "journals": "journals"},
        "model": {"provider": kind, "model": "test-model", "api_key": {"env": "MODEL_KEY"},
                  "timeout_ms": 500, "retries": 1, "base_url": provider.base()},
        "tools": [{"name": "ask_model", "program": "ask_model.star",
                   "grants": {"llm": {"cap": "model", "max_tokens": max_tokens, "uses": 3}}}]
    });
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    dir
}

fn call(wire: &mut Wire, id: i64, text: &str, extra: Value) -> Value {
    let mut params = json!({"name": "ask_model", "arguments": {"text": text}});
    for (key, value) in extra.as_object().unwrap() {
        params[key] = value.clone();
    }
    let answer = wire.request(Era::Modern, json!(id), "tools/call", params);
    answer["result"].clone()
}

#[test]
fn a_model_call_is_answered_retried_given_up_and_timed_out() {
    let provider = Provider::start();
    let mut wire = Wire::start_dir(server(&provider, "anthropic", 1024), &[("MODEL_KEY", KEY)]);
    let done = call(&mut wire, 1, "hello", json!({}));
    assert_eq!(done["structuredContent"]["result"]["text"], json!("echo: hello"), "{done}");
    assert_eq!(done["structuredContent"]["result"]["usage"], json!({"input_tokens": 7, "output_tokens": 3}));
    let sent = provider.asked.lock().unwrap()[0].clone();
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers.get("x-api-key").map(String::as_str), Some(KEY));
    assert_eq!(sent.body["model"], json!("test-model"));
    assert_eq!((sent.body["system"].clone(), sent.body["max_tokens"].clone()), (json!("Be brief."), json!(1024)));

    // A 429 with retry-after: 0 is retried once, and answered.
    let busy = call(&mut wire, 2, "busy", json!({}));
    assert_eq!(busy["structuredContent"]["result"]["text"], json!("echo: busy"), "{busy}");
    assert_eq!(provider.count("busy"), 2);
    // A 500 every time: given up after `retries` + 1 attempts, an error the program sees.
    let broken = call(&mut wire, 3, "broken", json!({}));
    let error = broken["structuredContent"]["result"]["error"].as_str().unwrap();
    assert!(error.contains("did not answer after 2 attempt(s)") && error.contains("status 500"), "{broken}");
    assert_eq!(provider.count("broken"), 2);
    // Slower than `timeout_ms` (500 ms): each attempt times out.
    let slow = call(&mut wire, 4, "slow", json!({}));
    let error = slow["structuredContent"]["result"]["error"].as_str().unwrap();
    assert!(error.contains("did not answer after 2 attempt(s)"), "{slow}");

    // The key is sent and never written: not in a journal, a log, stderr or an answer.
    wire.close_stdin();
    assert!(wire.wait_exit(std::time::Duration::from_secs(20)).success());
    let mut written = wire.stderr();
    for path in walk(wire.dir.path()) {
        written.push_str(&String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()));
    }
    for message in &wire.received {
        written.push_str(&message.to_string());
    }
    assert!(written.contains("echo: hello") && !written.contains(&KEY[8..24]), "the key was written somewhere");
}

#[test]
fn an_openai_compatible_provider_is_asked_in_its_shape_and_tokens_are_bounded_by_the_grant() {
    let provider = Provider::start();
    let mut wire = Wire::start_dir(server(&provider, "openai", 64), &[("MODEL_KEY", KEY)]);
    let done = call(&mut wire, 1, "hello", json!({}));
    assert_eq!(done["structuredContent"]["result"]["text"], json!("echo: hello"), "{done}");
    let sent = provider.asked.lock().unwrap()[0].clone();
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.headers.get("authorization"), Some(&format!("Bearer {KEY}")));
    assert_eq!(sent.body["messages"][0], json!({"role": "system", "content": "Be brief."}));

    // The program asks more tokens than the grant allows: refused before anything is sent.
    let dir = server(&provider, "openai", 64);
    let program = std::fs::read_to_string(dir.path().join("ask_model.star")).unwrap();
    std::fs::write(dir.path().join("ask_model.star"), program.replace("system = \"Be brief.\"", "max_tokens = 65"))
        .unwrap();
    let mut wire = Wire::start_dir(dir, &[("MODEL_KEY", KEY)]);
    let refused = call(&mut wire, 1, "too many", json!({}));
    assert!(refused["content"][0]["text"].as_str().unwrap().contains("allows at most 64 tokens a call"), "{refused}");
    assert_eq!(provider.count("too many"), 0);
}

#[test]
fn a_model_call_the_journal_holds_is_replayed_after_a_kill_not_sent_again() {
    let provider = Provider::start();
    let mut wire = Wire::start_dir(server(&provider, "anthropic", 1024), &[("MODEL_KEY", KEY)]);
    let caps = json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    let mut params = json!({"name": "ask_model", "arguments": {"text": "remember", "confirm": true}});
    params["_meta"] = caps["_meta"].clone();
    let asked = wire.request(Era::Modern, json!(1), "tools/call", params.clone());
    assert_eq!(asked["result"]["resultType"], json!("input_required"), "{asked}");
    assert_eq!(provider.count("remember"), 1);
    // Killed while the run waits; a new server, then the answer: the model call is replayed.
    let mut wire = restart_with_key(wire);
    params["requestState"] = asked["result"]["requestState"].clone();
    params["inputResponses"] = json!({"go": {"action": "accept"}});
    let done = wire.request(Era::Modern, json!(2), "tools/call", params);
    assert_eq!(done["result"]["structuredContent"]["result"]["text"], json!("echo: remember"), "{done}");
    assert_eq!(provider.count("remember"), 1, "the journal's answer was used, the model was not asked again");
}

fn restart_with_key(wire: Wire) -> Wire {
    let mut wire = wire;
    wire.kill_now();
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    Wire::start_dir(dir, &[("MODEL_KEY", KEY)])
}

/// A token quota holds a run's worst case (`max_tokens` x `uses` x attempts x sends) while it runs and the
/// tokens it used once settled: over it, a call is refused before anything is sent.
#[test]
fn tokens_over_a_quota_are_refused_before_anything_is_sent() {
    let provider = Provider::start();
    let dir = server(&provider, "anthropic", 100);
    let path = dir.path().join("manifest.json");
    let mut manifest: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    manifest["tools"][0]["grants"]["llm"]["uses"] = json!(1);
    manifest["tools"][0]["quota"] = json!({"window": "1h", "tokens": 405});
    std::fs::write(&path, manifest.to_string()).unwrap();
    let mut wire = Wire::start_dir(dir, &[("MODEL_KEY", KEY)]);
    for (id, text) in [(1, "one"), (2, "two")] {
        let done = call(&mut wire, id, text, json!({}));
        assert_eq!(done["structuredContent"]["result"]["text"], json!(format!("echo: {text}")), "{done}");
    }
    // 3 output tokens used by each run so far; one more would hold 400 (100 `max_tokens` x 2
    // attempts x 2 sends): over 405 (the quota counts output tokens, which `max_tokens` bounds).
    let refused = call(&mut wire, 3, "three", json!({}));
    let text = refused["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("405 model tokens per 1h allowed, 6 held or used, this call may use 400"), "{refused}");
    assert_eq!(provider.count("three"), 0);
    let ledger = std::fs::read_to_string(wire.dir.path().join("journals/server.ledger")).unwrap();
    assert_eq!(ledger.matches("\"tokens\":400").count(), 2, "each reserve holds the worst case: {ledger}");
    assert_eq!(ledger.matches("\"tokens\":3").count(), 2, "each settle holds the tokens used: {ledger}");
}

/// The bundled ticket-summary example, its model pointed at the local provider: the ticket's
/// thread goes to the model, the summary is written to the ticket once, a repeat within a day
/// answers the first summary without asking the model again, and the key is in no output.
#[test]
fn the_ticket_summary_example_summarises_once_and_writes_the_summary() {
    let provider = Provider::start();
    let dir = common::private_copy(&common::repo_root().join("examples/ticket-summary"));
    let path = dir.path().join("manifest.json");
    let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    manifest["model"]["base_url"] = json!(provider.base());
    std::fs::write(&path, manifest.to_string()).unwrap();
    let mut wire = Wire::start_dir(dir, &[("ANTHROPIC_API_KEY", KEY)]);
    let call = json!({"name": "summarize_ticket", "arguments": {"ticket_id": 1}});
    let first = wire.request(Era::Modern, json!(1), "tools/call", call.clone())["result"].clone();
    let summary = first["structuredContent"]["result"]["summary"].as_str().unwrap_or_default().to_string();
    assert!(
        summary.starts_with("echo: Ticket: Refund not received") && summary.contains("proof of the refund"),
        "{first}"
    );
    let sent = provider.asked.lock().unwrap()[0].body.clone();
    assert_eq!((sent["max_tokens"].clone(), sent["temperature"].clone()), (json!(300), json!(0)), "{sent}");
    let again = wire.request(Era::Modern, json!(2), "tools/call", call)["result"].clone();
    assert_eq!(again["structuredContent"], first["structuredContent"], "a repeat answers the first summary");
    assert_eq!(provider.asked.lock().unwrap().len(), 1, "the model was asked once");
    let empty = wire.request(
        Era::Modern,
        json!(3),
        "tools/call",
        json!({"name": "summarize_ticket", "arguments": {"ticket_id": 6}}),
    );
    assert_eq!(empty["result"]["isError"], json!(true), "{empty}");

    wire.close_stdin();
    assert!(wire.wait_exit(std::time::Duration::from_secs(20)).success());
    let stored = std::process::Command::new("python3")
        .args(["-c", "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select summary from tickets where id = 1').fetchone()[0])"])
        .arg(wire.dir.path().join("desk.db"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&stored.stdout).trim(), summary.trim());
    let mut written = wire.stderr() + &serde_json::to_string(&wire.received).unwrap();
    for file in walk(wire.dir.path()) {
        written.push_str(&String::from_utf8_lossy(&std::fs::read(file).unwrap()));
    }
    assert!(!written.contains(KEY), "the API key was written");
}

/// `server(...)` with the model grant's `uses` and a token quota set.
fn quota_server(provider: &Provider, uses: u64) -> tempfile::TempDir {
    let dir = server(provider, "anthropic", 100);
    let path = dir.path().join("manifest.json");
    let mut manifest: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    manifest["tools"][0]["grants"]["llm"]["uses"] = json!(uses);
    manifest["tools"][0]["quota"] = json!({"window": "1h", "tokens": 100_000});
    std::fs::write(&path, manifest.to_string()).unwrap();
    dir
}

/// The `tokens` of the ledger's settle events, in order.
fn settled_tokens(dir: &std::path::Path) -> Vec<u64> {
    let ledger = std::fs::read_to_string(dir.join("journals/server.ledger")).unwrap_or_default();
    (ledger.lines())
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|line| line.as_object().and_then(|o| o.values().find(|v| v["event"] == "settle")).cloned())
        .filter_map(|event| event["tokens"].as_u64())
        .collect()
}

/// Issue 23 item 1: every attempt that may have reached the provider costs its `max_tokens`
/// unless a usage says less (two timed-out attempts cost 2 x 100; an answer without usage
/// costs 100), and each reserve holds `max_tokens` x `uses` x attempts x sends (100 x 1 x 2 x 2).
#[test]
fn every_attempt_that_may_have_reached_the_provider_is_charged_to_the_token_quota() {
    let provider = Provider::start();
    let mut wire = Wire::start_dir(quota_server(&provider, 1), &[("MODEL_KEY", KEY)]);
    let slow = call(&mut wire, 1, "slow", json!({}));
    assert!(slow["structuredContent"]["result"]["error"].is_string(), "{slow}");
    let bare = call(&mut wire, 2, "no usage", json!({}));
    assert_eq!(bare["structuredContent"]["result"]["text"], json!("echo: no usage"), "{bare}");
    let answered = call(&mut wire, 3, "hello", json!({}));
    assert_eq!(answered["structuredContent"]["result"]["text"], json!("echo: hello"), "{answered}");
    assert_eq!(settled_tokens(wire.dir.path()), vec![200, 100, 3]);
    let ledger = std::fs::read_to_string(wire.dir.path().join("journals/server.ledger")).unwrap();
    assert_eq!(ledger.matches("\"tokens\":400").count(), 3, "each reserve holds the worst case: {ledger}");
}

/// Issue 23 item 1: a call begun before a kill -9 is sent again at restart and charged both
/// sends: every attempt of the interrupted one (2 x 100) and the two of the new one.
#[test]
fn a_model_call_resent_after_a_kill_is_charged_for_the_send_the_kill_interrupted() {
    let provider = Provider::start();
    let mut wire = Wire::start_dir(quota_server(&provider, 2), &[("MODEL_KEY", KEY)]);
    let params = json!({"name": "ask_model", "arguments": {"text": "slow"}});
    wire.send_request(Era::Modern, json!(1), "tools/call", params);
    let waited = std::time::Instant::now();
    while provider.count("slow") == 0 {
        assert!(waited.elapsed() < std::time::Duration::from_secs(20), "the model was never asked");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let wire = restart_with_key(wire);
    let waited = std::time::Instant::now();
    while settled_tokens(wire.dir.path()).is_empty() {
        assert!(waited.elapsed() < std::time::Duration::from_secs(30), "the resumed run never settled");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(settled_tokens(wire.dir.path()), vec![400], "asked {} times", provider.count("slow"));
}

/// Issue 23 item 2: a 200 whose body is not JSON, has no completion, or is over the response
/// limit is an error the program sees, never an empty completion, and costs `max_tokens`.
#[test]
fn a_malformed_or_oversized_answer_is_an_error_not_an_empty_completion() {
    let provider = Provider::start();
    let mut wire = Wire::start_dir(quota_server(&provider, 1), &[("MODEL_KEY", KEY)]);
    for (id, text, why) in [(1, "html", "not JSON"), (2, "no text", "no completion text"), (3, "huge", "over 4194304")]
    {
        let done = call(&mut wire, id, text, json!({}));
        let result = &done["structuredContent"]["result"];
        assert!(result["text"].is_null(), "{text}: {done}");
        assert!(result["error"].as_str().is_some_and(|error| error.contains(why)), "{text}: {done}");
    }
    assert_eq!(settled_tokens(wire.dir.path()), vec![100, 100, 100]);
}

/// Issue 23 item 3: a provider's error quoting the key near the cut is scrubbed before it is
/// cut: no prefix of the key in the answer or the journal.
#[test]
fn a_provider_error_is_scrubbed_before_it_is_cut() {
    let provider = Provider::start();
    let mut wire = Wire::start_dir(server(&provider, "anthropic", 100), &[("MODEL_KEY", KEY)]);
    let done = call(&mut wire, 1, "leaky", json!({}));
    assert!(done["structuredContent"]["result"]["error"].as_str().unwrap().contains("answered 400"), "{done}");
    wire.close_stdin();
    assert!(wire.wait_exit(std::time::Duration::from_secs(20)).success());
    let mut written = wire.stderr() + &serde_json::to_string(&wire.received).unwrap();
    for file in walk(wire.dir.path()) {
        written.push_str(&String::from_utf8_lossy(&std::fs::read(file).unwrap()));
    }
    assert!(!written.contains(&KEY[..12]), "a prefix of the key was written");
}

use common::status_report;

/// Issue 23 item 15: `warden mcp status` says what each unfinished run is doing: the action it
/// is blocked in (kind, target), how long ago it began, whether a server is running, and the
/// one thing that applies; after a kill -9, that the next start sends the call again.
#[test]
fn status_names_the_action_a_run_is_blocked_in_and_whether_a_server_runs() {
    let provider = Provider::start();
    let dir = server(&provider, "anthropic", 100);
    let path = dir.path().join("manifest.json");
    let mut manifest: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    manifest["model"]["timeout_ms"] = json!(20_000);
    std::fs::write(&path, manifest.to_string()).unwrap();
    let mut wire = Wire::start_dir(dir, &[("MODEL_KEY", KEY)]);
    wire.send_request(Era::Modern, json!(1), "tools/call", json!({"name": "ask_model", "arguments": {"text": "slow"}}));
    let waited = std::time::Instant::now();
    while provider.count("slow") == 0 {
        assert!(waited.elapsed() < std::time::Duration::from_secs(20), "the model was never asked");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let report = status_report(wire.dir.path());
    assert!(report.contains("server: running"), "{report}");
    assert!(report.contains("action 0 (model COMPLETE") && report.contains("in flight"), "{report}");
    assert!(report.contains("reserved ") && report.contains(" ago: action 0"), "{report}");
    wire.kill_now();
    let report = status_report(wire.dir.path());
    assert!(report.contains("server: not running"), "{report}");
    assert!(report.contains("the next start sends it again"), "{report}");
    assert!(report.contains("start the server: warden mcp "), "{report}");
}
