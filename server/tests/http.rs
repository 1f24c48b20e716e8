//! `warden serve-http`, the real binary on a loopback port: both eras over Streamable HTTP,
//! the Host and Origin checks, the bearer token (never in any output), the limits. Every
//! JSON-RPC message the server answers is validated against its era's official schema.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{assert_valid, Era};
use serde_json::{json, Value};

const TOKEN: &str = "tok-7f3a9c21d4e8b6055a1f";

struct Server {
    _dir: tempfile::TempDir,
    child: Child,
    address: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    fn start(extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::start_in("examples/toolbox", extra, env)
    }

    /// A server of the bundled manifest in `folder` (a private copy).
    fn start_in(folder: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = common::private_copy(&common::repo_root().join(folder));
        let manifest = dir.path().join("manifest.json");
        let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
        command.arg("serve-http").arg(&manifest).args(["--listen", "127.0.0.1:0"]).args(extra);
        command.envs(env.iter().copied()).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let stderr = Arc::new(Mutex::new(String::new()));
        let address = loop {
            let line = lines.next().expect("the server logs where it listens").unwrap();
            stderr.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some(rest) = line.split_once("warden: listening on http://").map(|(_, rest)| rest) {
                break rest.strip_suffix("/mcp").unwrap().parse().unwrap();
            }
        };
        let kept = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Server { _dir: dir, child, address, stderr }
    }

    /// One request on a connection of its own: (status, headers, body).
    fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        self.send_within(Duration::from_secs(30), method, path, headers, body)
    }

    /// `send`, waiting at most `limit` for the answer (none: status 0).
    fn send_within(&self, limit: Duration, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let Ok(mut stream) = TcpStream::connect_timeout(&self.address, limit) else {
            return Answer::parse(b"");
        };
        stream.set_read_timeout(Some(limit)).unwrap();
        let mut request =
            format!("{method} {path} HTTP/1.1\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
        if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
            request.push_str(&format!("host: {}\r\n", self.address));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        // A server refusing from the headers alone may close before the body is all sent.
        let _ = stream.write_all(body);
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw);
        Answer::parse(&raw)
    }

    /// A JSON-RPC message POSTed with the headers given (and the JSON content type).
    fn post(&self, message: &Value, headers: &[(&str, &str)]) -> Answer {
        let mut all = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
        all.extend_from_slice(headers);
        self.send("POST", "/mcp", &all, message.to_string().as_bytes())
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

/// A streamed answer read as it arrives: its status and headers, then one SSE event at a time
/// out of the chunked body.
struct EventStream {
    reader: BufReader<TcpStream>,
    status: u16,
    headers: Vec<(String, String)>,
    pending: String,
}

/// One SSE event: its id (if any) and its data.
#[derive(Debug)]
struct Event {
    id: Option<String>,
    data: String,
}

impl EventStream {
    /// Sends a request and reads the answer's head.
    fn open(server: &Server, method: &str, headers: &[(&str, &str)], body: &[u8]) -> EventStream {
        let mut stream = TcpStream::connect(server.address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut request =
            format!("{method} /mcp HTTP/1.1\r\nhost: {}\r\ncontent-length: {}\r\n", server.address, body.len());
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        let mut reader = BufReader::new(stream);
        let mut status_line = String::new();
        reader.read_line(&mut status_line).unwrap();
        let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap();
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
        EventStream { reader, status, headers, pending: String::new() }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The next event carrying data (comments skipped); none at the end of the body.
    fn next_event(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.pending.find("\n\n") {
                let block: String = self.pending.drain(..end + 2).collect();
                let field = |name: &str| {
                    block.lines().find_map(|line| line.strip_prefix(name)).map(|value| value.trim_start().to_string())
                };
                if let Some(data) = field("data:") {
                    return Some(Event { id: field("id:"), data });
                }
                continue;
            }
            let mut size = String::new();
            if self.reader.read_line(&mut size).ok()? == 0 {
                return None;
            }
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            if size == 0 {
                return None;
            }
            let mut chunk = vec![0u8; size + 2];
            self.reader.read_exact(&mut chunk).ok()?;
            self.pending.push_str(&String::from_utf8_lossy(&chunk[..size]));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    /// An answer read back; none (a connection closed or timed out first) is status 0.
    fn parse(raw: &[u8]) -> Answer {
        let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
            return Answer { status: 0, headers: Default::default(), body: raw.to_vec() };
        };
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers = lines
            .map(|line| {
                let (name, value) = line.split_once(':').unwrap();
                (name.trim().to_ascii_lowercase(), value.trim().to_string())
            })
            .collect();
        Answer { status, headers, body: raw[split + 4..].to_vec() }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn modern_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}})
}

fn modern_call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments, "_meta": modern_meta()}})
}

