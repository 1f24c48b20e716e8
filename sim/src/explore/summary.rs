//! What a sweep adds up to, and how it is told: a short table of what matters (seeds,
//! violations, calls, crashes, faults, crash windows), the rest behind `--details`, and the
//! same as JSON for CI. Nothing here depends on wall time, so a sweep's report is the same
//! byte for byte whatever the number of jobs; its speed is told apart (`speed_line`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::ops::Range;

use serde_json::json;
use warden::env::Point;

use crate::plan::coverage;
use crate::report::{Inputs, Report};

/// Failing seeds listed by number; past it, only counted (the shrunk scenarios hold them all).
const FAILING_LISTED_MAX: usize = 100;

/// What a sweep adds up to: counters and coverage sets, never a seed's transcript, so its
/// size does not grow with the seeds swept.
#[derive(Default)]
pub struct Totals {
    pub seeds: u64,
    pub calls: u64,
    pub answered: u64,
    /// Seeds and calls of worlds served over Streamable HTTP.
    pub http_seeds: u64,
    /// Seeds whose world kept its state in the PostgreSQL store, and those of them that ran
    /// instances beside the first (`peers.rs`).
    pub store_seeds: u64,
    pub peer_seeds: u64,
    pub http_calls: u64,
    pub principal_seeds: u64,
    pub inputs: Inputs,
    pub model_requests: u64,
    pub model_seeds: u64,
    pub postgres_statements: u64,
    pub postgres_seeds: u64,
    pub simulated_ms: u64,
    pub restarts: u64,
    /// Index 0: at a disk operation or a failed write; 1..=7: after that step.
    pub crashes: [u64; 8],
    pub faults: BTreeMap<&'static str, u64>,
    pub fired: BTreeMap<&'static str, u64>,
    /// How many seeds failed, and the first `FAILING_LISTED_MAX` of them.
    pub failing_count: u64,
    pub failing: Vec<u64>,
    /// The first violation found, as printed.
    pub first_violation: Option<String>,
    /// Crashes by window (`coverage.rs`).
    pub windows: BTreeMap<String, u64>,
    /// Faults by kind x what was in flight when armed.
    pub fault_states: BTreeMap<String, u64>,
    /// In an operator's world: each kind of finding by tool (`checks/own.rs`), with the seeds
    /// it came up in and the first seed's message.
    pub findings: BTreeMap<(&'static str, String), FindingSeen>,
    /// In an operator's world: how each tool's calls went, over the sweep.
    pub tool_outcomes: BTreeMap<String, crate::report::ToolOutcome>,
}

/// One kind of finding about one tool, over a sweep.
#[derive(Clone, Debug)]
pub struct FindingSeen {
    pub seeds: u64,
    pub first_seed: u64,
    pub message: String,
}

impl Totals {
    pub fn add(&mut self, report: &Report) {
        self.seeds += 1;
        self.calls += u64::from(report.calls);
        self.answered += u64::from(report.answered);
        if report.over_http {
            self.http_seeds += 1;
            self.http_calls += u64::from(report.calls);
        }
        self.principal_seeds += u64::from(report.with_principals);
        self.store_seeds += u64::from(report.on_the_store);
        self.peer_seeds += u64::from(report.peers > 0);
        self.model_requests += report.model_requests;
        self.model_seeds += u64::from(report.model_requests > 0);
        self.postgres_statements += report.postgres_statements;
        self.postgres_seeds += u64::from(report.postgres_statements > 0);
        self.inputs.asked += report.inputs.asked;
        self.inputs.served += report.inputs.served;
        self.inputs.refused += report.inputs.refused;
        self.inputs.altered_refused += report.inputs.altered_refused;
        self.inputs.session_asked += report.inputs.session_asked;
        self.inputs.session_answered += report.inputs.session_answered;
        self.simulated_ms += report.sim_ms;
        self.restarts += u64::from(report.restarts);
        for (total, count) in self.crashes.iter_mut().zip(report.crashes) {
            *total += count;
        }
        add_counts(&mut self.faults, report.faults.iter().map(|(k, v)| (*k, *v)));
        add_counts(&mut self.fired, report.fired.iter().map(|(k, v)| (*k, *v)));
        add_counts(&mut self.windows, report.windows.iter().map(|(k, v)| (k.clone(), *v)));
        add_counts(&mut self.fault_states, report.fault_states.iter().map(|(k, v)| (k.clone(), *v)));
        if let Some(first) = report.violations.first() {
            self.failing_count += 1;
            if self.failing.len() < FAILING_LISTED_MAX {
                self.failing.push(report.seed);
            }
            self.first_violation.get_or_insert_with(|| first.to_string());
        }
        for (tool, outcome) in &report.tool_outcomes {
            self.tool_outcomes.entry(tool.clone()).or_default().add(outcome);
        }
        for finding in &report.findings {
            let seen = self.findings.entry((finding.kind, finding.tool.clone())).or_insert_with(|| FindingSeen {
                seeds: 0,
                first_seed: report.seed,
                message: finding.message.clone(),
            });
            seen.seeds += 1;
        }
    }

