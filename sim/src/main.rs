//! `warden-sim`: run seeds, explore seed ranges, replay scenario files, draw timelines.
//!
//!   warden-sim run --seed 7 [--check-determinism] [--canary lying-fsync|ignore-idempotency-keys]
//!   warden-sim explore --seeds 0..10000 [--canary ...] [--expect-violation] [--out scenarios/found] [--json FILE]
//!   warden-sim explore --manifest path/to/manifest.json [--from-journals DIR] --seeds 0..1000
//!   warden-sim replay scenarios/crash-after-settle.json
//!   warden-sim timeline --seed 7 > run.html   (or --scenario FILE)

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use warden_faults::{Canary, Expect, Scenario, WorldFile};
use warden_sim::explore::summary::Totals;
use warden_sim::explore::{in_seed_order, Flow};
use warden_sim::plan::{plan_for_seed, plan_in};
use warden_sim::report::Report;
use warden_sim::shrink::{shrink, shrink_finding, without_unfired_faults};
use warden_sim::sweep::simulate;

#[derive(Parser)]
#[command(
    name = "warden-sim",
    version,
    about = "Warden's deterministic simulator: the real server code on a simulated Env",
    long_about = "Warden's deterministic simulator: the real server code runs on a simulated clock, disk, \
network and client, while faults are injected (crashes at each durable step, torn writes, lost fsyncs, \
clock steps, network faults) and the invariants are checked. A seed fixes everything: the same seed \
gives the same run, so a failure found once is replayed exactly.",
    after_help = "Examples:\n  warden-sim run --seed 7 --verbose\n  warden-sim explore --seeds 0..10000\n  \
warden-sim replay scenarios/*.json\n  warden-sim timeline --seed 7 > seed-7.html"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate one seed and print what happened (calls, answers, restarts, violations).
    Run {
        /// The seed: it draws the world, the workload, the faults and the scheduling.
        #[arg(long)]
        seed: u64,
        /// Simulate it twice and fail unless both traces are the same.
        #[arg(long)]
        check_determinism: bool,
        /// Plant a bug the checker must find (to see what a violation looks like).
        #[arg(long, value_enum)]
        canary: Option<CanaryArg>,
        /// Print what happened in time order: the server's log, the client's calls and
        /// answers, the faults and the crashes, each line with its simulated time.
        #[arg(long)]
        verbose: bool,
        /// Simulate the seed in your own manifest's world (see `explore --manifest`).
        #[arg(long, value_name = "MANIFEST")]
        manifest: Option<PathBuf>,
        /// Start from this journals directory (see `explore --from-journals`).
        #[arg(long, value_name = "DIR", requires = "manifest")]
        from_journals: Option<PathBuf>,
    },
    /// Simulate a range of seeds; each failing seed is shrunk to a scenario file.
    Explore {
        /// A range of seeds, `A..B` (B excluded), e.g. 0..10000.
        #[arg(long, value_parser = parse_seeds)]
        seeds: Range<u64>,
        /// Plant a bug the checker must find (with --expect-violation: a test of the checker).
        #[arg(long, value_enum)]
        canary: Option<CanaryArg>,
        /// Succeed only if a violation is found (for canaries and planted bugs); stop at the first.
        #[arg(long)]
        expect_violation: bool,
        /// With --expect-violation: succeed only if the first violation found breaks invariant N,
        /// the one a planted bug names (a bug "caught" by an unrelated panic is not caught).
        #[arg(long, value_name = "N", requires = "expect_violation")]
        expect_invariant: Option<u8>,
        /// Where shrunk scenarios are written.
        #[arg(long, default_value = "scenarios/found")]
        out: PathBuf,
        /// Also write the report as JSON (for CI).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Fail when a required crash window (`sim/src/plan/coverage.rs`) goes unhit.
        #[arg(long)]
        require_coverage: bool,
        /// Seeds simulated at once (default: the machine's cores). The report is the same
        /// whatever the number.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
        jobs: Option<u16>,
        /// Add a row per fault kind and per place a crash can land to the summary.
        #[arg(long)]
        details: bool,
        /// Test your own manifest instead of generated worlds: its tools and programs run on the
        /// simulated disk, clock and network, with services modelled from its grants and calls
        /// drawn from its programs' docstring examples (or input schemas), under every fault.
        #[arg(long, value_name = "MANIFEST")]
        manifest: Option<PathBuf>,
        /// Start from a journals directory as a server left it (killed, or copied from
        /// production): every seed starts the manifest's server on it, so recovery, crashes
        /// during recovery, the operator's resolutions and further calls are explored from there.
        #[arg(long, value_name = "DIR", requires = "manifest")]
        from_journals: Option<PathBuf>,
    },
    /// Replay scenario files and check each one's stated expectation (pass, or fail naming an
    /// invariant).
    Replay {
        /// Scenario files (JSON, as `explore` and `scenario` write them).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write one seed's scenario (its world included) as JSON on stdout, without the faults
    /// that never fire, so it can be committed as a scenario file.
    Scenario {
        /// The seed to write down.
        #[arg(long)]
        seed: u64,
    },
    /// Draw one seed's (or one scenario file's) timeline as self-contained HTML on stdout.
    Timeline {
        /// The seed to draw.
        #[arg(long, required_unless_present = "scenario", conflicts_with = "scenario")]
        seed: Option<u64>,
        /// A scenario file to draw (as `explore` and `scenario` write them).
        #[arg(long, value_name = "FILE")]
        scenario: Option<PathBuf>,
        /// Plant a bug the checker must find.
        #[arg(long, value_enum)]
        canary: Option<CanaryArg>,
    },
}

