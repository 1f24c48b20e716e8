//! Raw-line tests of the real binary: framing limits, error discipline, both eras on one
//! connection, cancellation, stream protection and shutdown. After every bad line the next
//! good line must be answered. Every message received is schema-validated by the harness.

mod common;

use std::time::Duration;

use common::{fixture, Era, Wire};
use serde_json::{json, Value};

const LINE_BYTES_MAX: usize = 4 * 1024 * 1024;

fn wire() -> Wire {
    Wire::start(&fixture("wire/manifest.json"))
}

fn text_of(answer: &Value) -> String {
    answer["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_line_over_four_mebibytes_is_refused_and_the_next_is_answered() {
    let mut wire = wire();
    let mut line = vec![b' '; LINE_BYTES_MAX + 1];
    line[0] = b'{';
    line.push(b'\n');
    wire.send_raw(&line);
    let error = wire.expect_error(-32600, None);
    assert!(error["error"]["message"].as_str().unwrap().contains("exceeds the limit"), "{error}");
    wire.assert_serving(1);
}

#[test]
fn a_line_of_exactly_four_mebibytes_is_parsed() {
    let mut wire = wire();
    let request = Wire::request_message(Era::Modern, json!(7), "server/discover", json!({}));
    let mut line = serde_json::to_vec(&request).unwrap();
    line.resize(LINE_BYTES_MAX, b' ');
    line.push(b'\n');
    wire.expect_era(&json!(7), Era::Modern, "server/discover");
    wire.send_raw(&line);
    let answer = wire.recv();
    assert_eq!(answer["id"], json!(7), "{answer}");
}

#[test]
fn nesting_deeper_than_sixty_four_is_refused_before_parsing() {
    let mut wire = wire();
    let deep = format!("{}{}\n", "[".repeat(65), "]".repeat(65));
    wire.send_raw(deep.as_bytes());
    wire.expect_error(-32700, None);
    // Depth 64 inside a request's params is parsed (and answered as a request).
    let inner = format!("{}1{}", "[".repeat(61), "]".repeat(61));
    let line = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"nope\",\"params\":{{\"x\":{inner},\"_meta\":{{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{{}}}}}}}}\n"
    );
    wire.expect_era(&json!(2), Era::Modern, "nope");
    wire.send_raw(line.as_bytes());
    wire.expect_error(-32601, Some(json!(2)));
    wire.assert_serving(3);
}

#[test]
fn a_batch_is_refused_and_nothing_in_it_runs() {
    let mut wire = wire();
    wire.initialize();
    let call = Wire::request_message(
        Era::Legacy,
        json!(5),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "batched"}}),
    );
    wire.send_line(&json!([call]));
    wire.expect_error(-32600, None);
    wire.assert_serving(6);
    assert!(!wire.stderr().contains("batched"), "a call inside a batch ran:\n{}", wire.stderr());
}

#[test]
fn non_json_and_bad_ids_and_bad_envelopes() {
    let mut wire = wire();
    wire.send_raw(b"this is not json\n");
    wire.expect_error(-32700, None);
    wire.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\"unterminated\n");
    wire.expect_error(-32700, None);
    for bad_id in ["1.5", "null", "true", "{}", "[1]"] {
        wire.send_raw(format!("{{\"jsonrpc\":\"2.0\",\"id\":{bad_id},\"method\":\"ping\"}}\n").as_bytes());
        wire.expect_error(-32600, None);
    }
    wire.send_raw(b"{\"jsonrpc\":\"1.0\",\"id\":9,\"method\":\"ping\"}\n");
    wire.expect_error(-32600, Some(json!(9)));
    wire.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":10}\n");
    wire.expect_error(-32600, Some(json!(10)));
    wire.send_raw(b"\"just a string\"\n");
    wire.expect_error(-32600, None);
    wire.assert_serving(11);
}