#[test]
fn a_2026_request_is_answered_when_its_headers_match_its_body() {
    let server = Server::start(&[], &[]);
    let call = modern_call(1, "split_bill", json!({"total": {"amount": "10.00", "currency": "EUR"}, "people": 4}));
    let answer = server.post(&call, &[("mcp-method", "tools/call"), ("mcp-name", "split_bill")]);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let message = answer.json();
    assert_valid(&message, Era::Modern, Some("tools/call"));
    assert_eq!(message["result"]["isError"], json!(false), "{message}");

    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": modern_meta()}});
    let answer = server.post(&list, &[("mcp-method", "tools/list")]);
    assert_eq!(answer.status, 200);
    assert_valid(&answer.json(), Era::Modern, Some("tools/list"));

    // Outside a session, an error answer carries an HTTP status: 404 for an unknown method, 400
    // for an unsupported version or a version header that is not the envelope's.
    let unknown = json!({"jsonrpc": "2.0", "id": 3, "method": "no/such", "params": {"_meta": modern_meta()}});
    let answer = server.post(&unknown, &[("mcp-method", "no/such")]);
    assert_eq!((answer.status, answer.json()["error"]["code"].clone()), (404, json!(-32601)));
    let mut future = list.clone();
    future["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let answer = server.post(&future, &[("mcp-method", "tools/list")]);
    assert_eq!((answer.status, answer.json()["error"]["code"].clone()), (400, json!(-32022)));
    let answer = server.post(&list, &[("mcp-method", "tools/list"), ("mcp-protocol-version", "2099-01-01")]);
    assert_eq!((answer.status, answer.json()["error"]["code"].clone()), (400, json!(-32020)));

    for (headers, says) in [
        (vec![], "needs the Mcp-Method header"),
        (vec![("mcp-method", "tools/list")], "does not match the body's method"),
        (vec![("mcp-method", "tools/call")], "needs the Mcp-Name header"),
        (vec![("mcp-method", "tools/call"), ("mcp-name", "text_stats")], "does not match the body's name"),
    ] {
        let answer = server.post(&call, &headers);
        assert_eq!(answer.status, 400, "{headers:?}");
        let message = answer.json();
        assert_valid(&message, Era::Modern, None);
        assert_eq!(message["error"]["code"], json!(-32020), "{message}");
        assert!(message["error"]["message"].as_str().unwrap().contains(says), "{message}");
    }
}

#[test]
fn a_2025_session_opens_with_initialize_and_ends_with_delete() {
    let server = Server::start(&[], &[]);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}});
    let answer = server.post(&initialize, &[]);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_valid(&answer.json(), Era::Legacy, Some("initialize"));
    let session = answer.header("mcp-session-id").expect("a session id").to_string();
    assert!(session.len() >= 32 && session.bytes().all(|b| b.is_ascii_hexdigit()), "{session}");

    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(server.post(&initialized, &[("mcp-session-id", &session)]).status, 202);

    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let outside = server.post(&list, &[]);
    assert_eq!(outside.status, 400, "a legacy request needs its session");
    let refusal = outside.json();
    assert_valid(&refusal, Era::Legacy, None);
    assert_eq!((refusal["id"].clone(), refusal["error"]["code"].clone()), (json!(2), json!(-32602)), "{refusal}");
    assert_eq!(server.post(&list, &[("mcp-session-id", "00000000000000000000000000000000")]).status, 404);
    let answer = server.post(&list, &[("mcp-session-id", &session)]);
    assert_eq!(answer.status, 200);
    assert_valid(&answer.json(), Era::Legacy, Some("tools/list"));

    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "text_stats", "arguments": {"text": "one two two"}}});
    let answer = server.post(&call, &[("mcp-session-id", &session)]);
    assert_eq!(answer.status, 200);
    let message = answer.json();
    assert_valid(&message, Era::Legacy, Some("tools/call"));
    assert_eq!(message["result"]["structuredContent"]["result"]["words"], json!(3), "{message}");

    // A second initialize in the session is refused; a new session is another initialize.
    let ended = server.send("DELETE", "/mcp", &[("mcp-session-id", &session)], b"");
    assert_eq!(ended.status, 204);
    assert_eq!(server.post(&list, &[("mcp-session-id", &session)]).status, 404, "the session ended");
}

