//! Benchmark: durable `tools/call`s per second with one, two and three Warden instances serving
//! one PostgreSQL store (issue 28), beside one instance on the file store. Each instance is a
//! stdio server on the same manifest with `IN_FLIGHT` calls in flight; the calls are spread
//! evenly over the instances, and the figure is every call answered over the wall time.
//!
//!   source scripts/postgres.sh && postgres_start     # exports WARDEN_TEST_PG_URL
//!   cargo bench -p warden --bench instances
//!   BENCH_CALLS=2000 cargo bench -p warden --bench instances
//!
//! The tool is the trivial pure `add`: the figures are admission, the run's records and the
//! settle, on the store (a connection per write, no pool yet) or on files (fsyncs).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Calls each instance keeps in flight.
const IN_FLIGHT: u64 = 8;
const URL_ENV: &str = "WARDEN_BENCH_STORE_URL";

fn psql(url: &str, sql: &str) {
    let status = Command::new("psql").args(["-q", "-v", "ON_ERROR_STOP=1", url, "-c", sql]).status();
    assert!(status.is_ok_and(|s| s.success()), "psql failed: {sql}");
}

/// A fresh database on the cluster; its URL.
fn database(cluster: &str, name: &str) -> String {
    psql(cluster, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    psql(cluster, &format!("CREATE DATABASE {name}"));
    let (root, _) = cluster.rsplit_once('/').expect("the cluster URL names a database");
    format!("{root}/{name}")
}

fn folder(on_store: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("add.star"), common::PROGRAM).unwrap();
    let mut server = json!({"name": "bench", "journals": "journals", "max_concurrent_runs": 32});
    if on_store {
        server["store"] = json!({"postgres": {"url": {"env": URL_ENV}}});
    }
    let manifest =
        json!({"server": server, "tools": [{"name": "add", "program": "add.star", "limits": {"max_steps": 1000}}]});
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    dir
}

/// One stdio server; its answers arrive on a channel (a thread reads its stdout).
struct Server {
    child: Child,
    stdin: ChildStdin,
    answers: mpsc::Receiver<Value>,
}

impl Server {
    fn start(dir: &Path, url: Option<&str>) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
        command.arg("mcp").arg(dir.join("manifest.json"));
        if let Some(url) = url {
            command.env(URL_ENV, url);
        }
        let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(value) = serde_json::from_str::<Value>(&line) else { continue };
                if sender.send(value).is_err() {
                    break;
                }
            }
        });
        let mut server = Server { child, stdin, answers };
        server.call(0);
        server.answer();
        server
    }

    fn call(&mut self, id: u64) {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "add", "arguments": {"a": id, "b": 1},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
        writeln!(self.stdin, "{call}").unwrap();
    }

    fn answer(&mut self) -> Value {
        let answer = self.answers.recv_timeout(Duration::from_secs(60)).expect("an answer within a minute");
        assert_eq!(answer["result"]["isError"], json!(false), "a call failed: {answer}");
        answer
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Calls answered per second with `count` instances on one folder, `calls` in all.
fn calls_per_second(count: usize, url: Option<&str>, calls: u64) -> f64 {
    let dir = folder(url.is_some());
    let mut servers: Vec<Server> = (0..count).map(|_| Server::start(dir.path(), url)).collect();
    let each = calls / count as u64;
    let started = Instant::now();
    std::thread::scope(|scope| {
        for (n, server) in servers.iter_mut().enumerate() {
            scope.spawn(move || {
                let base = 1_000_000 * (n as u64 + 1);
                let mut sent = 0;
                while sent < IN_FLIGHT.min(each) {
                    server.call(base + sent);
                    sent += 1;
                }
                for _ in 0..each {
                    server.answer();
                    if sent < each {
                        server.call(base + sent);
                        sent += 1;
                    }
                }
            });
        }
    });
    (each * count as u64) as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let calls: u64 = std::env::var("BENCH_CALLS").ok().and_then(|n| n.parse().ok()).unwrap_or(600);
    println!("calls/s, {calls} calls of `add`, {IN_FLIGHT} in flight per instance");
    println!("| store | instances | calls/s |");
    println!("|---|---|---|");
    println!("| files | 1 | {:.0} |", calls_per_second(1, None, calls));
    let Ok(cluster) = std::env::var("WARDEN_TEST_PG_URL") else {
        println!("(WARDEN_TEST_PG_URL is not set: the PostgreSQL figures need `source scripts/postgres.sh && postgres_start`)");
        return;
    };
    for count in 1..=3 {
        let url = database(&cluster, &format!("warden_bench_instances_{count}"));
        println!("| PostgreSQL | {count} | {:.0} |", calls_per_second(count, Some(&url), calls));
    }
}
