//! Benchmark: durable `tools/call` of a trivial program over stdio, on the real disk.
//!
//!   cargo bench -p warden --bench durable_calls            # 400 calls per figure
//!   BENCH_CALLS=2000 cargo bench -p warden --bench durable_calls
//!   BENCH_PURE_ONLY=1 WARDEN_BIN=<an earlier build> cargo bench -p warden --bench durable_calls
//!                                    # the pure-call figure alone (add on tmpfs), of another build
//!
//! Prints, for the journals on the real disk and on tmpfs (where fsync costs nearly
//! nothing, to show durability's share): median and p99 latency of sequential calls, and
//! throughput with 1, 8 and 32 calls in flight; the disk's own append+fsync median and each
//! median's ratio to it; `tools/list` answered per second. When strace is installed, also
//! the fsyncs per call.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Calls kept in flight for the throughput figures.
const IN_FLIGHT: [u64; 3] = [1, 8, 32];

const WRITE_PROGRAM: &str = r#"
def main(db, a: int, b: int) -> int:
    """Record a sum in SQLite.

    Args:
        a: The first.
        b: The second.
    """
    db.execute("INSERT INTO sums (a, b) VALUES (?, ?)", [a, b])
    return a + b
"#;

fn manifest(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("add.star"), common::PROGRAM).unwrap();
    std::fs::write(dir.join("write.star"), WRITE_PROGRAM).unwrap();
    std::fs::write(dir.join("sums.sql"), "CREATE TABLE sums (a INTEGER, b INTEGER);").unwrap();
    let manifest = dir.join("manifest.json");
    let text = json!({
        "server": {"name": "bench", "journals": "journals", "max_concurrent_runs": 32},
        "tools": [
            {"name": "add", "program": "add.star", "limits": {"max_steps": 1000}},
            {"name": "add_and_record", "program": "write.star", "limits": {"max_steps": 1000},
             "grants": {"db": {"cap": "db.sqlite", "path": "sums.db", "mode": "write", "init": "sums.sql"}}}
        ]
    });
    std::fs::write(&manifest, text.to_string()).unwrap();
    manifest
}

struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Server {
    fn start(program: &str, args: &[&str]) -> Server {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Server { child, stdin, lines }
    }

    fn send_call(&mut self, tool: &str, id: u64) {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": tool, "arguments": {"a": id, "b": 1},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
        writeln!(self.stdin, "{call}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn answer(&mut self) -> Value {
        let line = self.lines.next().expect("an answer").unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
        answer
    }

    fn stop(mut self) {
        drop(self.stdin);
        self.child.wait().unwrap();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct Figures {
    median: Duration,
    p99: Duration,
    /// Calls per second with each of `IN_FLIGHT` in flight.
    throughput: Vec<f64>,
}

/// The binary measured: this build's, or `WARDEN_BIN` (an earlier commit's build, to compare).
fn warden_binary() -> String {
    std::env::var("WARDEN_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_warden").to_string())
}

fn measure(dir: &Path, tool: &str, calls: u64) -> Figures {
    let _ = std::fs::remove_dir_all(dir);
    let manifest = manifest(dir);
    measure_server(&warden_binary(), &["mcp", manifest.to_str().unwrap()], tool, calls)
}

/// The pure-call median alone (`add` on tmpfs, where fsync costs nearly nothing): what the
/// server's own code costs per call, to compare builds.
fn pure_call_only(calls: u64) {
    let tmpfs_dir = Path::new("/dev/shm").join(format!("warden-bench-{}", std::process::id()));
    let f = measure(&tmpfs_dir, "add", calls);
    let _ = std::fs::remove_dir_all(&tmpfs_dir);
    println!(
        "pure call ({}, add on tmpfs, {calls} calls): median {:.3} ms, p99 {:.3} ms",
        warden_binary(),
        ms(f.median),
        ms(f.p99)
    );
}

/// The Python SDK's reference server of the client harness (`../shared/clients/`), when the
/// harness is installed: (its python, the server script).
fn python_sdk_server() -> Option<(String, String)> {
    let clients = std::env::var("MCP_CLIENTS_DIR")
        .unwrap_or_else(|_| format!("{}/.cache/mcp-clients", std::env::var("HOME").unwrap_or_default()));
    let python = format!("{clients}/.venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/clients/ref_server.py");
    (Path::new(&python).exists() && script.exists()).then(|| (python, script.to_string_lossy().into_owned()))
}

fn measure_server(program: &str, args: &[&str], tool: &str, calls: u64) -> Figures {
    let mut server = Server::start(program, args);
    // Warm up (program compiled, directories created).
    for id in 0..20 {
        server.send_call(tool, 1_000_000 + id);
        server.answer();
    }
    let mut latencies = Vec::with_capacity(calls as usize);
    for id in 0..calls {
        let started = Instant::now();
        server.send_call(tool, id);
        server.answer();
        latencies.push(started.elapsed());
    }
    latencies.sort();
    let mut throughput = Vec::new();
    for (round, in_flight) in IN_FLIGHT.into_iter().enumerate() {
        let first_id = 2_000_000 * (round as u64 + 1);
        let started = Instant::now();
        let mut sent = 0;
        while sent < in_flight.min(calls) {
            server.send_call(tool, first_id + sent);
            sent += 1;
        }
        for _ in 0..calls {
            server.answer();
            if sent < calls {
                server.send_call(tool, first_id + sent);
                sent += 1;
            }
        }
        throughput.push(calls as f64 / started.elapsed().as_secs_f64());
    }
    server.stop();
    Figures { median: percentile(&latencies, 0.5), p99: percentile(&latencies, 0.99), throughput }
}

/// fsync and fdatasync calls per tools/call, counted by strace over `calls` sequential calls.
fn fsyncs_per_call(dir: &Path, tool: &str, calls: u64) -> Option<f64> {
    Command::new("strace").arg("-V").output().ok()?;
    let _ = std::fs::remove_dir_all(dir);
    let manifest = manifest(dir);
    let count = |calls: u64| -> Option<u64> {
        let out = dir.join(format!("strace-{calls}.txt"));
        let warden = warden_binary();
        let args = ["-f", "-c", "-e", "trace=fsync,fdatasync", "-o", out.to_str()?, &warden, "mcp", manifest.to_str()?];
        let mut server = Server::start("strace", &args);
        for id in 0..calls {
            server.send_call(tool, id);
            server.answer();
        }
        server.stop();
        let text = std::fs::read_to_string(&out).ok()?;
        let total: u64 = text
            .lines()
            .filter(|l| l.contains("fsync") || l.contains("fdatasync"))
            .filter_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
            .sum();
        Some(total)
    };
    // The difference between two runs removes start-up's own fsyncs.
    let (few, many) = (count(10)?, count(10 + calls)?);
    Some((many - few) as f64 / calls as f64)
}

fn main() {
    let calls: u64 = std::env::var("BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    if std::env::var_os("BENCH_PURE_ONLY").is_some() {
        return pure_call_only(calls);
    }
    let disk_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-durable-calls");
    let tmpfs_dir = Path::new("/dev/shm").join(format!("warden-bench-{}", std::process::id()));
    let fsync = append_fsync_median(&disk_dir);
    println!("the disk: append+fsync median {:.3} ms", ms(fsync));
    println!("durable tools/call, {calls} calls per figure");
    println!("| tool | journals on | median | p99 | calls/s with 1 / 8 / 32 in flight | fsyncs per call |");
    println!("|---|---|---|---|---|---|");
    for tool in ["add", "add_and_record"] {
        let fsyncs = match fsyncs_per_call(&disk_dir, tool, calls.min(100)) {
            Some(per_call) => format!("{per_call:.1}"),
            None => "strace not available".to_string(),
        };
        for (name, dir) in [("real disk", &disk_dir), ("tmpfs (fsync ~free)", &tmpfs_dir)] {
            if name.starts_with("tmpfs") && !Path::new("/dev/shm").is_dir() {
                continue;
            }
            let f = measure(dir, tool, calls);
            println!(
                "| {tool} | {name} | {:.2} ms ({:.1}x fsync) | {:.2} ms | {:.0} / {:.0} / {:.0} | {fsyncs} |",
                ms(f.median),
                f.median.as_secs_f64() / fsync.as_secs_f64(),
                ms(f.p99),
                f.throughput[0],
                f.throughput[1],
                f.throughput[2]
            );
        }
    }
    let _ = std::fs::remove_dir_all(&disk_dir);
    let manifest = manifest(&disk_dir);
    let lists = tools_list_per_second(&warden_binary(), &["mcp", manifest.to_str().unwrap()], 5000);
    println!("tools/list: 5000 written at once, {lists:.0} answered per second");
    match python_sdk_server() {
        Some((python, script)) => {
            // Not durable: it journals nothing and fsyncs nothing; the same harness drives it.
            let f = measure_server(&python, &[&script], "add", calls);
            let lists = tools_list_per_second(&python, &[&script], 5000);
            println!(
                "Python SDK server (same harness, no durability): add median {:.2} ms, p99 {:.2} ms, calls/s {:.0} / {:.0} / {:.0}; tools/list {lists:.0} per second",
                ms(f.median),
                ms(f.p99),
                f.throughput[0],
                f.throughput[1],
                f.throughput[2]
            );
        }
        None => println!("Python SDK server: the client harness is not installed (scripts/test-all.sh installs it)"),
    }
    let _ = std::fs::remove_dir_all(&tmpfs_dir);
}

/// The disk's own median of appending a short line and fsyncing it, in `dir`: the unit a
/// durable call is measured against.
fn append_fsync_median(dir: &Path) -> Duration {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("fsync-probe");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
    let mut times: Vec<Duration> = (0..200)
        .map(|_| {
            let started = Instant::now();
            file.write_all(b"{\"probe\":1}\n").unwrap();
            file.sync_all().unwrap();
            started.elapsed()
        })
        .collect();
    let _ = std::fs::remove_file(&path);
    times.sort();
    times[times.len() / 2]
}

/// `tools/list` requests answered per second when `count` are written at once (a writer
/// thread, so the pipes never fill both ways).
fn tools_list_per_second(program: &str, args: &[&str], count: u64) -> f64 {
    let mut server = Server::start(program, args);
    let mut stdin = server.stdin;
    let started = Instant::now();
    let writer = std::thread::spawn(move || {
        let mut batch = Vec::new();
        for id in 0..count {
            let list = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
            writeln!(batch, "{list}").unwrap();
        }
        stdin.write_all(&batch).unwrap();
        stdin.flush().unwrap();
        stdin
    });
    for _ in 0..count {
        let line = server.lines.next().expect("an answer").unwrap();
        assert!(line.contains("\"tools\""), "{line}");
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(writer.join().unwrap());
    server.child.wait().unwrap();
    count as f64 / seconds
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