#[test]
fn unknown_methods_in_both_eras() {
    let mut wire = wire();
    wire.send_request(Era::Modern, json!("m1"), "resources/list", json!({}));
    wire.expect_error(-32601, Some(json!("m1")));
    wire.initialize();
    wire.send_request(Era::Legacy, json!("l1"), "prompts/list", json!({}));
    wire.expect_error(-32601, Some(json!("l1")));
    // Logging is advertised in 2025-11-25, so its `logging/setLevel` is served; a bad level
    // is -32602. In 2026-07-28 it is removed (-32601): the level comes with each request.
    let set = wire.request(Era::Legacy, json!("l2"), "logging/setLevel", json!({"level": "info"}));
    assert_eq!(set["result"], json!({}));
    wire.send_request(Era::Legacy, json!("l3"), "logging/setLevel", json!({"level": "loud"}));
    wire.expect_error(-32602, Some(json!("l3")));
    wire.send_request(Era::Modern, json!("m2"), "logging/setLevel", json!({"level": "info"}));
    wire.expect_error(-32601, Some(json!("m2")));
    wire.assert_serving(1);
}

#[test]
fn notifications_are_never_answered_even_when_malformed() {
    let mut wire = wire();
    wire.send_raw(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/unknown\"}\n");
    wire.send_raw(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":[1,2]}\n");
    wire.send_raw(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"nobody\"}}\n",
    );
    wire.send_raw(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    // A response from the client (we sent no request) is dropped, not answered.
    wire.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}\n");
    // The first message back must be the answer to this request.
    wire.assert_serving(1);
}

