//! `warden-sim`: run seeds, explore seed ranges, replay scenario files, draw timelines.
//!
//!   warden-sim run --seed 7 [--check-determinism] [--canary lying-fsync|ignore-idempotency-keys]
//!   warden-sim explore --seeds 0..10000 [--canary ...] [--expect-violation] [--out scenarios/found]
//!   warden-sim replay scenarios/crash-after-settle.json
//!   warden-sim timeline --seed 7 > run.html

use std::process::ExitCode;
use std::time::Instant;

use warden_faults::{Canary, Expect, Scenario};
use warden_sim::sweep::{plan_for_seed, simulate, Report};

fn usage() -> ExitCode {
    eprintln!(
        "usage: warden-sim run --seed N [--check-determinism] [--canary lying-fsync|ignore-idempotency-keys]\n       \
         warden-sim explore --seeds A..B [--canary ...] [--expect-violation] [--out DIR]\n       \
         warden-sim replay FILE...\n       warden-sim timeline --seed N"
    );
    ExitCode::from(2)
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn canary(args: &[String]) -> Result<Option<Canary>, String> {
    match flag(args, "--canary").as_deref() {
        None => Ok(None),
        Some("lying-fsync") => Ok(Some(Canary::LyingFsync)),
        Some("ignore-idempotency-keys") => Ok(Some(Canary::IgnoreIdempotencyKeys)),
        Some(other) => Err(format!("unknown canary `{other}`")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(command) = args.first() else { return usage() };
    let canary = match canary(&args) {
        Ok(canary) => canary,
        Err(problem) => {
            eprintln!("warden-sim: {problem}");
            return ExitCode::from(2);
        }
    };
    match command.as_str() {
        "run" => {
            let Some(seed) = flag(&args, "--seed").and_then(|s| s.parse::<u64>().ok()) else { return usage() };
            let mut scenario = plan_for_seed(seed);
            scenario.canary = canary;
            let report = simulate(&scenario);
            if args.iter().any(|a| a == "--verbose") {
                for line in &report.log {
                    println!("  | {line}");
                }
            }
            print_summary(&report);
            if args.iter().any(|a| a == "--check-determinism") {
                let again = simulate(&scenario);
                if again.trace_hash != report.trace_hash {
                    eprintln!("NOT DETERMINISTIC: trace {} then {}", report.trace_hash, again.trace_hash);
                    return ExitCode::from(1);
                }
                println!("determinism: the same seed gave the same trace twice ({})", report.trace_hash);
            }
            if report.violations.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        "explore" => explore(&args, canary),
        "replay" => {
            let mut failed = false;
            for path in &args[1..] {
                match replay(path) {
                    Ok(line) => println!("{line}"),
                    Err(line) => {
                        println!("{line}");
                        failed = true;
                    }
                }
            }
            if failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        "timeline" => {
            let Some(seed) = flag(&args, "--seed").and_then(|s| s.parse::<u64>().ok()) else { return usage() };
            let mut scenario = plan_for_seed(seed);
            scenario.canary = canary;
            print!("{}", warden_sim::timeline::html(&simulate(&scenario)));
            ExitCode::SUCCESS
        }
        _ => usage(),
    }
}

fn print_summary(report: &Report) {
    println!(
        "seed {}: {} calls, {} answered, {} restarts, {} ms simulated, trace {}",
        report.seed, report.calls, report.answered, report.restarts, report.sim_ms, report.trace_hash
    );
    for violation in &report.violations {
        println!("  VIOLATION {violation}");
    }
}

/// Replays a scenario file and checks its stated expectation.
fn replay(path: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("FAIL {path}: {e}"))?;
    let scenario: Scenario = serde_json::from_str(&text).map_err(|e| format!("FAIL {path}: {e}"))?;
    let report = simulate(&scenario);
    let found: Vec<u8> = report.violations.iter().map(|v| v.invariant).collect();
    match (&scenario.expect, found.first()) {
        (Expect::Pass, None) => {
            Ok(format!("ok   {path}: passes ({} calls, trace {})", report.calls, report.trace_hash))
        }
        (Expect::Fails { invariant }, Some(_)) if found.contains(invariant) => {
            Ok(format!("ok   {path}: fails with invariant {invariant}, as it should"))
        }
        (expect, _) => Err(format!("FAIL {path}: expected {expect:?}, found {:?}", report.violations)),
    }
}

/// Shrinks a failing scenario: fewer calls, then fewer faults, while it still fails the same way.
fn shrink(mut scenario: Scenario, invariant: u8) -> Scenario {
    let fails = |s: &Scenario| simulate(s).violations.iter().any(|v| v.invariant == invariant);
    while scenario.calls > 1 {
        let mut fewer = scenario.clone();
        fewer.calls = scenario.calls / 2;
        fewer.faults.retain(|f| f.before_call < fewer.calls);
        if !fails(&fewer) {
            break;
        }
        scenario = fewer;
    }
    let mut index = 0;
    while index < scenario.faults.len() {
        let mut without = scenario.clone();
        without.faults.remove(index);
        if fails(&without) {
            scenario = without;
        } else {
            index += 1;
        }
    }
    scenario
}

fn explore(args: &[String], canary: Option<Canary>) -> ExitCode {
    let Some(range) = flag(args, "--seeds") else { return usage() };
    let Some((from, to)) =
        range.split_once("..").and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
    else {
        return usage();
    };
    let expect_violation = args.iter().any(|a| a == "--expect-violation");
    let out = flag(args, "--out").unwrap_or_else(|| "scenarios/found".to_string());
    let started = Instant::now();
    let mut calls = 0u64;
    let mut simulated_ms = 0u64;
    let mut crashes = [0u64; 8];
    let mut faults: std::collections::BTreeMap<&'static str, u64> = Default::default();
    let mut failing = Vec::new();
    let total = to.saturating_sub(from);
    for (n, seed) in (from..to).enumerate() {
        let mut scenario = plan_for_seed(seed);
        scenario.canary = canary;
        let report = simulate(&scenario);
        calls += report.calls as u64;
        simulated_ms += report.sim_ms;
        for (i, c) in report.crashes.iter().enumerate() {
            crashes[i] += c;
        }
        for (kind, count) in &report.faults {
            *faults.entry(kind).or_insert(0) += count;
        }
        if (n + 1) % 50 == 0 || n + 1 == total as usize {
            eprint!("\r{} / {total} seeds, {} failing", n + 1, failing.len());
        }
        if let Some(first) = report.violations.first() {
            let invariant = first.invariant;
            println!("\nseed {seed}: {first}");
            for violation in report.violations.iter().skip(1).take(3) {
                println!("  also {violation}");
            }
            let mut shrunk = shrink(scenario, invariant);
            shrunk.description = format!("seed {seed}, shrunk: {first}");
            shrunk.expect = Expect::Fails { invariant };
            let _ = std::fs::create_dir_all(&out);
            let path = format!("{out}/seed-{seed}.json");
            let written =
                std::fs::write(&path, serde_json::to_string_pretty(&shrunk).expect("scenarios serialise") + "\n");
            println!(
                "  shrunk to {} calls and {} faults: {}",
                shrunk.calls,
                shrunk.faults.len(),
                if written.is_ok() { path } else { "(not written)".into() }
            );
            failing.push(seed);
            if expect_violation {
                break;
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!();
    println!("seeds {from}..{to}: {calls} calls in {elapsed:.1} s ({:.0} calls/s)", calls as f64 / elapsed.max(1e-9));
    println!(
        "simulated time: {:.1} h in {elapsed:.1} s of wall time ({:.0}x faster)",
        simulated_ms as f64 / 3_600_000.0,
        simulated_ms as f64 / 1000.0 / elapsed.max(1e-9)
    );
    println!("crashes by the step they followed:");
    for step in 1..=7 {
        let flag = if crashes[step] == 0 { "   <- never hit" } else { "" };
        println!("  step {step}: {}{flag}", crashes[step]);
    }
    println!("  at a disk operation, or stopped by a failed write: {}", crashes[0]);
    println!("faults injected:");
    for (kind, count) in &faults {
        println!("  {kind}: {count}");
    }
    println!("violations: {} seed(s) {:?}", failing.len(), failing);
    match (expect_violation, failing.is_empty()) {
        (false, true) | (true, false) => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}
