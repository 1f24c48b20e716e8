//! Issue 25 item 4: `warden serve-http` serves Prometheus metrics at `/metrics` behind its
//! bearer token, and on `--metrics-listen` (loopback, no authentication). A real Prometheus
//! (Debian's `prometheus`, which `scripts/test-all.sh` installs) scrapes both, and a PromQL
//! query is answered from what it scraped.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TOKEN: &str = "tok-metrics-5c1e9a7b3d2f40";
const PROMETHEUS: &str = "/usr/bin/prometheus";

struct Server {
    _dir: tempfile::TempDir,
    child: Child,
    mcp: SocketAddr,
    metrics: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The toolbox example over HTTP with a bearer token, and metrics on a loopback port of their own.
fn start() -> Server {
    start_in(common::private_copy(&common::repo_root().join("examples/toolbox")))
}

/// `start`, serving the manifest in `dir`.
fn start_in(dir: tempfile::TempDir) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("serve-http")
        .arg(dir.path().join("manifest.json"))
        .args(["--listen", "127.0.0.1:0", "--bearer-token-env", "METRICS_TEST_TOKEN"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .env("METRICS_TEST_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut mcp, mut metrics) = (None, None);
    while mcp.is_none() || metrics.is_none() {
        let line = lines.next().expect("the server logs where it listens").unwrap();
        if let Some((_, rest)) = line.split_once("warden: listening on http://") {
            mcp = Some(rest.strip_suffix("/mcp").unwrap().parse().unwrap());
        }
        if let Some((_, rest)) = line.split_once("warden: metrics on http://") {
            metrics = Some(rest.strip_suffix("/metrics").unwrap().parse().unwrap());
        }
    }
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    Server { _dir: dir, child, mcp: mcp.unwrap(), metrics: metrics.unwrap() }
}

/// One HTTP/1.1 request: (status, body).
fn send(address: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    let _ = stream.read_to_string(&mut raw);
    let status = raw.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default();
    (status, body)
}

fn call(server: &Server, id: u64, tool: &str, arguments: Value) -> u16 {
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let headers = [
        ("authorization", &*format!("Bearer {TOKEN}")),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ];
    send(server.mcp, "POST", "/mcp", &headers, &message.to_string()).0
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Prometheus on a loopback port, scraping `server` every second: the main listener's
/// `/metrics` with the bearer token, and the metrics listener without.
struct Prometheus {
    child: Child,
    address: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn prometheus(server: &Server) -> Prometheus {
    assert!(
        std::path::Path::new(PROMETHEUS).exists(),
        "{PROMETHEUS} is missing: install Debian's prometheus package (scripts/test-all.sh does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n\
         - job_name: main\n  authorization:\n    credentials: {TOKEN}\n  static_configs:\n  - targets: ['{}']\n\
         - job_name: listener\n  static_configs:\n  - targets: ['{}']\n",
        server.mcp, server.metrics
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let address: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = Command::new(PROMETHEUS)
        .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address={address}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Prometheus { child, address, _dir: dir }
}

/// A PromQL query's first value, once Prometheus has one.
fn query(prometheus: &Prometheus, promql: &str, wanted: f64) -> Value {
    let encoded: String = promql
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = TcpStream::connect(prometheus.address)
            .ok()
            .map(|_| send(prometheus.address, "GET", &format!("/api/v1/query?query={encoded}"), &[], ""));
        let value = answer.and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok()).unwrap_or_default();
        let first = &value["data"]["result"][0]["value"][1];
        if first.as_str().and_then(|v| v.parse::<f64>().ok()) == Some(wanted) {
            return value;
        }
        assert!(Instant::now() < deadline, "Prometheus never answered {wanted} to {promql}: {value}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn prometheus_scrapes_the_server_and_answers_a_query_from_it() {
    let server = start();
    for id in 1..=3 {
        assert_eq!(call(&server, id, "convert_length", json!({"value": 2, "from_unit": "km", "to_unit": "m"})), 200);
    }
    assert_eq!(call(&server, 4, "always_fails", json!({})), 200);
    assert_eq!(call(&server, 5, "convert_length", json!({"value": "two"})), 200);
    // The main listener's /metrics is behind the bearer token, like /mcp.
    assert_eq!(send(server.mcp, "GET", "/metrics", &[], "").0, 401);
    let (status, text) = send(server.mcp, "GET", "/metrics", &[("authorization", &format!("Bearer {TOKEN}"))], "");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#"warden_calls_total{tool="convert_length",outcome="done"} 3"#), "{text}");
    assert!(text.contains(r#"warden_calls_total{tool="always_fails",outcome="value"} 1"#), "{text}");
    assert!(text.contains(r#"warden_calls_total{tool="convert_length",outcome="invalid_arguments"} 1"#), "{text}");
    for metric in ["warden_run_duration_seconds_count", "warden_ledger_fsync_seconds_count", "warden_runs{"] {
        assert!(text.contains(metric), "{metric} missing:\n{text}");
    }
    assert!(!text.contains(TOKEN));
    // The metrics listener serves /metrics alone, without authentication.
    let (status, listened) = send(server.metrics, "GET", "/metrics", &[], "");
    assert_eq!(status, 200);
    assert!(listened.contains("warden_calls_total"), "{listened}");
    assert_eq!(send(server.metrics, "GET", "/mcp", &[], "").0, 404);
    assert_eq!(send(server.metrics, "POST", "/metrics", &[], "").0, 405);

    let prometheus = prometheus(&server);
    let done = query(&prometheus, r#"sum by (job) (warden_calls_total{job="main",outcome="done"})"#, 3.0);
    assert_eq!(done["data"]["result"][0]["metric"]["job"], "main", "{done}");
    query(&prometheus, r#"sum(warden_calls_total{job="listener"})"#, 5.0);
    query(&prometheus, r#"count(warden_http_requests_total{job="main",status="401"})"#, 1.0);
}

#[test]
fn metrics_are_served_without_authentication_on_loopback_only() {
    let dir = common::private_copy(&common::repo_root().join("examples/toolbox"));
    let output = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("mcp")
        .arg(dir.path().join("manifest.json"))
        .args(["--metrics-listen", "0.0.0.0:9464"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("only on a loopback address"), "{stderr}");
}

/// One GET of `/metrics` with `host` (and `origin`, if any) as written: the status.
fn get_metrics_as(address: SocketAddr, host: &str, origin: Option<&str>) -> u16 {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let origin = origin.map(|origin| format!("origin: {origin}\r\n")).unwrap_or_default();
    let request = format!("GET /metrics HTTP/1.1\r\nhost: {host}\r\n{origin}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    let _ = stream.read_to_string(&mut raw);
    raw.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// DNS rebinding (issue 45 item 4): a page the operator opens can point its own name at
/// loopback and read `/metrics` (every principal's quota use) unless the listener checks the
/// Host and Origin as the MCP endpoint does.
#[test]
fn the_metrics_listener_refuses_another_host_or_origin() {
    let server = start();
    let port = server.metrics.port();
    assert_eq!(get_metrics_as(server.metrics, &format!("127.0.0.1:{port}"), None), 200);
    assert_eq!(get_metrics_as(server.metrics, &format!("localhost:{port}"), None), 200);
    assert_eq!(get_metrics_as(server.metrics, &format!("rebound.example:{port}"), None), 403);
    let page = Some("http://rebound.example");
    assert_eq!(get_metrics_as(server.metrics, &format!("127.0.0.1:{port}"), page), 403);
}

/// Issue 46 item 6: the alert rules shipped in `deploy/` pass `promtool check rules` (Debian's
/// `prometheus` has it), and every Warden metric they name is one the server serves (a rule
/// naming a metric that does not exist never fires).
#[test]
fn the_shipped_alert_rules_check_and_name_only_served_metrics() {
    let rules = common::repo_root().join("deploy/prometheus-alerts.yml");
    let checked = Command::new("/usr/bin/promtool").arg("check").arg("rules").arg(&rules).output().unwrap();
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stdout));
    // A tool with a quota, so the quota gauges are served, and a call of it (a database read,
    // an action), so every family has a series.
    let dir = common::private_copy(&common::repo_root().join("examples/support-desk"));
    let _ = std::fs::remove_file(dir.path().join("desk.db"));
    let _ = std::fs::remove_dir_all(dir.path().join("journals"));
    let path = dir.path().join("manifest.json");
    let mut manifest: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    manifest["tools"][0]["quota"] = json!({"window": "1h", "calls": 100});
    std::fs::write(&path, manifest.to_string()).unwrap();
    let server = start_in(dir);
    assert_eq!(call(&server, 1, "search_tickets", json!({"query": "Refund"})), 200);
    let (status, served) = send(server.metrics, "GET", "/metrics", &[], "");
    assert_eq!(status, 200);
    let text = std::fs::read_to_string(&rules).unwrap();
    assert_names_only_served_metrics("the alert rules", &text, &served);
    assert!(served.contains("warden_draining 0"), "not draining: {served}");

    // The dashboard: every panel's query parses (promtool checks them as recording rules) and
    // names only served metrics.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo_root().join("deploy/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let queries: Vec<&str> = (dashboard["panels"].as_array().unwrap().iter())
        .flat_map(|panel| panel["targets"].as_array().unwrap())
        .map(|target| target["expr"].as_str().unwrap())
        .collect();
    assert!(queries.len() >= 10, "{queries:?}");
    let as_rules: Vec<Value> = (queries.iter().enumerate())
        .map(|(n, query)| json!({"record": format!("dashboard:query_{n}"), "expr": query}))
        .collect();
    let rules_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(rules_file.path(), json!({"groups": [{"name": "dashboard", "rules": as_rules}]}).to_string())
        .unwrap();
    let checked = Command::new("/usr/bin/promtool").arg("check").arg("rules").arg(rules_file.path()).output().unwrap();
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert_names_only_served_metrics("the dashboard", &queries.join("\n"), &served);
}

/// Every metric `text` names (Warden's and the process's) is one the scrape `served` has.
fn assert_names_only_served_metrics(what: &str, text: &str, served: &str) {
    let named: std::collections::BTreeSet<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("warden_") || word.starts_with("process_"))
        .collect();
    assert!(named.len() >= 4, "{what}: {named:?}");
    for metric in named {
        let family = ["_total", "_bucket", "_count", "_sum"].iter().fold(metric, |m, s| m.strip_suffix(s).unwrap_or(m));
        assert!(served.contains(&format!("# TYPE {family} ")), "{what} name {metric}, which is not served:\n{served}");
    }
}

/// Issue 46 item 5: the process's own metrics beside Warden's, under the names Prometheus
/// client libraries give them: CPU time, resident memory, open descriptors, start time.
#[test]
fn the_process_metrics_are_served() {
    let server = start();
    let (status, served) = send(server.metrics, "GET", "/metrics", &[], "");
    assert_eq!(status, 200);
    let value = |name: &str| -> f64 {
        let line = served.lines().find(|line| line.starts_with(&format!("{name} ")));
        let line = line.unwrap_or_else(|| panic!("{name} is not served:\n{served}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(value("process_resident_memory_bytes") > 1_000_000.0, "{served}");
    assert!(value("process_open_fds") >= 3.0, "{served}");
    assert!(value("process_cpu_seconds_total") >= 0.0, "{served}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let started = value("process_start_time_seconds");
    assert!(started <= now + 1.0 && started > now - 300.0, "started {started}, now {now}");
    assert!(served.contains("warden_build_info{"), "Warden's own metrics keep their prefix: {served}");
}