    /// Whether the sweep found anything about the operator's configuration.
    /// (What only relies on a service honouring idempotency keys is told, not a finding that
    /// fails the sweep: the operator knows their service, the simulator does not.)
    pub fn has_findings(&self) -> bool {
        self.findings.keys().any(|(kind, _)| *kind != crate::checks::own::RELIES_ON_KEYS)
    }

    /// A warning for each tool none of whose calls succeeded (a tool may fail by design, as
    /// the toolbox's `always_fails` does, so it is told, not counted as a finding).
    fn never_succeeded(&self) -> Vec<String> {
        (self.tool_outcomes.iter())
            .filter_map(|(tool, outcome)| crate::checks::own::never_succeeded(tool, outcome))
            .collect()
    }

    /// The findings about the operator's configuration, one paragraph each, after a warning
    /// for each tool that never succeeded.
    pub fn findings_in_words(&self) -> String {
        let mut out = String::new();
        for message in self.never_succeeded() {
            let _ = writeln!(out, "warning: {message}");
        }
        for ((kind, tool), seen) in &self.findings {
            let label = match *kind == crate::checks::own::RELIES_ON_KEYS {
                true => "depends on the service",
                false => "finding",
            };
            let _ = writeln!(
                out,
                "{label} ({kind}) in `{tool}`, at {} seed(s), first seed {}: {}",
                seen.seeds, seen.first_seed, seen.message
            );
        }
        out
    }

    /// The required crash windows the sweep never hit.
    pub fn unhit_windows(&self) -> Vec<String> {
        coverage::REQUIRED
            .iter()
            .map(|(place, in_flight)| coverage::window(place, in_flight))
            .filter(|window| !self.windows.contains_key(window))
            .collect()
    }

    /// The summary: under 25 lines, what matters; `details` adds a row per fault kind and per
    /// place a crash can land.
    pub fn table(&self, seeds: &Range<u64>, details: bool) -> String {
        let mut out = String::new();
        let mut row = |figure: &str, value: String| {
            let _ = writeln!(out, "| {figure} | {value} |");
        };
        row("figure", "value".into());
        row("---", "---".into());
        row("seeds", format!("{}..{} ({} swept)", seeds.start, seeds.end, self.seeds));
        row("violations", self.violations_in_words());
        if !self.tool_outcomes.is_empty() {
            let calls: Vec<String> = (self.tool_outcomes.iter())
                .map(|(tool, outcome)| format!("`{tool}` {} of {}", outcome.succeeded, outcome.answered))
                .collect();
            row("calls that succeeded", calls.join(", "));
        }
        if !self.findings.is_empty() {
            let kinds: Vec<String> = self
                .findings
                .iter()
                .map(|((kind, tool), seen)| format!("{kind} in `{tool}` at {} seed(s)", seen.seeds))
                .collect();
            row("findings", kinds.join("; "));
        }
        row("calls", format!("{} sent, {} answered", self.calls, self.answered));
        row("worlds", self.worlds_in_words());
        row("simulated time", format!("{:.1} h, {} restarts", self.simulated_ms as f64 / 3_600_000.0, self.restarts));
        row("crashes", self.crashes_in_words());
        row("faults", self.faults_in_words());
        row("crash windows", self.windows_in_words());
        row("services", self.services_in_words());
        row(
            "input requests",
            format!(
                "{} answered input_required; retries: {} served, {} refused ({} with an altered state); \
                 2025-11-25 sessions asked {} times, {} answered",
                self.inputs.asked,
                self.inputs.served,
                self.inputs.refused,
                self.inputs.altered_refused,
                self.inputs.session_asked,
                self.inputs.session_answered
            ),
        );
        if details {
            self.detail_rows(&mut row);
        }
        out
    }

    fn violations_in_words(&self) -> String {
        match (self.failing_count, &self.first_violation) {
            (0, _) => "none".into(),
            (count, first) => {
                let listed: Vec<String> = self.failing.iter().map(u64::to_string).collect();
                let more = if count > self.failing.len() as u64 { ", ..." } else { "" };
                let first = first.as_deref().unwrap_or_default();
                format!("{count} seed(s): {}{more}; the first: {first}", listed.join(", "))
            }
        }
    }

    fn worlds_in_words(&self) -> String {
        format!(
            "{} over stdio, {} over Streamable HTTP ({} calls; {} with OAuth principals); {} on the PostgreSQL store \
             ({} with two or three instances)",
            self.seeds - self.http_seeds,
            self.http_seeds,
            self.http_calls,
            self.principal_seeds,
            self.store_seeds,
            self.peer_seeds
        )
    }

