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

/// An OTLP/HTTP receiver on loopback: every request's body, kept as OTLP's JSON form (a
/// protobuf body decoded with OpenTelemetry's own definitions), with its content type.
fn receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let received = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&received);
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut length, mut content_type) = (0usize, String::new());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                    if name.eq_ignore_ascii_case("content-type") {
                        content_type = value.trim().to_string();
                    }
                }
                line.clear();
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let mut export = match content_type.as_str() {
                "application/x-protobuf" => {
                    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
                    let decoded = <ExportTraceServiceRequest as prost::Message>::decode(body.as_slice()).unwrap();
                    serde_json::to_value(&decoded).unwrap()
                }
                _ => serde_json::from_slice(&body).unwrap_or(Value::Null),
            };
            export["contentType"] = json!(content_type);
            kept.lock().unwrap().push(export);
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

/// Every span received, as OTLP's JSON form writes it.
fn span_objects(received: &[Value]) -> Vec<Value> {
    let resources = received.iter().flat_map(|export| export["resourceSpans"].as_array().cloned().unwrap_or_default());
    let scopes = resources.flat_map(|resource| resource["scopeSpans"].as_array().cloned().unwrap_or_default());
    scopes.flat_map(|scope| scope["spans"].as_array().cloned().unwrap_or_default()).collect()
}

fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    let attributes = span["attributes"].as_array().unwrap();
    attributes.iter().find(|a| a["key"] == key).map_or(&Value::Null, |a| &a["value"])
}

/// The shop against the local payments service over stdio, each call with its own
/// `traceparent`, exported with `protocol` (`None`: the default); every export kept.
fn shop_calls_traced(protocol: Option<&str>, calls: &[Value]) -> (Vec<Value>, common::payments::Payments) {
    let (endpoint, received) = receiver();
    let payments = common::payments::Payments::start();
    let dir = payments.shop_with_a_short_deadline();
    let path = dir.path().join("manifest.json");
    let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
    command.arg("mcp").arg(&path).args(["--otlp-endpoint", &endpoint]).env("STRIPE_SECRET_KEY", "sk_test_TRACES_1");
    if let Some(protocol) = protocol {
        command.env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
    }
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut answers = BufReader::new(child.stdout.take().unwrap()).lines();
    // One call at a time, each answered before the next (an action in doubt waits out its
    // deadline), then stdin closed: every span exported at exit.
    for (index, arguments) in calls.iter().enumerate() {
        let params = json!({"name": "refund_order", "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
            "traceparent": format!("00-{TRACE_ID}-{:016x}-01", index + 1)}});
        writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": index + 1, "method": "tools/call", "params": params}))
            .unwrap();
        loop {
            let line = answers.next().expect("the server answers").unwrap();
            if serde_json::from_str::<Value>(&line).unwrap()["id"] == json!(index + 1) {
                break;
            }
        }
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let exports = received.lock().unwrap().clone();
    assert!(!String::from_utf8_lossy(&output.stderr).contains("sk_test_TRACES_1"));
    assert!(!serde_json::to_string(&exports).unwrap().contains("sk_test_TRACES_1"), "the secret in a span");
    (exports, payments)
}

