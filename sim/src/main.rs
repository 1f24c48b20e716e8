//! `warden-sim`: run seeds, explore seed ranges, replay scenario files, draw timelines.
//!
//!   warden-sim run --seed 7 [--check-determinism] [--canary lying-fsync|ignore-idempotency-keys]
//!   warden-sim explore --seeds 0..10000 [--canary ...] [--expect-violation] [--out scenarios/found] [--json FILE]
//!   warden-sim replay scenarios/crash-after-settle.json
//!   warden-sim timeline --seed 7 > run.html

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use warden::env::Point;
use warden_faults::{Canary, Expect, Scenario};
use warden_sim::plan::coverage;
use warden_sim::plan::plan_for_seed;
use warden_sim::report::Report;
use warden_sim::shrink::{shrink, without_unfired_faults};
use warden_sim::sweep::simulate;

#[derive(Parser)]
#[command(
    name = "warden-sim",
    version,
    about = "Warden's deterministic simulator: the real server code on a simulated Env"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate one seed and print what happened.
    Run {
        #[arg(long)]
        seed: u64,
        /// Simulate it twice and fail unless both traces are the same.
        #[arg(long)]
        check_determinism: bool,
        /// Plant a bug the checker must find.
        #[arg(long, value_enum)]
        canary: Option<CanaryArg>,
        /// Print the server's log.
        #[arg(long)]
        verbose: bool,
    },
    /// Simulate a range of seeds; each failure is shrunk to a scenario file.
    Explore {
        /// A range of seeds, `A..B` (B excluded).
        #[arg(long, value_parser = parse_seeds)]
        seeds: Range<u64>,
        #[arg(long, value_enum)]
        canary: Option<CanaryArg>,
        /// Succeed only if a violation is found (for canaries); stop at the first.
        #[arg(long)]
        expect_violation: bool,
        /// Where shrunk scenarios are written.
        #[arg(long, default_value = "scenarios/found")]
        out: PathBuf,
        /// Also write the report as JSON (for CI).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Fail when a required crash window (`sim/src/plan/coverage.rs`) goes unhit.
        #[arg(long)]
        require_coverage: bool,
    },
    /// Replay scenario files and check each one's stated expectation.
    Replay {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write one seed's scenario (its world included) as JSON on stdout, without the faults
    /// that never fire, so it can be committed as a scenario file.
    Scenario {
        #[arg(long)]
        seed: u64,
    },
    /// Draw one seed's timeline as self-contained HTML on stdout.
    Timeline {
        #[arg(long)]
        seed: u64,
        #[arg(long, value_enum)]
        canary: Option<CanaryArg>,
    },
}

/// The bugs the checker is tested on.
#[derive(Clone, Copy, ValueEnum)]
enum CanaryArg {
    LyingFsync,
    IgnoreIdempotencyKeys,
}

impl From<CanaryArg> for Canary {
    fn from(canary: CanaryArg) -> Canary {
        match canary {
            CanaryArg::LyingFsync => Canary::LyingFsync,
            CanaryArg::IgnoreIdempotencyKeys => Canary::IgnoreIdempotencyKeys,
        }
    }
}

