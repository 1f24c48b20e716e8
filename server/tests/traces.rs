//! Issue 25 item 3: traces over OTLP. A request carrying a W3C `traceparent` in its `_meta` (a
//! tool call, a resource read, a prompt) gets a span continuing that trace, with a run, each
//! action and each durable write as spans below it, exported as OTLP/HTTP JSON to a receiver
//! this test runs on loopback and decodes.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7"; // the HTTP test's

/// An OTLP/HTTP receiver on loopback: every request's body, kept.
fn receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let received = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&received);
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                line.clear();
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            kept.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
            let mut stream = stream;
            let _ =
                stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}");
        }
    });
    (format!("http://{address}"), received)
}

/// Every span received: (name, traceId, spanId, parentSpanId, attributes by key).
fn spans(received: &[Value]) -> Vec<(String, String, String, String, Value)> {
    let mut all = Vec::new();
    for export in received {
        for resource in export["resourceSpans"].as_array().into_iter().flatten() {
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    let attributes: serde_json::Map<String, Value> = (span["attributes"].as_array().into_iter())
                        .flatten()
                        .map(|a| (a["key"].as_str().unwrap().to_string(), a["value"].clone()))
                        .collect();
                    let text = |key: &str| span[key].as_str().unwrap_or_default().to_string();
                    all.push((
                        text("name"),
                        text("traceId"),
                        text("spanId"),
                        text("parentSpanId"),
                        Value::Object(attributes),
                    ));
                }
            }
        }
    }
    all
}

/// The support desk's requests over stdio, each with its own `traceparent` (parent span id
/// `0000000000000001` for the first, and so on), then stdin closed: every span exported.
fn desk_requests_traced(requests: &[(&str, Value)]) -> Vec<(String, String, String, String, Value)> {
    let (endpoint, received) = receiver();
    let dir = common::private_copy(&common::repo_root().join("examples/support-desk"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("mcp")
        .arg(dir.path().join("manifest.json"))
        .args(["--otlp-endpoint", &endpoint])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for (index, (method, params)) in requests.iter().enumerate() {
        let mut params = params.clone();
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}, "traceparent": format!("00-{TRACE_ID}-{:016x}-01", index + 1)});
        writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": index + 1, "method": method, "params": params})).unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let answers = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(answers.lines().filter(|line| line.contains("\"result\"")).count(), requests.len(), "{answers}");
    let exported = spans(&received.lock().unwrap());
    exported
}

#[test]
fn a_call_continues_its_callers_trace_with_a_span_per_run_action_and_durable_write() {
    let spans =
        desk_requests_traced(&[("tools/call", json!({"name": "search_tickets", "arguments": {"query": "refund"}}))]);
    let named = |name: &str| spans.iter().filter(|s| s.0 == name).cloned().collect::<Vec<_>>();
    let call_span = named("tools/call").pop().unwrap_or_else(|| panic!("no tools/call span in {spans:?}"));
    assert_eq!((call_span.1.as_str(), call_span.3.as_str()), (TRACE_ID, "0000000000000001"), "{call_span:?}");
    assert_eq!(call_span.4["tool"]["stringValue"], "search_tickets", "{call_span:?}");
    assert_eq!(call_span.4["outcome"]["stringValue"], "done", "{call_span:?}");
    let run = named("run").pop().expect("a run span");
    assert_eq!((run.1.as_str(), run.3.as_str()), (TRACE_ID, call_span.2.as_str()), "{run:?}");
    let actions = named("action");
    assert_eq!(actions.len(), 1, "one span per action: {spans:?}");
    let action = &actions[0];
    assert_eq!((action.1.as_str(), action.3.as_str()), (TRACE_ID, run.2.as_str()), "{action:?}");
    assert_eq!(action.4["kind"]["stringValue"], "db.sqlite", "{action:?}");
    assert_eq!(action.4["in_doubt"]["boolValue"], false, "{action:?}");
    for durable in ["journal.append", "ledger.fsync"] {
        let written = named(durable);
        assert!(written.iter().any(|s| s.1 == TRACE_ID), "no {durable} span in the call's trace: {spans:?}");
    }
}

/// A resource read and a prompt are requests with spans of their own, each continuing its
/// caller's trace; the read's program runs below its span.
#[test]
fn a_resource_read_and_a_prompt_each_continue_their_callers_trace() {
    let spans = desk_requests_traced(&[
        ("resources/read", json!({"uri": "ticket://2"})),
        ("prompts/get", json!({"name": "triage", "arguments": {"ticket_id": "2"}})),
    ]);
    let only = |name: &str| {
        let named: Vec<_> = spans.iter().filter(|s| s.0 == name).collect();
        assert_eq!(named.len(), 1, "one {name} span: {spans:?}");
        named[0].clone()
    };
    let read = only("resources/read");
    assert_eq!((read.1.as_str(), read.3.as_str()), (TRACE_ID, "0000000000000001"), "{read:?}");
    assert_eq!(read.4["uri"]["stringValue"], "ticket://2", "{read:?}");
    let program = only("tools/call");
    assert_eq!((program.1.as_str(), program.3.as_str()), (TRACE_ID, read.2.as_str()), "{program:?}");
    let prompt = only("prompts/get");
    assert_eq!((prompt.1.as_str(), prompt.3.as_str()), (TRACE_ID, "0000000000000002"), "{prompt:?}");
    assert_eq!(prompt.4["prompt"]["stringValue"], "triage", "{prompt:?}");
}

/// Over HTTP, the request's `traceparent` header is the trace the call continues.
#[test]
fn an_http_request_s_traceparent_header_is_continued() {
    let (endpoint, received) = receiver();
    let dir = common::private_copy(&common::repo_root().join("examples/toolbox"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("serve-http")
        .arg(dir.path().join("manifest.json"))
        .args(["--listen", "127.0.0.1:0", "--otlp-endpoint", &endpoint])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let address: std::net::SocketAddr = loop {
        let line = lines.next().expect("the server logs where it listens").unwrap();
        if let Some((_, rest)) = line.split_once("warden: listening on http://") {
            break rest.strip_suffix("/mcp").unwrap().parse().unwrap();
        }
    };
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "text_stats", "arguments": {"text": "a b"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\n\
         mcp-name: text_stats\r\ntraceparent: 00-{TRACE_ID}-{PARENT_ID}-01\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // SIGTERM drains, and the exit sends the spans held.
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    assert!(child.wait().unwrap().success());
    let spans = spans(&received.lock().unwrap());
    let call = spans.iter().find(|s| s.0 == "tools/call").unwrap_or_else(|| panic!("no tools/call span: {spans:?}"));
    assert_eq!((call.1.as_str(), call.3.as_str()), (TRACE_ID, PARENT_ID), "{call:?}");
}