/// Issue 46 item 4: protobuf by default (decoded with OpenTelemetry's own definitions), the
/// call a SERVER span continuing its caller's trace, each HTTP request an action sends a
/// CLIENT span with the HTTP client conventions' attributes, the service's request carrying
/// that span's `traceparent`; a failed run and an action in doubt marked ERROR.
#[test]
fn traces_say_what_a_backend_reads_and_reach_the_service_an_action_calls() {
    let (exports, payments) = shop_calls_traced(
        None,
        &[
            json!({"order": "pi_1001", "amount": {"amount": "12.50", "currency": "USD"}}),
            json!({"order": "pi_1003", "amount": {"amount": "50.00", "currency": "USD"}}),
            json!({"order": "pi_noanswer_7", "amount": {"amount": "1.00", "currency": "USD"}}),
        ],
    );
    assert!(exports.iter().all(|export| export["contentType"] == "application/x-protobuf"), "the default encoding");
    let spans = span_objects(&exports);
    let calls: Vec<&Value> = spans.iter().filter(|span| span["name"] == "tools/call").collect();
    assert_eq!(calls.len(), 3, "{spans:?}");
    let call_of = |n: u64| calls.iter().find(|span| span["parentSpanId"] == format!("{n:016x}")).unwrap();
    let (refunded, failed, in_doubt) = (call_of(1), call_of(2), call_of(3));
    assert_eq!(refunded["kind"], 2, "SERVER: {refunded}");
    assert_eq!(refunded["traceId"], TRACE_ID);
    assert_eq!(attribute(refunded, "rpc.method")["stringValue"], "tools/call");
    assert_ne!(refunded["status"]["code"], 2, "done is no error: {refunded}");
    assert_eq!(failed["status"]["code"], 2, "a failed run is an ERROR: {failed}");
    assert_eq!(in_doubt["status"]["code"], 2, "waiting for an operator is an ERROR: {in_doubt}");
    assert_eq!(attribute(in_doubt, "outcome")["stringValue"], "waiting_for_operator", "{in_doubt}");

    let below = |parent: &Value, name: &str| -> Vec<Value> {
        spans.iter().filter(|span| span["name"] == name && span["parentSpanId"] == parent["spanId"]).cloned().collect()
    };
    let run = below(refunded, "run").pop().expect("the run below its call");
    let actions = below(&run, "action");
    assert_eq!(actions.len(), 2, "the intent's lookup and the refund: {actions:?}");
    // Each HTTP request an action sends is a CLIENT span below it, named by its method.
    let requests: Vec<Value> =
        actions.iter().flat_map(|action| below(action, "GET").into_iter().chain(below(action, "POST"))).collect();
    assert_eq!(requests.len(), 3, "the lookup's GET, the refund's GET of the currency and its POST: {spans:#?}");
    for request in &requests {
        assert_eq!(request["kind"], 3, "CLIENT: {request}");
        assert_eq!(attribute(request, "server.address")["stringValue"], "127.0.0.1", "{request}");
        assert_eq!(attribute(request, "http.response.status_code")["intValue"], "200", "{request}");
    }
    let post = requests.iter().find(|request| request["name"] == "POST").unwrap();
    assert_eq!(attribute(post, "http.request.method")["stringValue"], "POST");
    let url = attribute(post, "url.full")["stringValue"].as_str().unwrap();
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/v1/refunds"), "{url}");
    // The service heard the refund's own request span as its parent.
    let expected = format!("00-{TRACE_ID}-{}-01", post["spanId"].as_str().unwrap());
    let seen = payments.ledger.lock().unwrap().requests.clone();
    let posted = seen.iter().find(|seen| seen.method == "POST" && seen.body.contains("pi_1001")).unwrap();
    assert_eq!(posted.headers.get("traceparent"), Some(&expected), "{posted:?}");
    assert!(seen.iter().all(|seen| seen.headers.get("traceparent").is_some_and(|t| t.contains(TRACE_ID))), "{seen:?}");

    let doubted = below(&below(in_doubt, "run").pop().unwrap(), "action");
    let doubted = doubted.iter().find(|a| attribute(a, "in_doubt")["boolValue"] == true).expect("an action in doubt");
    assert_eq!(doubted["status"]["code"], 2, "an action in doubt is an ERROR: {doubted}");
}

/// `OTEL_EXPORTER_OTLP_PROTOCOL=http/json` sends OTLP's JSON form; gRPC is refused at start,
/// naming what to set.
#[test]
fn the_standard_variable_chooses_json_and_grpc_is_refused() {
    let (exports, _) = shop_calls_traced(
        Some("http/json"),
        &[json!({"order": "pi_1001", "amount": {"amount": "1.00", "currency": "USD"}})],
    );
    assert!(!exports.is_empty() && exports.iter().all(|export| export["contentType"] == "application/json"));
    assert!(span_objects(&exports).iter().any(|span| span["name"] == "tools/call" && span["kind"] == 2));
    let refused = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["check", "--otlp-endpoint", "http://127.0.0.1:9", "/nonexistent/manifest.json"])
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("set it to http/protobuf"), "{refused:?}");
}