/// `A..B` with A < B.
fn parse_seeds(text: &str) -> Result<Range<u64>, String> {
    let shape = || format!("`{text}` is not a range of seeds: write A..B, e.g. 0..10000");
    let (from, to) = text.split_once("..").ok_or_else(shape)?;
    let from: u64 = from.parse().map_err(|_| shape())?;
    let to: u64 = to.parse().map_err(|_| shape())?;
    if from >= to {
        return Err(format!("`{text}` is empty: the end is excluded, so it must be greater than the start"));
    }
    Ok(from..to)
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run { seed, check_determinism, canary, verbose } => run(seed, check_determinism, canary, verbose),
        Command::Explore { seeds, canary, expect_violation, out, json, require_coverage } => {
            let options = ExploreOptions { expect_violation, require_coverage };
            explore(seeds, canary.map(Canary::from), options, &out, json.as_deref())
        }
        Command::Replay { files } => {
            let mut failed = false;
            for path in &files {
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
        Command::Scenario { seed } => {
            let scenario = without_unfired_faults(plan_for_seed(seed));
            println!("{}", serde_json::to_string_pretty(&scenario).expect("scenarios serialise"));
            ExitCode::SUCCESS
        }
        Command::Timeline { seed, canary } => {
            let mut scenario = plan_for_seed(seed);
            scenario.canary = canary.map(Canary::from);
            print!("{}", warden_sim::timeline::html(&simulate(&scenario)));
            ExitCode::SUCCESS
        }
    }
}

fn run(seed: u64, check_determinism: bool, canary: Option<CanaryArg>, verbose: bool) -> ExitCode {
    let mut scenario = plan_for_seed(seed);
    scenario.canary = canary.map(Canary::from);
    let report = simulate(&scenario);
    if verbose {
        for (at_ms, line) in &report.log {
            println!("  | {at_ms} ms {line}");
        }
        for (at_ms, lane, label) in &report.events {
            println!("  @ {at_ms} ms {lane}: {label}");
        }
    }
    print_summary(&report);
    if check_determinism {
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
fn replay(path: &Path) -> Result<String, String> {
    let path = path.display();
    let text = std::fs::read_to_string(path.to_string()).map_err(|e| format!("FAIL {path}: {e}"))?;
    let scenario: Scenario = serde_json::from_str(&text).map_err(|e| format!("FAIL {path}: {e}"))?;
    let report = simulate(&scenario);
    if let Some((position, kind)) = report.never_fired.first() {
        return Err(format!("FAIL {path}: fault {position} ({kind}) never fired"));
    }
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

/// What a sweep adds up to.
#[derive(Default)]
struct Totals {
    calls: u64,
    /// Seeds and calls of worlds served over Streamable HTTP.
    http_seeds: u64,
    http_calls: u64,
    principal_seeds: u64,
    inputs: warden_sim::report::Inputs,
    model_requests: u64,
    model_seeds: u64,
    postgres_statements: u64,
    postgres_seeds: u64,
    simulated_ms: u64,
    /// Index 0: at a disk operation or a failed write; 1..=7: after that step.
    crashes: [u64; 8],
    faults: std::collections::BTreeMap<&'static str, u64>,
    fired: std::collections::BTreeMap<&'static str, u64>,
    failing: Vec<u64>,
    /// The first violation found, as printed.
    first_violation: Option<String>,
    /// Crashes by window (`coverage.rs`).
    windows: std::collections::BTreeMap<String, u64>,
    /// Faults by kind x what was in flight when armed.
    fault_states: std::collections::BTreeMap<String, u64>,
}

impl Totals {
    fn add(&mut self, report: &Report) {
        self.calls += report.calls as u64;
        if report.over_http {
            self.http_seeds += 1;
            self.http_calls += report.calls as u64;
        }
        self.principal_seeds += report.with_principals as u64;
        self.model_requests += report.model_requests;
        self.model_seeds += (report.model_requests > 0) as u64;
        self.postgres_statements += report.postgres_statements;
        self.postgres_seeds += (report.postgres_statements > 0) as u64;
        self.inputs.asked += report.inputs.asked;
        self.inputs.served += report.inputs.served;
        self.inputs.refused += report.inputs.refused;
        self.inputs.altered_refused += report.inputs.altered_refused;
        self.simulated_ms += report.sim_ms;
        for (i, c) in report.crashes.iter().enumerate() {
            self.crashes[i] += c;
        }
        for (kind, count) in &report.faults {
            *self.faults.entry(kind).or_insert(0) += count;
        }
        for (kind, count) in &report.fired {
            *self.fired.entry(kind).or_insert(0) += count;
        }
        for (window, count) in &report.windows {
            *self.windows.entry(window.clone()).or_insert(0) += count;
        }
        for (state, count) in &report.fault_states {
            *self.fault_states.entry(state.clone()).or_insert(0) += count;
        }
    }
}

struct ExploreOptions {
    expect_violation: bool,
    require_coverage: bool,
}

fn explore(
    seeds: Range<u64>,
    canary: Option<Canary>,
    options: ExploreOptions,
    out: &Path,
    json_out: Option<&Path>,
) -> ExitCode {
    let expect_violation = options.expect_violation;
    let started = Instant::now();
    let mut totals = Totals::default();
    let progress = ProgressBar::new(seeds.end - seeds.start);
    progress.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} seeds  {per_sec}  {eta} left  {msg}")
            .expect("a valid template"),
    );
    for seed in seeds.clone() {
        let mut scenario = plan_for_seed(seed);
        scenario.canary = canary;
        let report = simulate(&scenario);
        totals.add(&report);
        progress.inc(1);
        if !report.violations.is_empty() {
            progress.suspend(|| write_shrunk(seed, scenario, &report, out));
            totals.failing.push(seed);
            totals.first_violation.get_or_insert_with(|| report.violations[0].to_string());
            progress.set_message(format!("{} failing", totals.failing.len()));
            if expect_violation {
                break;
            }
        }
    }
    progress.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    print_table(&seeds, &totals, elapsed);
    if let Some(path) = json_out {
        let report = json_report(&seeds, &totals, elapsed);
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&report).expect("JSON serialises") + "\n") {
            eprintln!("warden-sim: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    let unhit = unhit_windows(&totals);
    if options.require_coverage && !unhit.is_empty() {
        eprintln!("warden-sim: required crash windows never hit: {}", unhit.join("; "));
        return ExitCode::from(1);
    }
    match (expect_violation, totals.failing.is_empty()) {
        (false, true) | (true, false) => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

/// The required crash windows the sweep never hit.
fn unhit_windows(totals: &Totals) -> Vec<String> {
    coverage::REQUIRED
        .iter()
        .map(|(place, in_flight)| coverage::window(place, in_flight))
        .filter(|window| !totals.windows.contains_key(window))
        .collect()
}

/// Prints a failing seed, shrinks it, and writes the shrunk scenario under `out`.
fn write_shrunk(seed: u64, scenario: Scenario, report: &Report, out: &Path) {
    let first = &report.violations[0];
    let invariant = first.invariant;
    println!("seed {seed}: {first}");
    for violation in report.violations.iter().skip(1).take(3) {
        println!("  also {violation}");
    }
    let mut shrunk = shrink(scenario, invariant);
    shrunk.description = format!("seed {seed}, shrunk: {first}");
    shrunk.expect = Expect::Fails { invariant };
    let _ = std::fs::create_dir_all(out);
    let path = out.join(format!("seed-{seed}.json"));
    let written = std::fs::write(&path, serde_json::to_string_pretty(&shrunk).expect("scenarios serialise") + "\n");
    let shown = if written.is_ok() { path.display().to_string() } else { "(not written)".into() };
    println!("  shrunk to {} calls and {} faults: {shown}", shrunk.calls, shrunk.faults.len());
}

fn print_table(seeds: &Range<u64>, totals: &Totals, elapsed: f64) {
    let rate = totals.calls as f64 / elapsed.max(1e-9);
    let speed = totals.simulated_ms as f64 / 1000.0 / elapsed.max(1e-9);
    println!("| figure | value |");
    println!("|---|---|");
    println!("| seeds | {}..{} |", seeds.start, seeds.end);
    println!("| violations | {} seed(s) {:?} |", totals.failing.len(), totals.failing);
    println!("| calls | {} in {elapsed:.1} s ({rate:.0} calls/s) |", totals.calls);
    println!(
        "| over Streamable HTTP | {} seed(s), {} call(s); {} seed(s) with OAuth principals |",
        totals.http_seeds, totals.http_calls, totals.principal_seeds
    );
    println!(
        "| input requests | {} answered input_required; retries: {} served, {} refused, {} with an altered state refused |",
        totals.inputs.asked, totals.inputs.served, totals.inputs.refused, totals.inputs.altered_refused
    );
    println!(
        "| model calls | {} request(s) to the simulated provider in {} seed(s) (every 5th answered 429, every 7th 500, every 11th a proxy's error page, every 13th JSON without a completion, every 3rd without usage; each billed) |",
        totals.model_requests, totals.model_seeds
    );
    println!(
        "| PostgreSQL | {} statement(s) to the simulated server in {} seed(s) |",
        totals.postgres_statements, totals.postgres_seeds
    );
    println!(
        "| simulated time | {:.1} h ({speed:.0}x faster than wall time) |",
        totals.simulated_ms as f64 / 3_600_000.0
    );
    for step in 1..=7 {
        let never = if totals.crashes[step] == 0 { " (never hit)" } else { "" };
        println!("| crashes after step {step} | {}{never} |", totals.crashes[step]);
    }
    println!("| crashes at a disk operation, or stops after a failed write | {} |", totals.crashes[0]);
    for (kind, armed) in &totals.faults {
        let fired = totals.fired.get(kind).copied().unwrap_or(0);
        let states: Vec<String> = coverage::IN_FLIGHT
            .iter()
            .filter_map(|state| Some(format!("{state} {}", totals.fault_states.get(&coverage::window(kind, state))?)))
            .collect();
        println!("| fault: {kind} | {fired} fired of {armed} armed; armed with {} |", states.join(", "));
    }
    let places = Point::ALL.iter().map(|p| p.name()).chain(coverage::OTHER_PLACES.iter().copied());
    for place in places {
        let hits: Vec<String> = coverage::IN_FLIGHT
            .iter()
            .filter_map(|in_flight| {
                let count = totals.windows.get(&coverage::window(place, in_flight))?;
                Some(format!("{in_flight} {count}"))
            })
            .collect();
        println!("| crash windows at {place} | {} |", if hits.is_empty() { "none".into() } else { hits.join(", ") });
    }
    let unhit = unhit_windows(totals);
    println!(
        "| required crash windows never hit | {} |",
        if unhit.is_empty() { "none".into() } else { unhit.join("; ") }
    );
}

fn json_report(seeds: &Range<u64>, totals: &Totals, elapsed: f64) -> serde_json::Value {
    let crashes: serde_json::Map<String, serde_json::Value> = (1..=7)
        .map(|step| (format!("step {step}"), json!(totals.crashes[step])))
        .chain(std::iter::once(("disk operation".to_string(), json!(totals.crashes[0]))))
        .collect();
    json!({
        "seeds": {"from": seeds.start, "to": seeds.end},
        "violations": totals.failing,
        "first_violation": totals.first_violation,
        "calls": totals.calls,
        "elapsed_s": elapsed,
        "calls_per_s": totals.calls as f64 / elapsed.max(1e-9),
        "simulated_ms": totals.simulated_ms,
        "crashes": crashes,
        "faults_armed": totals.faults,
        "faults_fired": totals.fired,
        "crash_windows": totals.windows,
        "faults_by_state": totals.fault_states,
        "required_windows_unhit": unhit_windows(totals),
    })
}