#[test]
fn dns_rebinding_is_refused() {
    let server = Server::start(&[], &[]);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}});
    let modern = [("mcp-method", "tools/list")];
    let refused = server.post(&list, &[modern[0], ("host", "evil.example")]);
    assert_eq!(refused.status, 403);
    assert!(refused.text().contains("Host"), "{}", refused.text());
    let refused = server.post(&list, &[modern[0], ("host", "localhost.evil.example:80")]);
    assert_eq!(refused.status, 403);
    let refused = server.post(&list, &[modern[0], ("origin", "http://evil.example")]);
    assert_eq!(refused.status, 403);
    assert!(refused.text().contains("Origin"), "{}", refused.text());
    let origin = format!("http://localhost:{}", server.address.port());
    assert_eq!(server.post(&list, &[modern[0], ("origin", &origin)]).status, 200);
    assert_eq!(server.post(&list, &[modern[0], ("host", "localhost")]).status, 200);
}

#[test]
fn listening_beyond_loopback_needs_a_token() {
    let dir = common::private_copy(&common::repo_root().join("examples/toolbox"));
    let manifest = dir.path().join("manifest.json");
    let output = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("serve-http")
        .arg(&manifest)
        .args(["--listen", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ne!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("listening beyond loopback needs authentication"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
    assert!(!dir.path().join("journals").exists(), "refused before anything was opened");

    // A token too short is refused too, without showing it.
    let output = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("serve-http")
        .arg(&manifest)
        .args(["--listen", "127.0.0.1:0", "--bearer-token-env", "WARDEN_SHORT_TOKEN"])
        .env("WARDEN_SHORT_TOKEN", "short-secret")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ne!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("a token must have at least 16"), "{stderr}");
    assert!(!stderr.contains("short-secret"), "{stderr}");
    let long_token = "t".repeat(9 * 1024);
    let output = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("serve-http")
        .arg(&manifest)
        .args(["--listen", "127.0.0.1:0", "--bearer-token-env", "WARDEN_LONG_TOKEN"])
        .env("WARDEN_LONG_TOKEN", &long_token)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("a token has at most 8192"), "{stderr}");
}

#[test]
fn a_bearer_token_is_required_and_never_in_any_output() {
    let server = Server::start(&["--bearer-token-env", "WARDEN_TEST_TOKEN"], &[("WARDEN_TEST_TOKEN", TOKEN)]);
    let call = modern_call(1, "text_stats", json!({"text": format!("the token is {TOKEN}")}));
    let modern = [("mcp-method", "tools/call"), ("mcp-name", "text_stats")];
    let mut bodies = Vec::new();
    for authorization in [None, Some("Bearer wrong-token-0123456789".to_string()), Some(format!("Basic {TOKEN}"))] {
        let mut headers = modern.to_vec();
        if let Some(value) = &authorization {
            headers.push(("authorization", value));
        }
        let refused = server.post(&call, &headers);
        assert_eq!(refused.status, 401, "{authorization:?}");
        assert_eq!(refused.header("www-authenticate"), Some("Bearer realm=\"warden\""));
        bodies.push(refused.text());
    }
    let bearer = format!("Bearer {TOKEN}");
    let mut headers = modern.to_vec();
    headers.push(("authorization", &bearer));
    let answer = server.post(&call, &headers);
    assert_eq!(answer.status, 200, "{}", answer.text());
    let message = answer.json();
    assert_valid(&message, Era::Modern, Some("tools/call"));
    // The token as an argument is refused before anything runs: the journal would hold it
    // scrubbed while the program saw it, and the run could never replay.
    assert_eq!(message["result"]["isError"], json!(true), "{message}");
    assert!(answer.text().contains("keeps secret"), "{message}");
    bodies.push(answer.text());
    let plain_call = modern_call(2, "text_stats", json!({"text": "no secret here"}));
    let answer = server.post(&plain_call, &headers);
    assert_eq!(answer.json()["result"]["isError"], json!(false), "{}", answer.text());
    // No output holds the token, in any form.
    for body in bodies.iter().chain([&server.stderr()]) {
        assert!(!body.contains(TOKEN), "the token leaked: {body}");
    }
    let journals = server._dir.path().join("journals");
    for entry in common::walk(&journals) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(TOKEN), "the token is in {}", entry.display());
    }
}