#[test]
fn modern_envelope_errors() {
    let mut wire = wire();
    let mut old = Wire::request_message(Era::Modern, json!(1), "tools/list", json!({}));
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    wire.expect_era(&json!(1), Era::Modern, "tools/list");
    wire.send_line(&old);
    let error = wire.expect_error(-32022, Some(json!(1)));
    assert_eq!(error["error"]["data"], json!({"supported": ["2026-07-28"], "requested": "1900-01-01"}));

    let mut no_caps = Wire::request_message(Era::Modern, json!(2), "tools/list", json!({}));
    no_caps["params"]["_meta"].as_object_mut().unwrap().remove("io.modelcontextprotocol/clientCapabilities");
    wire.expect_era(&json!(2), Era::Modern, "tools/list");
    wire.send_line(&no_caps);
    wire.expect_error(-32602, Some(json!(2)));

    let mut bad_level = Wire::request_message(Era::Modern, json!(3), "tools/list", json!({}));
    bad_level["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("loud");
    wire.expect_era(&json!(3), Era::Modern, "tools/list");
    wire.send_line(&bad_level);
    wire.expect_error(-32602, Some(json!(3)));

    for (id, method) in [(4, "initialize"), (5, "ping"), (6, "logging/setLevel"), (7, "resources/subscribe")] {
        wire.send_request(Era::Modern, json!(id), method, json!({}));
        wire.expect_error(-32601, Some(json!(id)));
    }
    // A modern request without clientInfo is served.
    let listed = wire.request(Era::Modern, json!(8), "tools/list", json!({}));
    assert_eq!(listed["result"]["cacheScope"], json!("public"));
    assert!(listed["result"]["ttlMs"].as_u64().is_some());
    assert_eq!(listed["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], json!("wire-tests"));
    // The schemas a signature gives name their dialect, JSON Schema 2020-12.
    for tool in listed["result"]["tools"].as_array().expect("tools") {
        let dialect = json!("https://json-schema.org/draft/2020-12/schema");
        assert_eq!(tool["inputSchema"]["$schema"], dialect, "{tool}");
        if let Some(output) = tool.get("outputSchema") {
            assert_eq!(output["$schema"], dialect, "{tool}");
        }
    }
}

#[test]
fn a_legacy_request_before_initialize_is_refused_and_modern_ones_work_before_and_after() {
    let mut wire = wire();
    wire.send_request(Era::Legacy, json!(1), "tools/list", json!({}));
    wire.expect_error(-32602, Some(json!(1)));
    // ping is allowed before initialize (rmcp sends it).
    let pong = wire.request(Era::Legacy, json!(2), "ping", Value::Null);
    assert_eq!(pong["result"], json!({}));
    let before = wire.request(Era::Modern, json!(3), "tools/list", json!({}));
    wire.initialize();
    let after = wire.request(Era::Modern, json!(4), "tools/list", json!({}));
    assert_eq!(before["result"]["tools"], after["result"]["tools"]);
    let legacy = wire.request(Era::Legacy, json!(5), "tools/list", json!({}));
    assert!(legacy["result"].get("resultType").is_none(), "{legacy}");
    assert_eq!(legacy["result"]["tools"], after["result"]["tools"]);
    // A second initialize is refused.
    wire.send_request(
        Era::Legacy,
        json!(6),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}),
    );
    wire.expect_error(-32600, Some(json!(6)));
}

#[test]
fn initialize_asking_for_2026_is_answered_with_2025() {
    let mut wire = wire();
    let answer = wire.request(
        Era::Legacy,
        json!(0),
        "initialize",
        json!({"protocolVersion": "2026-07-28", "capabilities": {}, "clientInfo": {"name": "rmcp", "version": "3"}}),
    );
    assert_eq!(answer["result"]["protocolVersion"], json!("2025-11-25"));
    assert_eq!(answer["result"]["capabilities"], json!({"tools": {"listChanged": false}, "logging": {}}));
}

#[test]
fn both_eras_interleaved_on_one_connection() {
    let mut wire = wire();
    wire.initialize();
    for round in 0..3 {
        let id = |n: i64| json!(round * 10 + n);
        wire.send_request(Era::Modern, id(1), "tools/call", json!({"name": "echo", "arguments": {"text": "m"}}));
        let modern = wire.recv();
        wire.send_request(Era::Legacy, id(2), "tools/call", json!({"name": "echo", "arguments": {"text": "l"}}));
        let legacy = wire.recv();
        assert_eq!(modern["result"]["resultType"], json!("complete"), "{modern}");
        assert!(modern["result"]["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());
        assert!(legacy["result"].get("resultType").is_none(), "{legacy}");
        assert_eq!(modern["result"]["structuredContent"]["result"]["text"], json!("m"));
        assert_eq!(legacy["result"]["structuredContent"]["result"]["text"], json!("l"));
    }
}

#[test]
fn tool_calls_answer_by_outcome() {
    let mut wire = wire();
    let done = wire.request(
        Era::Modern,
        json!(1),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "ab", "times": 2, "price": {"amount": "35", "currency": "USD"}}}),
    );
    let result = &done["result"];
    assert_eq!(result["isError"], json!(false));
    assert_eq!(
        result["structuredContent"]["result"],
        json!({"text": "abab", "tags": [], "price": {"amount": "35.00", "currency": "USD"}})
    );
    assert_eq!(text_of(&done), serde_json::to_string(&result["structuredContent"]["result"]).unwrap());

    // Every bad argument at once, each with its path.
    let refused = wire.request(
        Era::Modern,
        json!(2),
        "tools/call",
        json!({"name": "echo", "arguments": {"times": "x", "tags": [1, "a", 2], "price": {"amount": "1.234", "currency": "USD"}, "extra": 0}}),
    );
    assert_eq!(refused["result"]["isError"], json!(true));
    let text = text_of(&refused);
    for path in ["$.extra", "$.text: is required", "$.times", "$.tags[0]", "$.tags[2]", "$.price.amount"] {
        assert!(text.contains(path), "{path} missing from {text}");
    }
    // The same problems for programs, each with its path, under `_meta` (never in
    // `structuredContent`, which must match the output schema).
    assert!(refused["result"].get("structuredContent").is_none(), "{refused}");
    let structured = &refused["result"]["_meta"]["dev.warden/invalid-arguments"];
    let paths: Vec<&str> =
        structured["problems"].as_array().unwrap().iter().map(|p| p["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["$.extra", "$.text", "$.times", "$.tags[0]", "$.tags[2]", "$.price.amount"], "{structured}");
    assert_eq!(structured["problems"][1]["problem"], json!("is required"));
    assert_eq!(structured["omitted"], json!(0));
    // In the 2025-11-25 era too.
    wire.initialize();
    let legacy = wire.request(Era::Legacy, json!(22), "tools/call", json!({"name": "echo", "arguments": {"times": 1}}));
    assert_eq!(legacy["result"]["_meta"]["dev.warden/invalid-arguments"]["problems"][0]["path"], json!("$.text"));

    let budget = wire.request(Era::Modern, json!(3), "tools/call", json!({"name": "spin"}));
    assert_eq!(budget["result"]["isError"], json!(true));
    assert!(text_of(&budget).starts_with("budget: "), "{budget}");

    let invalid = wire.request(Era::Modern, json!(4), "tools/call", json!({"name": "bad_result"}));
    assert_eq!(invalid["result"]["isError"], json!(true));
    assert!(text_of(&invalid).contains("does not match the type annotation `int` for return type"), "{invalid}");

    wire.send_request(Era::Modern, json!(5), "tools/call", json!({"name": "no_such_tool"}));
    let unknown = wire.expect_error(-32602, Some(json!(5)));
    assert!(unknown["error"]["message"].as_str().unwrap().contains("Unknown tool"));

    wire.send_request(Era::Modern, json!(6), "tools/call", json!({"name": "echo", "arguments": [1]}));
    wire.expect_error(-32602, Some(json!(6)));
}

#[test]
fn a_result_over_one_mebibyte_is_not_sent() {
    let mut wire = wire();
    let big = wire.request(
        Era::Modern,
        json!(1),
        "tools/call",
        json!({"name": "big_result", "arguments": {"size": 1_100_000}}),
    );
    assert_eq!(big["result"]["isError"], json!(true));
    let text = text_of(&big);
    assert!(text.contains("over the limit of 1048576 bytes") && text.contains("run "), "{text}");
    let small =
        wire.request(Era::Modern, json!(2), "tools/call", json!({"name": "big_result", "arguments": {"size": 1000}}));
    assert_eq!(small["result"]["isError"], json!(false));
}

#[test]
fn cancellation_before_the_run_starts_stops_it_and_nothing_is_sent() {
    let mut wire = wire();
    wire.initialize();
    let call = Wire::request_message(
        Era::Legacy,
        json!("c1"),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "never-run"}}),
    );
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c1", "reason": "test"}});
    // One write, so both lines are read before the call's task first runs.
    let mut bytes = serde_json::to_vec(&call).unwrap();
    bytes.push(b'\n');
    bytes.extend(serde_json::to_vec(&cancel).unwrap());
    bytes.push(b'\n');
    wire.expect_era(&json!("c1"), Era::Legacy, "tools/call");
    wire.send_raw(&bytes);
    wire.assert_serving(2);
    let done =
        wire.request(Era::Legacy, json!(3), "tools/call", json!({"name": "echo", "arguments": {"text": "after"}}));
    assert_eq!(done["result"]["isError"], json!(false));
    wire.close_stdin();
    assert!(wire.wait_exit(Duration::from_secs(20)).success());
    assert!(wire.drain().is_empty(), "something was sent for the cancelled call");
    let stderr = wire.stderr();
    assert!(stderr.contains("cancelled before its run started"), "{stderr}");
    assert!(!stderr.contains("never-run"), "the cancelled call ran:\n{stderr}");
}

