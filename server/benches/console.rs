//! Benchmark: the console's answers against history. A journals folder holding N settled runs
//! (as `startup` writes them) is served by the real `warden console`, and each request the
//! page makes is timed, five times (the median is printed): the page itself, the list of runs
//! (the default 50, with the runs waiting for a person), a filter by state, a text search
//! (the newest 2,000 runs' records read), and one run's page. The page's budget: each answer
//! within a second, so the list is on screen in under two.
//!
//!   cargo bench -p warden --bench console                  # 10,000 runs
//!   CONSOLE_RUNS=1000,100000 cargo bench -p warden --bench console

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The budget of one answer the page waits for.
const BUDGET_S: f64 = 1.0;

fn get(address: &str, path: &str) -> (u16, usize) {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let status = String::from_utf8_lossy(&answer[9..12]).parse().unwrap();
    (status, answer.len())
}

fn main() {
    let sizes: Vec<usize> = std::env::var("CONSOLE_RUNS")
        .unwrap_or_else(|_| "10000".into())
        .split(',')
        .map(|n| n.trim().parse().expect("CONSOLE_RUNS: numbers separated by commas"))
        .collect();
    println!("| settled runs | request | median of 5 | within {BUDGET_S} s |");
    println!("|---|---|---|---|");
    for runs in sizes {
        let dir = tempfile::tempdir().unwrap();
        common::synthesise(dir.path(), runs);
        let manifest = dir.path().join("manifest.json");
        let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
            .args(["console", manifest.to_str().unwrap(), "--listen", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let address = loop {
            let line = lines.next().expect("the console logs where it listens").unwrap();
            if let Some((_, rest)) = line.split_once(" on http://") {
                break rest.split('/').next().unwrap().to_string();
            }
        };
        let newest = format!("{:032x}", (runs as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
        let requests = [
            ("the page", "/".to_string()),
            ("the runs (50, and those waiting)", "/api/runs".to_string()),
            ("failed runs", "/api/runs?state=failed".to_string()),
            ("a text search", "/api/runs?text=no-such-text".to_string()),
            ("one run's page", format!("/api/run?id={newest}")),
        ];
        for (what, path) in requests {
            let mut times: Vec<f64> = (0..5)
                .map(|_| {
                    let started = Instant::now();
                    let (status, _) = get(&address, &path);
                    assert_eq!(status, 200, "{path}");
                    started.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let within = if times[2] <= BUDGET_S { "yes" } else { "NO" };
            println!("| {runs} | {what} | {:.3} s | {within} |", times[2]);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