/// A refused request's path is logged, and a path can carry anything, the token too (a
/// client that put it in the URL, written as is or percent-encoded): the log is scrubbed of
/// it in one place, whatever line carries it (issue 45 item 5).
#[test]
fn a_token_in_a_refused_requests_path_is_never_logged() {
    let server = Server::start(&["--bearer-token-env", "WARDEN_TEST_TOKEN"], &[("WARDEN_TEST_TOKEN", TOKEN)]);
    let encoded: String = TOKEN.bytes().map(|byte| format!("%{byte:02X}")).collect();
    let long = format!("/{}/{TOKEN}", "x".repeat(180));
    for path in [format!("/mcp/{TOKEN}"), format!("/mcp?token={encoded}"), long] {
        let refused = server.send("GET", &path, &[], b"");
        assert!(refused.status >= 400, "{path}: {}", refused.status);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.stderr().matches("HTTP 4").count() < 3 {
        assert!(std::time::Instant::now() < deadline, "the refusals were not logged: {}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = server.stderr();
    let decoded = log.replace(&encoded, TOKEN);
    assert!(!decoded.contains(TOKEN), "the token reached the log: {log}");
    // Nor a piece of it: a path cut to its first 200 characters after the token began.
    assert!(!decoded.contains(&TOKEN[..12]), "a piece of the token reached the log: {log}");
    // Each refusal names the client it refused.
    assert_eq!(log.matches(" from 127.0.0.1: ").count(), 3, "{log}");
}

#[test]
fn limits_and_wrong_requests_get_clear_http_errors() {
    let server = Server::start(&[], &[]);
    assert_eq!(server.send("GET", "/other", &[], b"").status, 404);
    let get = server.send("GET", "/mcp", &[], b"");
    assert_eq!(get.status, 405);
    assert_eq!(get.header("allow"), Some("POST, GET, DELETE"));
    assert!(get.text().contains("Last-Event-ID"), "{}", get.text());
    assert_eq!(server.send("PUT", "/mcp", &[], b"").status, 405);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}});
    let plain = server.send("POST", "/mcp", &[("content-type", "text/plain")], list.to_string().as_bytes());
    assert_eq!(plain.status, 415);
    let answer = server.post(&json!([list]), &[("mcp-method", "tools/list")]);
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json()["error"]["code"], json!(-32600));
    let answer = server.send("POST", "/mcp", &[("content-type", "application/json")], b"{not json");
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json()["error"]["code"], json!(-32700));
    let mut huge = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"pad\":\"".to_vec();
    huge.resize(4 * 1024 * 1024 + 16, b'a');
    huge.extend_from_slice(b"\"}");
    let answer = server.send("POST", "/mcp", &[("content-type", "application/json")], &huge);
    assert_eq!(answer.status, 413, "{}", answer.text());
    // The listener's own refusal is logged as the handler's are, naming the client.
    let logged = server.stderr();
    let line = logged.lines().find(|line| line.contains("HTTP 413 to POST /mcp from 127.0.0.1"));
    assert!(line.is_some_and(|line| line.contains("the request body is over the limit")), "{logged}");
    // Headers over 64 KiB are refused before anything reads them.
    let long = "a".repeat(70 * 1024);
    assert_eq!(server.send("POST", "/mcp", &[("x-padding", &long)], b"").status, 431);
    // The server goes on serving.
    assert_eq!(server.post(&list, &[("mcp-method", "tools/list")]).status, 200);
}

/// Headers decide before a body is read: a request refused by its Host or its credentials
/// is answered at once, though its body never comes (nor a `100 Continue`).
#[test]
fn a_refused_request_is_answered_before_its_body() {
    let server = Server::start(&["--bearer-token-env", "WARDEN_TEST_TOKEN"], &[("WARDEN_TEST_TOKEN", TOKEN)]);
    for (host, expect, want) in [("evil.example", "", 403), ("localhost", "expect: 100-continue\r\n", 401)] {
        let mut stream = TcpStream::connect(server.address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n{expect}content-length: 1000\r\nconnection: close\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        let answer = Answer::parse(&raw);
        assert_eq!(answer.status, want, "{host}: {}", answer.text());
    }
}

#[test]
fn http_semantics_are_strict() {
    let server = Server::start(&[], &[]);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}});
    let headers = [("mcp-method", "tools/list")];
    // Two Host headers, an absolute-form target naming another host.
    let twice = server.post(&list, &[headers[0], ("host", "localhost"), ("host", "127.0.0.1")]);
    assert_eq!(twice.status, 400, "{}", twice.text());
    // The media type exactly; an Accept that takes only a stream gets one.
    let body = list.to_string();
    let jsonx = server.send("POST", "/mcp", &[("content-type", "application/jsonx"), headers[0]], body.as_bytes());
    assert_eq!(jsonx.status, 415);
    let refused = server.send(
        "POST",
        "/mcp",
        &[("content-type", "application/json"), ("accept", "application/json;q=0"), headers[0]],
        body.as_bytes(),
    );
    assert_eq!(refused.status, 406);
    let stream = server.send(
        "POST",
        "/mcp",
        &[("content-type", "application/json; charset=utf-8"), ("accept", "text/event-stream"), headers[0]],
        body.as_bytes(),
    );
    assert_eq!((stream.status, stream.header("content-type")), (200, Some("text/event-stream")));
    let data = stream.text();
    let line = data.lines().find_map(|line| line.strip_prefix("data: ")).expect("an event");
    assert_valid(&serde_json::from_str(line).unwrap(), Era::Modern, Some("tools/list"));
    // What is not a JSON-RPC message is refused as over stdio.
    for (body, code) in [(json!({}), -32600), (json!({"jsonrpc": "2.0", "id": 1, "method": 5}), -32600)] {
        let answer = server.post(&body, &headers);
        assert_eq!(answer.status, 400, "{body}");
        let message = answer.json();
        assert_valid(&message, Era::Modern, None);
        assert_eq!(message["error"]["code"], json!(code), "{message}");
    }
    // A client that half-closes after its request still gets the answer.
    let mut stream = TcpStream::connect(server.address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\nmcp-method: tools/list\r\ncontent-length: {}\r\n\r\n{body}",
        server.address,
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    assert_eq!(Answer::parse(&raw).status, 200);
}

