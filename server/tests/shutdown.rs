//! Stopping well (issue 25 item 1), on the real binary: a SIGTERM drains instead of cutting.
//! A run in the middle of a plain POST finishes it within `server.shutdown_grace`, the call
//! is answered, and nothing is left for an operator; a POST slower than the grace leaves
//! exactly what a crash leaves (the action in doubt, waiting for a person after the restart),
//! with the log saying so. Over HTTP, a request that comes while the server drains is answered
//! 503 with `Retry-After`.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::payments::Payments;
use common::{fixture, private_copy, Era, Wire};
use serde_json::{json, Value};

/// The crash fixture, its services on `payments`, its note tool given 30 s per request and
/// the server `grace` to drain.
fn folder(payments: &Payments, grace: &str) -> tempfile::TempDir {
    let dir = private_copy(&fixture("crash"));
    // A tool of two plain POSTs: a drain can stop it between them.
    std::fs::write(dir.path().join("two.star"), TWO_NOTES).unwrap();
    let manifest = dir.path().join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap().replace(
        r#""tools": ["#,
        r#""tools": [
    { "name": "two_notes", "program": "two.star", "net": { "connect_timeout_ms": 1000, "timeout_ms": 30000 },
      "grants": { "notes": { "cap": "net.http.post", "only": ["PAYMENTS/v1/notes"] } } },"#,
    );
    std::fs::write(&manifest, text).unwrap();
    for file in ["manifest.json", "refund.star", "note.star", "two.star"] {
        let path = dir.path().join(file);
        let mut text = std::fs::read_to_string(&path).unwrap().replace("PAYMENTS", &payments.base());
        if file == "manifest.json" {
            text = text.replace(r#""timeout_ms": 500"#, r#""timeout_ms": 30000"#).replace(
                r#""max_concurrent_runs": 8,"#,
                &format!(r#""max_concurrent_runs": 8, "shutdown_grace": "{grace}","#),
            );
        }
        std::fs::write(&path, text).unwrap();
    }
    dir
}

const TWO_NOTES: &str = r#"
def main(notes, first: str, second: str) -> dict:
    """Save two notes, one after the other.

    Args:
        first: The first note.
        second: The second note.
    """
    notes.post("PAYMENTS/v1/notes", body = first)
    return {"saved": notes.post("PAYMENTS/v1/notes", body = second)["json"]["saved"]}
"#;

/// The refund tool's key (the fixture's other tool; the note tool needs none).
const KEY: &[(&str, &str)] = &[("STRIPE_SECRET_KEY", "sk_test_SHUTDOWN_1")];

fn note(text: &str) -> Value {
    json!({"name": "add_note", "arguments": {"text": text}})
}

/// Waits until the payments service has seen `count` notes sent.
fn wait_for_notes(payments: &Payments, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while payments.ledger.lock().unwrap().notes.len() < count {
        assert!(Instant::now() < deadline, "the note never reached the service");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sigterm(pid: u32) {
    let status = Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    assert!(status.success());
}

use common::status_report;

#[test]
fn a_sigterm_during_a_slow_plain_post_answers_it_and_leaves_nothing_for_an_operator() {
    let payments = Payments::start();
    let mut wire = Wire::start_dir(folder(&payments, "20s"), KEY);
    wire.send_request(Era::Modern, json!(1), "tools/call", note("linger-1500"));
    wait_for_notes(&payments, 1);
    sigterm(wire.pid());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !wire.stderr().contains("draining") {
        assert!(Instant::now() < deadline, "no drain logged: {}", wire.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Requests are still read during the drain: a new call is refused, saying why.
    wire.send_request(Era::Modern, json!(2), "tools/call", note("too late"));
    let refused = wire.recv();
    assert_eq!(refused["id"], json!(2), "{refused}");
    assert_eq!(refused["result"]["_meta"]["dev.warden/refused"], json!("shutdown"), "{refused}");
    let answer = wire.recv();
    assert_eq!(answer["result"]["structuredContent"], json!({"result": {"saved": 1}}), "{answer}");
    let status = wire.wait_exit(Duration::from_secs(20));
    let log = wire.stderr();
    assert!(status.success(), "a drained server exits 0: {status:?}\n{log}");
    assert!(log.contains("draining") && log.contains("drained:"), "{log}");
    assert_eq!(payments.ledger.lock().unwrap().notes.len(), 1, "the refused call ran nothing");
    let waiting = wire.dir.path().join("journals/waiting");
    let left = std::fs::read_dir(&waiting).map(|entries| entries.count()).unwrap_or(0);
    assert_eq!(left, 0, "no run waits for an operator");
    let report = status_report(wire.dir.path());
    assert!(!report.contains("waiting for an operator") && !report.contains("interrupted"), "{report}");
}

#[test]
fn a_sigterm_during_a_post_slower_than_the_grace_leaves_what_a_crash_leaves() {
    let payments = Payments::start();
    let mut wire = Wire::start_dir(folder(&payments, "1s"), KEY);
    wire.send_request(Era::Modern, json!(1), "tools/call", note("linger-6000"));
    wait_for_notes(&payments, 1);
    sigterm(wire.pid());
    let status = wire.wait_exit(Duration::from_secs(20));
    let log = wire.stderr();
    assert!(!status.success(), "a grace that ran out is not a clean stop: {status:?}");
    assert!(log.contains("the shutdown grace of 1s ran out with 1 run(s) still executing"), "{log}");
    // As after a crash: the restart finds the POST begun and not done, and waits for a person.
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    drop(wire);
    let mut restarted = Wire::start_dir(dir, KEY);
    restarted.assert_serving(900);
    let report = status_report(restarted.dir.path());
    assert!(report.contains("waiting for an operator at action 0"), "{report}");
    assert_eq!(payments.ledger.lock().unwrap().notes.len(), 1, "sent once, never again");
}

/// `warden serve-http` on the crash fixture; returns the child and its address.
fn serve_http(dir: &std::path::Path) -> (std::process::Child, SocketAddr, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("serve-http")
        .arg(dir.join("manifest.json"))
        .args(["--listen", "127.0.0.1:0"])
        .envs(KEY.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let address = loop {
        let line = lines.next().expect("the server logs where it listens").unwrap();
        if let Some(at) = line.find("listening on http://") {
            break line[at + "listening on http://".len()..].strip_suffix("/mcp").unwrap().parse().unwrap();
        }
    };
    let (sender, log) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    (child, address, log)
}

/// POSTs a 2026-07-28 call; (status, head, body).
fn post_call(address: SocketAddr, id: u64, call: &Value) -> (u16, String, String) {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let mut params = call.clone();
    params["_meta"] = meta;
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    post_raw(address, &message, &format!("tools/call\r\nmcp-name: {}", call["name"].as_str().unwrap()))
}

/// POSTs `message` with the 2026-07-28 headers (`routing`: the mcp-method value, and any
/// header lines after it); (status, head, body).
fn post_raw(address: SocketAddr, message: &Value, routing: &str) -> (u16, String, String) {
    let body = message.to_string();
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: {routing}\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    let _ = stream.read_to_string(&mut raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// A bodiless request; (status, body).
fn probe(address: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!("{method} {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    let _ = stream.read_to_string(&mut raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    (head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0), body.to_string())
}

#[test]
fn over_http_a_draining_server_answers_its_calls_and_refuses_new_ones_with_503() {
    let payments = Payments::start();
    let dir = folder(&payments, "20s");
    let (mut child, address, log) = serve_http(dir.path());
    // The probes: unauthenticated, GET only; ready once serving.
    assert_eq!(probe(address, "GET", "/healthz"), (200, r#"{"status":"alive"}"#.to_string()));
    assert_eq!(probe(address, "GET", "/readyz"), (200, r#"{"status":"ready"}"#.to_string()));
    assert_eq!(probe(address, "POST", "/readyz").0, 405);
    let slow = std::thread::spawn(move || post_call(address, 1, &note("linger-2000")));
    wait_for_notes(&payments, 1);
    sigterm(child.id());
    // The drain has begun once the server says so; a call from then on is refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while !seen.iter().any(|line: &String| line.contains("draining")) {
        assert!(Instant::now() < deadline, "no drain logged: {seen:?}");
        if let Ok(line) = log.recv_timeout(Duration::from_millis(100)) {
            seen.push(line);
        }
    }
    let (status, head, body) = post_call(address, 2, &note("too late"));
    assert_eq!(status, 503, "{head}{body}");
    assert!(head.contains("retry-after: 5"), "{head}");
    // A notification (a cancellation) is still taken: it starts nothing.
    let (status, head, body) = post_call(address, 0, &json!({"name": "cancel"}));
    assert_eq!(status, 503, "a request is refused: {head}{body}");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}});
    let (status, head, body) = post_raw(address, &cancel, "notifications/cancelled");
    assert_ne!(status, 503, "{head}{body}");
    assert!(status < 300, "{head}{body}");
    // Draining: alive, not ready.
    assert_eq!(probe(address, "GET", "/readyz"), (503, r#"{"status":"stopping"}"#.to_string()));
    assert_eq!(probe(address, "GET", "/healthz").0, 200);
    // Watched as it drains: the gauge a stuck drain's alert reads (deploy/prometheus-alerts.yml).
    let (status, metrics) = probe(address, "GET", "/metrics");
    assert_eq!(status, 200, "{metrics}");
    assert!(metrics.contains("warden_draining 1"), "{metrics}");
    let (status, _, body) = slow.join().unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""saved":1"#), "{body}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the server did not exit after draining");
        std::thread::sleep(Duration::from_millis(20));
    };
    seen.extend(log.try_iter());
    assert!(exited.success(), "{exited:?}: {seen:?}");
    assert_eq!(payments.ledger.lock().unwrap().notes.len(), 1, "the refused call ran nothing");
}

/// A `two_notes` run drained after its first note (which takes a second) and before its
/// second: its caller told the run goes on later, the server exited 0. The server's folder,
/// and its log.
fn drained_between_two_notes(payments: &Payments, second: &str) -> (tempfile::TempDir, String) {
    let mut wire = Wire::start_dir(folder(payments, "20s"), KEY);
    let call = json!({"name": "two_notes", "arguments": {"first": "linger-1000", "second": second}});
    wire.send_request(Era::Modern, json!(1), "tools/call", call);
    wait_for_notes(payments, 1);
    sigterm(wire.pid());
    let answer = wire.recv();
    assert_eq!(answer["result"]["_meta"]["dev.warden/run"]["status"], json!("interrupted"), "{answer}");
    assert!(wire.wait_exit(Duration::from_secs(20)).success(), "{}", wire.stderr());
    let log = wire.stderr();
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    (dir, log)
}

/// A signal during the start's recovery drains too: the run recovery resumed finishes the
/// action it is in (never cut, never left in doubt), and the server exits cleanly without
/// serving. (Before, a signal there killed the process at once.)
#[test]
fn a_sigterm_during_recovery_lets_the_resumed_run_finish_its_action() {
    let payments = Payments::start();
    let (dir, _) = drained_between_two_notes(&payments, "linger-3000");
    // The next start resumes the run: its second POST is sent during recovery.
    let mut restarted = Wire::start_dir(dir, KEY);
    wait_for_notes(&payments, 2);
    sigterm(restarted.pid());
    let status = restarted.wait_exit(Duration::from_secs(20));
    let log = restarted.stderr();
    assert!(status.success(), "{status:?}\n{log}");
    let report = status_report(restarted.dir.path());
    assert!(!report.contains("waiting for an operator") && !report.contains("interrupted"), "{report}\n{log}");
    assert_eq!(payments.ledger.lock().unwrap().notes.len(), 2, "each note sent once");
}

/// Two signals back to back (a supervisor's TERM, then an impatient INT): the second one is
/// not lost, and the server stops at once instead of waiting out the action.
#[test]
fn a_second_signal_right_after_the_first_stops_at_once() {
    let payments = Payments::start();
    let mut wire = Wire::start_dir(folder(&payments, "20s"), KEY);
    wire.send_request(Era::Modern, json!(1), "tools/call", note("linger-8000"));
    wait_for_notes(&payments, 1);
    let pid = wire.pid();
    let started = Instant::now();
    Command::new("sh").arg("-c").arg(format!("kill -TERM {pid}; kill -INT {pid}")).status().unwrap();
    let status = wire.wait_exit(Duration::from_secs(20));
    let log = wire.stderr();
    assert!(!status.success(), "{status:?}\n{log}");
    assert!(started.elapsed() < Duration::from_secs(6), "it waited out the action: {:?}\n{log}", started.elapsed());
    assert!(log.contains("a second shutdown signal"), "{log}");
}

/// A drain before a deploy: the run stopped between actions cannot go on under a changed
/// program. The drain said so; the next start refuses, naming the run and that a person
/// decides (not a damaged journal, which it is not).
#[test]
fn a_program_changed_after_a_drain_stops_the_start_for_an_operator_and_says_why() {
    let payments = Payments::start();
    let (dir, log) = drained_between_two_notes(&payments, "second");
    assert!(log.contains("1 run(s) are unfinished"), "{log}");
    assert!(log.contains("before changing a tool or upgrading"), "{log}");
    let program = dir.path().join("two.star");
    let changed = std::fs::read_to_string(&program).unwrap() + "\n# changed\n";
    std::fs::write(&program, changed).unwrap();
    let mut restarted = Wire::start_dir(dir, KEY);
    let status = restarted.wait_exit(Duration::from_secs(20));
    let log = restarted.stderr();
    assert!(!status.success(), "{log}");
    assert!(log.contains("these runs need an operator"), "{log}");
    assert!(log.contains("(an operator must act before the server starts)"), "{log}");
    assert!(!log.contains("could not be written or read safely"), "{log}");
}

/// The end of stdin: a call already read is answered when it ends within the grace (a
/// one-shot `echo ... | warden mcp` gets its answer), and the server exits 0.
#[test]
fn the_end_of_stdin_lets_a_call_read_end_within_the_grace() {
    let payments = Payments::start();
    let mut wire = Wire::start_dir(folder(&payments, "20s"), KEY);
    wire.send_request(Era::Modern, json!(1), "tools/call", note("linger-1000"));
    wait_for_notes(&payments, 1);
    wire.close_stdin();
    let answer = wire.recv();
    assert_eq!(answer["result"]["structuredContent"], json!({"result": {"saved": 1}}), "{answer}");
    let status = wire.wait_exit(Duration::from_secs(20));
    let log = wire.stderr();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("stdin closed: letting 1 call(s) in progress"), "{log}");
    assert!(!log.contains("draining"), "{log}");
}

/// The end of stdin behind a POST slower than the grace: the server no longer waits on it
/// unbounded. Past the grace it drains, and past the drain's grace it stops as a crash would,
/// saying so; the restart finds the POST in doubt and asks a person, never sending it again.
#[test]
fn the_end_of_stdin_behind_a_post_slower_than_the_grace_is_bounded() {
    let payments = Payments::start();
    let mut wire = Wire::start_dir(folder(&payments, "1s"), KEY);
    wire.send_request(Era::Modern, json!(1), "tools/call", note("linger-8000"));
    wait_for_notes(&payments, 1);
    let closed = Instant::now();
    wire.close_stdin();
    let status = wire.wait_exit(Duration::from_secs(20));
    let log = wire.stderr();
    assert!(!status.success(), "a grace that ran out is not a clean stop: {status:?}\n{log}");
    assert!(closed.elapsed() < Duration::from_secs(7), "it waited on the POST: {:?}", closed.elapsed());
    assert!(log.contains("stdin closed and the grace ran out: draining"), "{log}");
    assert!(log.contains("the shutdown grace of 1s ran out with 1 run(s) still executing"), "{log}");
    let dir = std::mem::replace(&mut wire.dir, tempfile::tempdir().unwrap());
    drop(wire);
    let mut restarted = Wire::start_dir(dir, KEY);
    restarted.assert_serving(900);
    assert!(status_report(restarted.dir.path()).contains("waiting for an operator at action 0"));
    assert_eq!(payments.ledger.lock().unwrap().notes.len(), 1, "sent once, never again");
}

/// A signal during the start's recovery is bounded by the grace as a drain is (issue 45 item
/// 3): the run recovery resumed is in a POST slower than the grace, so the start stops as a
/// crash would once the grace ran out, saying so, instead of waiting the POST out.
#[test]
fn a_sigterm_during_recovery_is_bounded_by_the_grace() {
    let payments = Payments::start();
    let (dir, _) = drained_between_two_notes(&payments, "linger-15000");
    let manifest = dir.path().join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace(r#""shutdown_grace": "20s""#, r#""shutdown_grace": "1s""#)).unwrap();
    let mut restarted = Wire::start_dir(dir, KEY);
    wait_for_notes(&payments, 2);
    sigterm(restarted.pid());
    let status = restarted.wait_exit(Duration::from_secs(30));
    let log = restarted.stderr();
    assert!(!status.success(), "a grace that ran out is not a clean stop: {status:?}\n{log}");
    assert!(log.contains("the shutdown grace of 1s ran out before the runs it resumed ended"), "{log}");
}

/// The processes a server started for its programs.
fn children_of(pid: u32) -> Vec<u32> {
    let path = format!("/proc/{pid}/task/{pid}/children");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split_whitespace().filter_map(|child| child.parse().ok()).collect()
}

const SPIN: &str = r#"
def main(n: int) -> int:
    """Adds the numbers below n, modulo 1000.

    Args:
        n: How many numbers to add.
    """
    total = 0
    for i in range(n):
        total = (total + i) % 1000
    return total
"#;

/// A closed terminal sends SIGHUP to the whole process group, the program workers included
/// (issue 45 item 3): a worker in the middle of a job must not die of it and fail the run (a
/// failure its `once` key would then answer for `keep`). The server drains on the signal, and
/// the execution it was in ends as it would have.
#[test]
fn a_sighup_to_the_process_group_fails_no_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spin.star"), SPIN).unwrap();
    let manifest = json!({
        "server": { "name": "spin", "journals": "journals", "shutdown_grace": "60s" },
        "tools": [{ "name": "spin", "program": "spin.star",
                    "limits": { "max_steps": 1_000_000_000u64, "execution_ms": 60_000 } }]
    });
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    let mut wire = Wire::start_dir(dir, &[]);
    wire.send_request(Era::Modern, json!(1), "tools/call", json!({"name": "spin", "arguments": {"n": 40_000_000}}));
    let deadline = Instant::now() + Duration::from_secs(20);
    while children_of(wire.pid()).is_empty() {
        assert!(Instant::now() < deadline, "no worker started: {}", wire.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    for pid in children_of(wire.pid()).into_iter().chain([wire.pid()]) {
        Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap();
    }
    let answer = wire.recv();
    let log = wire.stderr();
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}\n{log}");
    assert!(wire.wait_exit(Duration::from_secs(60)).success(), "{}", wire.stderr());
}

/// With JSON logs, every line a stopping server writes is JSON, the exit line of a second
/// signal included (issue 45 item 3): a log pipeline reads the most important line of a stop.
#[test]
fn with_json_logs_the_exit_line_of_a_second_signal_is_json() {
    let payments = Payments::start();
    let env = [KEY[0], ("WARDEN_LOG_FORMAT", "json")];
    let mut wire = Wire::start_dir(folder(&payments, "20s"), &env);
    wire.send_request(Era::Modern, json!(1), "tools/call", note("linger-8000"));
    wait_for_notes(&payments, 1);
    let pid = wire.pid();
    Command::new("sh").arg("-c").arg(format!("kill -TERM {pid}; sleep 0.2; kill -INT {pid}")).status().unwrap();
    let status = wire.wait_exit(Duration::from_secs(20));
    let log = wire.stderr();
    assert!(!status.success(), "{status:?}\n{log}");
    for line in log.lines().filter(|line| !line.trim().is_empty()) {
        let parsed: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}\n{log}"));
        assert!(parsed.is_object(), "{line}");
    }
    assert!(log.contains("a second shutdown signal"), "{log}");
}