/// The bugs the checker is tested on.
#[derive(Clone, Copy, ValueEnum)]
enum CanaryArg {
    /// fsync acknowledges without making anything durable.
    LyingFsync,
    /// The payment service ignores idempotency keys (a resent refund pays twice).
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
        Command::Run { seed, check_determinism, canary, verbose, manifest, from_journals } => {
            match own_world(manifest.as_deref(), from_journals.as_deref()) {
                Ok(own) => run(seed, check_determinism, canary, verbose, own.as_ref()),
                Err(code) => code,
            }
        }
        Command::Explore {
            seeds,
            canary,
            expect_violation,
            expect_invariant,
            out,
            json,
            require_coverage,
            jobs,
            details,
            manifest,
            from_journals,
        } => {
            let own = match own_world(manifest.as_deref(), from_journals.as_deref()) {
                Ok(own) => own,
                Err(code) => return code,
            };
            let jobs = jobs.map_or_else(|| std::thread::available_parallelism().map_or(1, usize::from), usize::from);
            let options = ExploreOptions { expect_violation, expect_invariant, require_coverage, jobs, details, own };
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
        Command::Timeline { seed, scenario, canary } => timeline(seed, scenario.as_deref(), canary),
    }
}

/// Prints the timeline of a seed or of a scenario file.
fn timeline(seed: Option<u64>, scenario: Option<&Path>, canary: Option<CanaryArg>) -> ExitCode {
    let planned = match (seed, scenario) {
        (Some(seed), _) => Ok(plan_for_seed(seed)),
        (None, Some(path)) => read_scenario(path),
        (None, None) => Err("name a --seed or a --scenario file".to_string()),
    };
    let mut scenario = match planned {
        Ok(scenario) => scenario,
        Err(problem) => {
            eprintln!("warden-sim: {problem}");
            return ExitCode::from(2);
        }
    };
    if canary.is_some() {
        scenario.canary = canary.map(Canary::from);
    }
    print!("{}", warden_sim::timeline::html(&simulate(&scenario)));
    ExitCode::SUCCESS
}

/// The operator's world `--manifest` names (from the journals `--from-journals` names, if
/// given), read once; a problem is printed, naming the file.
fn own_world(manifest: Option<&Path>, journals: Option<&Path>) -> Result<Option<WorldFile>, ExitCode> {
    let Some(path) = manifest else { return Ok(None) };
    let loaded = warden_sim::workload::own::load(path).and_then(|mut world| {
        if let Some(dir) = journals {
            warden_sim::workload::own::with_journals(&mut world, dir)?;
        }
        Ok(world)
    });
    loaded.map(Some).map_err(|problem| {
        eprintln!("warden-sim: {problem}");
        ExitCode::from(2)
    })
}