/// Issue 23 item 7: a routing or authorising header sent twice is refused with 400, as a
/// repeated Host is: a gateway that reads the last value must not see another tool than the
/// one checked against the body.
#[test]
fn a_repeated_routing_header_is_refused() {
    let server = Server::start(&[], &[]);
    let call = modern_call(1, "convert_length", json!({"value": 1, "from_unit": "km", "to_unit": "m"}));
    let method = ("mcp-method", "tools/call");
    let name = ("mcp-name", "convert_length");
    let version = ("mcp-protocol-version", "2026-07-28");
    let once = server.post(&call, &[method, name, version]);
    assert_eq!(once.status, 200, "{}", once.text());
    for twice in [
        [method, ("mcp-method", "tools/list"), name, version],
        [method, name, ("mcp-name", "always_fails"), version],
        [method, name, version, ("mcp-protocol-version", "2025-11-25")],
    ] {
        let answer = server.post(&call, &twice);
        assert_eq!(answer.status, 400, "{twice:?}: {}", answer.text());
        assert!(answer.text().contains("more than one"), "{}", answer.text());
    }
}

/// A request line and headers announcing a body that never comes.
fn withheld_body(server: &Server, from: Option<std::net::IpAddr>) -> TcpStream {
    let mut stream = connect_from(server, from);
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\nmcp-method: tools/list\r\ncontent-length: 1000\r\n\r\n{{",
        server.address
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

/// A connection to the server from the loopback address `from` (the default one if none).
fn connect_from(server: &Server, from: Option<std::net::IpAddr>) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    if let Some(from) = from {
        socket.bind(&SocketAddr::new(from, 0).into()).unwrap();
    }
    socket.connect(&server.address.into()).unwrap();
    socket.into()
}

fn tools_list(server: &Server, limit: Duration) -> u16 {
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}});
    let body = list.to_string();
    let headers = [("content-type", "application/json"), ("mcp-method", "tools/list")];
    server.send_within(limit, "POST", "/mcp", &headers, body.as_bytes()).status
}

/// Issue 23 item 5: clients that send their headers and withhold the body hold only what they
/// sent: nobody waits behind them. Before, 16 of them held every body-read permit for 30 s.
#[test]
fn clients_withholding_their_bodies_slow_only_themselves() {
    let server = Server::start(&[], &[]);
    let slow: Vec<TcpStream> = (0..24).map(|_| withheld_body(&server, None)).collect();
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..3 {
        assert_eq!(tools_list(&server, Duration::from_secs(10)), 200, "a normal request waited behind slow bodies");
    }
    // A body that stops arriving is ended, not waited on for the whole body time.
    let mut stalled = slow.into_iter().next().unwrap();
    stalled.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut raw = Vec::new();
    let _ = stalled.read_to_end(&mut raw);
    let answer = Answer::parse(&raw);
    assert_eq!(answer.status, 408, "{}", answer.text());
    assert!(answer.text().contains("stopped arriving"), "{}", answer.text());
}

/// Issue 23 item 6: connections that send nothing do not lock everyone out before
/// authentication: at the cap, the oldest one that has sent no request is closed for a new
/// one, and one peer address holds at most its share.
#[test]
fn idle_connections_do_not_lock_other_clients_out() {
    let server = Server::start(&[], &[]);
    let other = Some("127.0.0.2".parse().unwrap());
    let mut idle: Vec<TcpStream> = (0..300).map(|_| connect_from(&server, other)).collect();
    std::thread::sleep(Duration::from_millis(300));
    for round in 0..22 {
        // The idle client keeps re-opening what was closed.
        idle.push(connect_from(&server, other));
        assert_eq!(tools_list(&server, Duration::from_secs(10)), 200, "request {round} was not answered");
    }
    drop(idle);
}