    fn crashes_in_words(&self) -> String {
        let total: u64 = self.crashes.iter().sum();
        let steps: Vec<String> = (1..=7).map(|step| self.crashes[step].to_string()).collect();
        let never: Vec<String> = (1..=7).filter(|step| self.crashes[*step] == 0).map(|s| s.to_string()).collect();
        let never = if never.is_empty() { String::new() } else { format!("; never after step {}", never.join(", ")) };
        format!(
            "{total}: after steps 1 to 7: {}; at a disk operation or a failed write: {}{never}",
            steps.join(", "),
            self.crashes[0]
        )
    }

    fn faults_in_words(&self) -> String {
        let armed: u64 = self.faults.values().sum();
        let fired: u64 = self.fired.values().sum();
        let kinds_fired = self.faults.keys().filter(|kind| self.fired.get(*kind).is_some_and(|n| *n > 0)).count();
        format!("{fired} fired of {armed} armed; {kinds_fired} of {} kinds armed fired", self.faults.len())
    }

    fn windows_in_words(&self) -> String {
        let unhit = self.unhit_windows();
        let unhit = if unhit.is_empty() { "none".into() } else { unhit.join("; ") };
        format!("{} hit; required and never hit: {unhit}", self.windows.len())
    }

    fn services_in_words(&self) -> String {
        format!(
            "{} model request(s) in {} seed(s); {} PostgreSQL statement(s) in {} seed(s)",
            self.model_requests, self.model_seeds, self.postgres_statements, self.postgres_seeds
        )
    }

    fn detail_rows(&self, row: &mut impl FnMut(&str, String)) {
        for (kind, armed) in &self.faults {
            let fired = self.fired.get(kind).copied().unwrap_or(0);
            let states: Vec<String> = coverage::IN_FLIGHT
                .iter()
                .filter_map(|state| Some(format!("{state} {}", self.fault_states.get(&coverage::window(kind, state))?)))
                .collect();
            row(&format!("fault: {kind}"), format!("{fired} fired of {armed} armed; armed with {}", states.join(", ")));
        }
        let places = Point::ALL.iter().map(|p| p.name()).chain(coverage::OTHER_PLACES.iter().copied());
        for place in places {
            let hits: Vec<String> = coverage::IN_FLIGHT
                .iter()
                .filter_map(|in_flight| {
                    Some(format!("{in_flight} {}", self.windows.get(&coverage::window(place, in_flight))?))
                })
                .collect();
            row(&format!("crash windows at {place}"), if hits.is_empty() { "none".into() } else { hits.join(", ") });
        }
    }

    /// The report as JSON, for CI: the same figures, no wall time.
    pub fn json(&self, seeds: &Range<u64>) -> serde_json::Value {
        let crashes: serde_json::Map<String, serde_json::Value> = (1..=7)
            .map(|step| (format!("step {step}"), json!(self.crashes[step])))
            .chain(std::iter::once(("disk operation".to_string(), json!(self.crashes[0]))))
            .collect();
        json!({
            "seeds": {"from": seeds.start, "to": seeds.end, "swept": self.seeds},
            "violations": self.failing,
            "failing_seeds": self.failing_count,
            "first_violation": self.first_violation,
            "calls": self.calls,
            "answered": self.answered,
            "simulated_ms": self.simulated_ms,
            "restarts": self.restarts,
            "crashes": crashes,
            "faults_armed": self.faults,
            "faults_fired": self.fired,
            "crash_windows": self.windows,
            "faults_by_state": self.fault_states,
            "required_windows_unhit": self.unhit_windows(),
            "findings": self.findings.iter().map(|((kind, tool), seen)| json!({
                "kind": kind, "tool": tool, "seeds": seen.seeds, "first_seed": seen.first_seed, "message": seen.message,
            })).collect::<Vec<_>>(),
        })
    }

    /// How fast the sweep went: told on stderr, apart from the report.
    pub fn speed_line(&self, elapsed_s: f64, jobs: usize) -> String {
        let elapsed = elapsed_s.max(1e-9);
        format!(
            "swept {} seeds in {elapsed_s:.1} s on {jobs} job(s): {:.1} seeds/s, {:.0} calls/s, simulated time {:.0}x wall time",
            self.seeds,
            self.seeds as f64 / elapsed,
            self.calls as f64 / elapsed,
            self.simulated_ms as f64 / 1000.0 / elapsed
        )
    }
}

fn add_counts<K: Ord>(totals: &mut BTreeMap<K, u64>, counts: impl Iterator<Item = (K, u64)>) {
    for (key, count) in counts {
        *totals.entry(key).or_insert(0) += count;
    }
}