#[test]
fn a_program_that_prints_and_stray_stdout_writes_never_reach_the_protocol_stream() {
    let mut wire = Wire::start_with(&fixture("wire/manifest.json"), &[("WARDEN_SELF_TEST_STDOUT", "1")]);
    wire.initialize();
    let answer = wire.request(
        Era::Legacy,
        json!(1),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "printed-text"}}),
    );
    assert_eq!(answer["result"]["isError"], json!(false));
    wire.close_stdin();
    assert!(wire.wait_exit(Duration::from_secs(20)).success());
    assert!(wire.drain().is_empty());
    let stderr = wire.stderr();
    assert!(stderr.contains("echo says: printed-text"), "{stderr}");
    assert!(stderr.contains("stray line from println!"), "{stderr}");
    assert!(stderr.contains("stray line from write(1, ...)"), "{stderr}");
}

#[test]
fn eof_in_the_middle_of_a_request_exits_promptly() {
    let mut wire = wire();
    wire.initialize();
    wire.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/ca");
    wire.close_stdin();
    assert!(wire.wait_exit(Duration::from_secs(10)).success());
    assert!(wire.drain().is_empty());
    assert!(wire.stderr().contains("stdin closed in the middle of a line"), "{}", wire.stderr());
}

#[test]
fn a_client_that_stops_reading_makes_the_server_exit() {
    let mut wire = Wire::start_deaf(&fixture("wire/manifest.json"));
    // Answers now fail to write: the server must stop reading and exit on its own.
    for id in 1..=3 {
        let call = Wire::request_message(Era::Legacy, json!(id), "ping", Value::Null);
        let mut line = serde_json::to_vec(&call).unwrap();
        line.push(b'\n');
        wire.try_send_raw(&line);
    }
    let status = wire.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    assert!(wire.stderr().contains("the client is gone"), "{}", wire.stderr());
}