/// Issue 46 item 5: a connection the listener closes at once (its address holds its share of
/// the table with requests in flight) is logged naming the address, once for a burst.
#[test]
fn connections_closed_at_once_are_logged_once_for_a_burst() {
    let server = Server::start(&[], &[]);
    let from = Some("127.0.0.3".parse().unwrap());
    let held: Vec<TcpStream> = (0..64).map(|_| withheld_body(&server, from)).collect();
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let mut closed = connect_from(&server, from);
        closed.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut nothing = Vec::new();
        let _ = closed.read_to_end(&mut nothing);
        assert!(nothing.is_empty(), "closed without an answer");
    }
    assert_eq!(tools_list(&server, Duration::from_secs(10)), 200, "another address is served");
    let logged = server.stderr();
    let line = "a connection from 127.0.0.3 was closed at once";
    assert_eq!(logged.matches(line).count(), 1, "one line for the burst: {logged}");
    drop(held);
}

/// The review of issue 23 item 6: a connection whose requests were only refused (no token)
/// earns no place: at the cap, it is closed for a client that may be served. 256 refused
/// connections from four addresses fill every place; a request with the token from a fifth is
/// answered.
#[test]
fn connections_only_refused_do_not_keep_their_place() {
    let server = Server::start(&["--bearer-token-env", "WARDEN_TEST_TOKEN"], &[("WARDEN_TEST_TOKEN", TOKEN)]);
    let list =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}}).to_string();
    let mut refused = Vec::new();
    for peer in 2..=5 {
        for _ in 0..64 {
            let mut stream = connect_from(&server, Some(format!("127.0.0.{peer}").parse().unwrap()));
            let request = format!(
                "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\nmcp-method: tools/list\r\ncontent-length: {}\r\n\r\n{list}",
                server.address,
                list.len()
            );
            stream.write_all(request.as_bytes()).unwrap();
            refused.push(stream);
        }
    }
    // Each got its 401 and stays open (keep-alive).
    for stream in refused.iter_mut().take(3) {
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 401");
    }
    std::thread::sleep(Duration::from_millis(300));
    let bearer = format!("Bearer {TOKEN}");
    let headers =
        [("content-type", "application/json"), ("mcp-method", "tools/list"), ("authorization", bearer.as_str())];
    let answer = server.send_within(Duration::from_secs(10), "POST", "/mcp", &headers, list.as_bytes());
    assert_eq!(answer.status, 200, "a client with the token was locked out by refused connections");
    drop(refused);
}

/// Issue 45 item 4: a connection that was answered once and then sits idle holds no place
/// against a new client. 256 keep-alive connections from four addresses, each answered once
/// and held open, fill every place; a client from a fifth address is still answered (the
/// oldest idle connection is closed for it), and so is one from a filled address.
#[test]
fn connections_answered_once_and_held_idle_do_not_lock_others_out() {
    let server = Server::start(&[], &[]);
    let list =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}}).to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\nmcp-method: tools/list\r\ncontent-length: {}\r\n\r\n{list}",
        server.address,
        list.len()
    );
    let mut held = Vec::new();
    for peer in 2..=5 {
        for _ in 0..64 {
            let mut stream = connect_from(&server, Some(format!("127.0.0.{peer}").parse().unwrap()));
            stream.write_all(request.as_bytes()).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut head = [0u8; 12];
            stream.read_exact(&mut head).unwrap();
            assert_eq!(&head, b"HTTP/1.1 200");
            held.push(stream);
        }
    }
    for from in ["127.0.0.6", "127.0.0.2"] {
        let mut stream = connect_from(&server, Some(from.parse().unwrap()));
        stream.write_all(request.as_bytes()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut head = [0u8; 12];
        let read = stream.read_exact(&mut head);
        assert!(read.is_ok() && &head == b"HTTP/1.1 200", "a client from {from} was locked out: {read:?}");
    }
    drop(held);
}

/// The review of issue 23 item 5: one address cannot take the whole body budget. Sixteen
/// near-maximal bodies from 127.0.0.2, withheld before their last byte, would hold all of it;
/// one address holds a quarter at most (the rest are answered 503), so a client elsewhere is
/// still served.
#[test]
fn one_address_cannot_take_every_body_read() {
    let server = Server::start(&[], &[]);
    let other = Some("127.0.0.2".parse().unwrap());
    let body_max = 4 * 1024 * 1024;
    let chunk = vec![b' '; body_max - 1];
    let mut held = Vec::new();
    for _ in 0..16 {
        let mut stream = connect_from(&server, other);
        let head = format!(
            "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\nmcp-method: tools/list\r\ncontent-length: {body_max}\r\n\r\n",
            server.address
        );
        stream.write_all(head.as_bytes()).unwrap();
        // A refused body ends its connection; the write may fail then.
        let _ = stream.write_all(&chunk);
        held.push(stream);
    }
    // The server has read what the kernel buffered (a body waits 5 s for more before it ends).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(tools_list(&server, Duration::from_secs(10)), 200, "one address took every body read");
    drop(held);
}