fn run(
    seed: u64,
    check_determinism: bool,
    canary: Option<CanaryArg>,
    verbose: bool,
    own: Option<&WorldFile>,
) -> ExitCode {
    let mut scenario = plan_in(seed, own);
    scenario.canary = canary.map(Canary::from);
    let report = simulate(&scenario);
    if verbose {
        print!("{}", in_time_order(&report));
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

/// The server's log and the simulation's events (calls, answers, faults, crashes) merged in
/// time order, each line with its simulated time; at the same moment the server's lines come
/// first (the client reads what the server wrote).
fn in_time_order(report: &Report) -> String {
    let log = report.log.iter().map(|(at, line)| (*at, "server", line.as_str()));
    let events = report.events.iter().map(|(at, lane, label)| (*at, lane.as_str(), label.as_str()));
    let mut lines: Vec<(u64, &str, &str)> = log.collect();
    lines.extend(events);
    // A stable sort: within one moment, each source keeps its own order.
    lines.sort_by_key(|(at, _, _)| *at);
    let mut out = String::new();
    for (at, lane, text) in lines {
        out.push_str(&format!("{} {lane:<10} {text}\n", clock_time(at)));
    }
    out
}

/// Simulated ms as `hh:mm:ss.mmm` (days past the first shown as `+Nd`).
fn clock_time(ms: u64) -> String {
    let (days, ms) = (ms / 86_400_000, ms % 86_400_000);
    let (h, m, s, milli) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let day = if days > 0 { format!("+{days}d ") } else { String::new() };
    format!("{day}{h:02}:{m:02}:{s:02}.{milli:03}")
}

fn print_summary(report: &Report) {
    println!(
        "seed {}: {} calls, {} answered, {} restarts, {} ms simulated, trace {}",
        report.seed, report.calls, report.answered, report.restarts, report.sim_ms, report.trace_hash
    );
    for violation in &report.violations {
        println!("  VIOLATION {violation}");
    }
    for finding in &report.findings {
        println!("  FINDING ({}) in `{}`: {}", finding.kind, finding.tool, finding.message);
    }
}

/// The most bytes a scenario file may have (one carries its world: manifest, programs, and
/// with `--from-journals` the journals).
const SCENARIO_BYTES_MAX: u64 = 96 << 20;

/// A scenario file, refused past `SCENARIO_BYTES_MAX` or when it does not parse, naming it.
fn read_scenario(path: &Path) -> Result<Scenario, String> {
    let shown = path.display();
    let size = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?.len();
    if size > SCENARIO_BYTES_MAX {
        return Err(format!("{shown}: {size} bytes, over the {SCENARIO_BYTES_MAX} a scenario file may have"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    let scenario: Scenario = serde_json::from_str(&text).map_err(|e| format!("{shown}: {e}"))?;
    scenario.check_bounds().map_err(|problem| format!("{shown}: {problem}"))?;
    let peers = scenario.world.as_ref().map_or(0, |world| world.peers);
    if peers > warden_faults::PEERS_MAX {
        return Err(format!(
            "{shown}: world.peers is {peers}, over the limit of {} instances beside the first",
            warden_faults::PEERS_MAX
        ));
    }
    Ok(scenario)
}

/// Replays a scenario file and checks its stated expectation.
fn replay(path: &Path) -> Result<String, String> {
    let scenario = read_scenario(path).map_err(|problem| format!("FAIL {problem}"))?;
    let path = path.display();
    let report = simulate(&scenario);
    if let Some((position, kind)) = report.never_fired.first() {
        return Err(format!("FAIL {path}: fault {position} ({kind}) never fired"));
    }
    let found: Vec<u8> = report.violations.iter().map(|v| v.invariant).collect();
    match (&scenario.expect, found.first()) {
        (Expect::Pass, None) => {
            let findings: Vec<String> =
                report.findings.iter().map(|f| format!("; finding ({}) in `{}`", f.kind, f.tool)).collect();
            Ok(format!(
                "ok   {path}: passes ({} calls, trace {}){}",
                report.calls,
                report.trace_hash,
                findings.concat()
            ))
        }
        (Expect::Fails { invariant }, Some(_)) if found.contains(invariant) => {
            Ok(format!("ok   {path}: fails with invariant {invariant}, as it should"))
        }
        (expect, _) => Err(format!("FAIL {path}: expected {expect:?}, found {:?}", report.violations)),
    }
}

/// Gives the pages of freed memory back to the system after each seed. A world whose
/// programs return results near the 1 MiB limit holds about 100 MB for a moment (a result
/// escaped in a journal line is up to 6 MiB, and it is copied while it is scrubbed, encoded,
/// written and read back); glibc keeps such freed memory in its heaps, so without this the
/// resident memory of a sweep stays at the heaviest seed met so far, and grows with the
/// seeds swept only because a longer sweep meets a heavier seed.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The process's resident memory now and at most, as Linux reports it (`/proc/self/status`).
fn resident_memory() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|line| line.starts_with(name))?;
        line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()
    };
    let (now, most) = (field("VmRSS:")?, field("VmHWM:")?);
    Some(format!("resident memory: {} MB now, {} MB at most", now / 1000, most / 1000))
}

struct ExploreOptions {
    expect_violation: bool,
    /// The invariant the first violation must break (`--expect-invariant`).
    expect_invariant: Option<u8>,
    require_coverage: bool,
    jobs: usize,
    details: bool,
    /// The operator's world (`--manifest`), when not generated worlds.
    own: Option<WorldFile>,
}

fn explore(
    seeds: Range<u64>,
    canary: Option<Canary>,
    options: ExploreOptions,
    out: &Path,
    json_out: Option<&Path>,
) -> ExitCode {
    let started = Instant::now();
    let mut totals = Totals::default();
    // The invariants the seed that stopped an expecting sweep broke.
    let mut stopped_on: Vec<u8> = Vec::new();
    let progress = progress_bar(seeds.end - seeds.start);
    in_seed_order(seeds.clone(), options.jobs, (canary, options.own.as_ref()), |report| {
        let new_finding = report.findings.iter().position(|f| !totals.findings.contains_key(&(f.kind, f.tool.clone())));
        totals.add(&report);
        progress.inc(1);
        return_freed_memory();
        if let Some(index) = new_finding {
            // The first seed of each finding, shrunk, replays it (`run --manifest` too).
            let mut scenario = plan_in(report.seed, options.own.as_ref());
            scenario.canary = canary;
            progress.suspend(|| write_finding(&scenario, &report, index, out));
        }
        if report.violations.is_empty() {
            return Flow::Continue;
        }
        progress.set_message(format!("{} violation(s)", totals.failing_count));
        let mut scenario = plan_in(report.seed, options.own.as_ref());
        scenario.canary = canary;
        progress.suspend(|| write_shrunk(report.seed, scenario, &report, out));
        if options.expect_violation {
            stopped_on = report.violations.iter().map(|violation| violation.invariant).collect();
            Flow::Stop
        } else {
            Flow::Continue
        }
    });
    progress.finish_and_clear();
    print!("{}", totals.table(&seeds, options.details));
    print!("{}", totals.findings_in_words());
    // What the findings rest on: the services' behaviour the simulator cannot know.
    for line in options.own.iter().flat_map(warden_sim::workload::own::assumptions) {
        println!("{line}");
    }
    eprintln!("{}", totals.speed_line(started.elapsed().as_secs_f64(), options.jobs));
    if let Some(memory) = resident_memory() {
        eprintln!("{memory}");
    }
    if let Some(path) = json_out {
        let report = totals.json(&seeds);
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&report).expect("JSON serialises") + "\n") {
            eprintln!("warden-sim: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    explored_exit(&totals, &options, &stopped_on)
}

/// How a sweep ends: a required window unhit, findings, a planted bug caught by another
/// invariant than it names (`stopped_on`: those the stopping seed broke), or the violations
/// found against those expected.
fn explored_exit(totals: &Totals, options: &ExploreOptions, stopped_on: &[u8]) -> ExitCode {
    let unhit = totals.unhit_windows();
    if options.require_coverage && !unhit.is_empty() {
        eprintln!("warden-sim: required crash windows never hit: {}", unhit.join("; "));
        return ExitCode::from(1);
    }
    if totals.has_findings() && !options.expect_violation {
        eprintln!("warden-sim: the manifest's settings let the findings above happen");
        return ExitCode::from(1);
    }
    if let Some(wanted) =
        options.expect_invariant.filter(|wanted| !stopped_on.is_empty() && !stopped_on.contains(wanted))
    {
        eprintln!(
            "warden-sim: the violation found breaks invariant(s) {stopped_on:?}, not invariant {wanted} the planted bug \
             names: it was caught by something else"
        );
        return ExitCode::from(1);
    }
    match (options.expect_violation, totals.failing_count == 0) {
        (false, true) | (true, false) => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

/// Writes the seed of a new finding, shrunk to what still raises it, as a scenario file (with
/// its world) under `out`; the description is the shrunk scenario's own finding.
fn write_finding(scenario: &Scenario, report: &Report, index: usize, out: &Path) {
    let first = &report.findings[index];
    let mut scenario = shrink_finding(without_unfired_faults(scenario.clone()), first.kind, &first.tool);
    let shrunk = warden_sim::sweep::simulate(&scenario);
    let same = |finding: &&warden_sim::report::Finding| finding.kind == first.kind && finding.tool == first.tool;
    let message = shrunk.findings.iter().find(same).map_or(&first.message, |finding| &finding.message);
    scenario.description = format!("seed {}: finding ({}) in `{}`: {message}", report.seed, first.kind, first.tool);
    let _ = std::fs::create_dir_all(out);
    let path = out.join(format!("finding-seed-{}.json", report.seed));
    let written = std::fs::write(&path, serde_json::to_string_pretty(&scenario).expect("scenarios serialise") + "\n");
    let shown = if written.is_ok() { path.display().to_string() } else { "(not written)".into() };
    println!("seed {}: finding ({}) in `{}`: {shown}", report.seed, first.kind, first.tool);
}

/// A progress bar drawn at most twice a second (a redraw per seed would flood a log), with
/// seeds per second and the violations so far.
fn progress_bar(seeds: u64) -> ProgressBar {
    let progress = ProgressBar::with_draw_target(Some(seeds), ProgressDrawTarget::stderr_with_hz(2));
    progress.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} seeds  {per_sec:.1}  {eta} left  {msg}")
            .expect("a valid template"),
    );
    progress.set_message("0 violations");
    progress
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