#[test]
fn the_schema_check_itself_rejects_invalid_messages() {
    let null_id = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}});
    let no_result_type = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}});
    let no_cache_hints = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete", "tools": []}});
    for (message, era, method) in [
        (null_id, Era::Legacy, None),
        (no_result_type, Era::Modern, Some("tools/call")),
        (no_cache_hints, Era::Modern, Some("tools/list")),
    ] {
        let outcome = std::panic::catch_unwind(|| common::assert_valid(&message, era, method));
        assert!(outcome.is_err(), "{message} was accepted under {era:?}");
    }
}

/// A program returning content (`-> list[content]`, made with the `mcp` builtins) is listed
/// without an output schema and answered with its blocks; bad base64 fails the run.
#[test]
fn content_results_are_answered_as_blocks_in_both_eras() {
    let mut wire = wire();
    let listed = wire.request(Era::Modern, json!(1), "tools/list", json!({}));
    let picture =
        listed["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "picture").unwrap().clone();
    assert!(picture.get("outputSchema").is_none(), "{picture}");
    let answer = wire.request(Era::Modern, json!(2), "tools/call", json!({"name": "picture"}));
    let result = &answer["result"];
    assert_eq!(result["isError"], json!(false), "{answer}");
    assert!(result.get("structuredContent").is_none());
    let types: Vec<&str> = result["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["text", "image", "resource_link", "resource"]);
    assert_eq!(result["content"][1], json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}));
    wire.initialize();
    let legacy = wire.request(Era::Legacy, json!(3), "tools/call", json!({"name": "picture"}));
    assert_eq!(legacy["result"]["content"][2]["uri"], json!("ticket://3"));
    let bad = wire.request(
        Era::Modern,
        json!(4),
        "tools/call",
        json!({"name": "picture", "arguments": {"data": "not base64!"}}),
    );
    assert_eq!(bad["result"]["isError"], json!(true));
    assert!(text_of(&bad).contains("mcp.image: the data is not base64"), "{bad}");
}

/// A program's `progress(...)` reaches a client that asked; once the call is cancelled,
/// nothing more is sent for it, neither progress nor an answer.
#[test]
fn progress_reports_stop_at_a_cancellation() {
    let mut wire = wire();
    let heard = |wire: &mut Wire, id: i64| -> Vec<Value> {
        let mut heard = Vec::new();
        loop {
            let message = wire.recv();
            if message["id"] == json!(id) {
                return heard;
            }
            heard.push(message);
        }
    };
    let meta = json!({"progressToken": "p", "io.modelcontextprotocol/logLevel": "info"});
    wire.send_request(
        Era::Modern,
        json!(1),
        "tools/call",
        json!({"name": "counting", "arguments": {"rounds": 3}, "_meta": meta}),
    );
    let reports: Vec<String> =
        heard(&mut wire, 1).iter().filter_map(|m| m["params"]["message"].as_str().map(str::to_string)).collect();
    assert_eq!(reports[1..], ["1 of 3: round done", "2 of 3: round done", "3 of 3: round done"], "{reports:?}");

    wire.send_request(
        Era::Modern,
        json!(2),
        "tools/call",
        json!({"name": "counting", "_meta": {"progressToken": "q"}}),
    );
    let started = wire.recv();
    assert!(started["params"]["message"].as_str().unwrap().ends_with(" started"), "{started}");
    wire.send_line(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}));
    wire.close_stdin();
    assert!(wire.wait_exit(Duration::from_secs(30)).success());
    let after = wire.drain();
    assert!(after.is_empty(), "sent after the cancellation: {after:?}");
    assert!(wire.stderr().contains("the call was cancelled while running"), "{}", wire.stderr());
}