/// Over HTTP a 2025-11-25 session hears its call's progress and the run's request for input
/// live, before the answer exists (the run cannot end until the client answers); a client
/// whose stream broke resumes it with `Last-Event-ID` and gets the rest, the answer included.
#[test]
fn a_session_call_streams_live_and_resumes_after_its_last_event() {
    let server = Server::start_in("conformance", &[], &[]);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "test", "version": "1"}}});
    let session = server.post(&initialize, &[]).header("mcp-session-id").expect("a session").to_string();
    // A request answered whole between (most clients list the tools first) leaves the
    // session's declared capabilities as they were.
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"});
    let listed = server.post(&list, &[("mcp-session-id", &session), ("accept", "application/json")]);
    assert_eq!(listed.status, 200, "{}", listed.text());
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "test_elicitation", "arguments": {"message": "Who are you?"}, "_meta": {"progressToken": "p"}}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-session-id", session.as_str()),
    ];
    let mut stream = EventStream::open(&server, "POST", &headers, call.to_string().as_bytes());
    assert_eq!((stream.status, stream.header("content-type")), (200, Some("text/event-stream")));
    let mut seen = Vec::new();
    let asked = loop {
        let event = stream.next_event().expect("the stream goes on until the run is answered");
        let message: Value = serde_json::from_str(&event.data).unwrap();
        assert!(message.get("result").is_none(), "no answer before the client answered: {message}");
        seen.push(message["method"].as_str().unwrap_or("").to_string());
        if message["method"] == "elicitation/create" {
            break (event.id.expect("a session stream's events carry ids"), message);
        }
    };
    assert!(seen.contains(&"notifications/progress".to_string()), "progress came live first: {seen:?}");
    assert_valid(&asked.1, Era::Legacy, None);
    // The stream breaks; in a session that does not cancel the call.
    drop(stream);
    let response = json!({"jsonrpc": "2.0", "id": asked.1["id"],
        "result": {"action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}});
    assert_eq!(server.post(&response, &[("mcp-session-id", &session)]).status, 202);
    let resume = [("accept", "text/event-stream"), ("mcp-session-id", session.as_str()), ("last-event-id", &asked.0)];
    let mut resumed = EventStream::open(&server, "GET", &resume, b"");
    assert_eq!(resumed.status, 200);
    let answer = loop {
        let event = resumed.next_event().expect("the rest of the stream, the answer last");
        let message: Value = serde_json::from_str(&event.data).unwrap();
        if message["id"] == json!(2) {
            break message;
        }
    };
    assert_valid(&answer, Era::Legacy, Some("tools/call"));
    let text = answer["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains("accept") && text.contains("ada@example.com"), "{answer}");
    assert!(resumed.next_event().is_none(), "the stream ends after the answer");

    // The largest sequence number is no overflow: an answer, not a dropped connection.
    let stream = asked.0.split('-').next().unwrap();
    let last = format!("{stream}-18446744073709551615");
    let edge = server.send("GET", "/mcp", &[("mcp-session-id", &session), ("last-event-id", &last)], b"");
    assert_eq!(edge.status, 200, "{}", edge.text());
    let gone = server.send("GET", "/mcp", &[("mcp-session-id", &session), ("last-event-id", "999-1")], b"");
    assert_eq!(gone.status, 410, "{}", gone.text());
    let bad = server.send("GET", "/mcp", &[("mcp-session-id", &session), ("last-event-id", "nonsense")], b"");
    assert_eq!(bad.status, 400, "{}", bad.text());
    let foreign = server.send("GET", "/mcp", &[("mcp-session-id", "0f"), ("last-event-id", &asked.0)], b"");
    assert_eq!(foreign.status, 404);
}

/// A 2026-07-28 call mirrors the arguments its tool names in `Mcp-Param-*` headers: a header
/// that carries the value (plain or `=?base64?...?=`) passes; a missing, different or badly
/// encoded one is refused with 400 and -32020 before anything runs.
#[test]
fn mirrored_argument_headers_are_checked_against_the_body() {
    let server = Server::start_in("conformance", &[], &[]);
    let call = modern_call(7, "echo_region", json!({"region": "eu-west"}));
    let base = [("mcp-method", "tools/call"), ("mcp-name", "echo_region")];
    let with = |value: &str| {
        let mut headers = base.to_vec();
        headers.push(("mcp-param-region", value));
        server.post(&call, &headers)
    };
    assert_eq!(with("eu-west").status, 200);
    assert_eq!(with("=?base64?ZXUtd2VzdA==?=").status, 200);
    for refused in [with("us-east"), with("=?base64?ZXUtd2VzdA?="), server.post(&call, &base)] {
        assert_eq!(refused.status, 400, "{}", refused.text());
        assert_eq!(refused.json()["error"]["code"], json!(-32020), "{}", refused.text());
    }
    let listed = server.post(
        &json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"_meta": modern_meta()}}),
        &[("mcp-method", "tools/list")],
    );
    let tools = listed.json()["result"]["tools"].clone();
    let echo = tools.as_array().unwrap().iter().find(|tool| tool["name"] == "echo_region").unwrap().clone();
    assert_eq!(echo["inputSchema"]["properties"]["region"]["x-mcp-header"], "Region", "{echo}");
}

