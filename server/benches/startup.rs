//! Benchmark: start-up time against history. A journals folder holding N settled runs (each
//! with its journal and run log, and its reserve and settle in the ledger, as a real run
//! leaves them) is synthesised through the library's own record types; then the real binary
//! is started and timed until it answers `initialize`, three times per size (the median is
//! printed; the first start also compacts the ledger).
//!
//!   cargo bench -p warden --bench startup                  # 0, 10,000 and 100,000 runs
//!   STARTUP_RUNS=0,20000 cargo bench -p warden --bench startup
//!   WARDEN_BIN=<an earlier build> cargo bench -p warden --bench startup   # compare
//!   STARTUP_RUNS=100000 STARTUP_DIR=<dir> cargo bench ...  # keep the folder, to profile a start

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;

/// Starts the server and returns the seconds until it answered `initialize`.
fn time_to_initialize(binary: &Path, dir: &Path) -> f64 {
    let started = Instant::now();
    let mut child = Command::new(binary)
        .args(["mcp", dir.join("manifest.json").to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
    writeln!(stdin, "{initialize}").unwrap();
    stdin.flush().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let answer = lines.next().expect("an answer to initialize").unwrap();
    let seconds = started.elapsed().as_secs_f64();
    assert!(answer.contains("\"result\""), "initialize failed: {answer}");
    drop(stdin);
    child.wait().unwrap();
    seconds
}

fn main() {
    // WARDEN_BIN: another build to compare with (an earlier commit's binary).
    let binary = std::env::var_os("WARDEN_BIN").map_or_else(|| env!("CARGO_BIN_EXE_warden").into(), PathBuf::from);
    let binary = binary.as_path();
    let sizes: Vec<usize> = std::env::var("STARTUP_RUNS")
        .unwrap_or_else(|_| "0,10000,100000".into())
        .split(',')
        .map(|n| n.trim().parse().expect("STARTUP_RUNS: numbers separated by commas"))
        .collect();
    println!("| settled runs | start-up to `initialize` (median of 3) | first start |");
    println!("|---|---|---|");
    // STARTUP_DIR: write the (last) history there and keep it, to profile a start by hand.
    let kept = std::env::var_os("STARTUP_DIR").map(PathBuf::from);
    for runs in sizes {
        let scratch = tempfile::tempdir().unwrap();
        let dir = kept.clone().unwrap_or_else(|| scratch.path().to_path_buf());
        let made = Instant::now();
        common::synthesise(&dir, runs);
        eprintln!("startup: {runs} settled runs written in {:.1} s", made.elapsed().as_secs_f64());
        let mut times: Vec<f64> = (0..3).map(|_| time_to_initialize(binary, &dir)).collect();
        let first = times[0];
        times.sort_by(f64::total_cmp);
        println!("| {runs} | {:.3} s | {:.3} s |", times[1], first);
    }
}