/// A tool's own JSON Schema 2020-12 (`input_schema`) is listed as written and enforced after
/// the program's signature: a call it refuses (no phone for a phone contact, a key it does not
/// know) is answered with the problems and runs nothing; one it allows runs.
#[test]
fn an_operator_schema_is_listed_as_written_and_enforced() {
    let server = Server::start_in("conformance", &[], &[]);
    let headers = [("mcp-method", "tools/call"), ("mcp-name", "json_schema_2020_12_tool")];
    let call =
        |id: u64, arguments: Value| server.post(&modern_call(id, "json_schema_2020_12_tool", arguments), &headers);
    let allowed = call(1, json!({"name": "Ada", "contactMethod": "phone", "phone": "123"}));
    assert_eq!(allowed.json()["result"]["isError"], json!(false), "{}", allowed.text());
    for (id, refused) in [
        (2, json!({"name": "Ada", "contactMethod": "phone", "email": "ada@example.com"})),
        (3, json!({"name": "Ada"})),
        (4, json!({"email": "a@b.c", "address": {"street": "x", "city": "y"}, "phone": 7})),
    ] {
        let answer = call(id, refused.clone());
        let result = &answer.json()["result"];
        assert_eq!(result["isError"], json!(true), "{refused} was allowed: {}", answer.text());
        assert!(result["content"][0]["text"].as_str().unwrap_or("").contains("invalid arguments"), "{}", answer.text());
    }
    let listed = server.post(
        &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": modern_meta()}}),
        &[("mcp-method", "tools/list")],
    );
    let tools = listed.json()["result"]["tools"].clone();
    let tool =
        tools.as_array().unwrap().iter().find(|tool| tool["name"] == "json_schema_2020_12_tool").unwrap().clone();
    let written: Value = serde_json::from_slice(
        &std::fs::read(common::repo_root().join("conformance/json_schema_2020_12.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(tool["inputSchema"], written);
}

/// A session's stream has one reader at a time (a resumption ends the one before it), and a
/// session ended with DELETE ends its streams and its calls; a response or a notification
/// naming a session that is gone is answered 404, not taken and dropped.
#[test]
fn a_stream_has_one_reader_and_an_ended_session_ends_its_streams() {
    let server = Server::start_in("conformance", &[], &[]);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "test", "version": "1"}}});
    let session = server.post(&initialize, &[]).header("mcp-session-id").expect("a session").to_string();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "test_elicitation", "arguments": {"message": "Who?"}}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-session-id", session.as_str()),
    ];
    let mut stream = EventStream::open(&server, "POST", &headers, call.to_string().as_bytes());
    let asked = stream.next_event().expect("the question");
    let id = asked.id.expect("an event id");
    let resume = [("accept", "text/event-stream"), ("mcp-session-id", session.as_str()), ("last-event-id", &id)];
    let mut first = EventStream::open(&server, "GET", &resume, b"");
    let mut second = EventStream::open(&server, "GET", &resume, b"");
    assert_eq!((first.status, second.status), (200, 200));
    assert!(stream.next_event().is_none() && first.next_event().is_none(), "the older readers end");
    assert_eq!(server.send("DELETE", "/mcp", &[("mcp-session-id", &session)], b"").status, 204);
    assert!(second.next_event().is_none(), "the session's end ends its stream");
    let question: Value = serde_json::from_str(&asked.data).unwrap();
    let response = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}});
    assert_eq!(server.post(&response, &[("mcp-session-id", &session)]).status, 404);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}});
    assert_eq!(server.post(&cancel, &[("mcp-session-id", &session)]).status, 404);
}
