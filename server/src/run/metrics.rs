//! The server's metrics in the Prometheus text format (OpenMetrics, by the Prometheus project's
//! own `prometheus-client`): counters and histograms kept as things happen, gauges read from
//! the ledger and the run files when scraped. Every label's values are bounded: tools and
//! kinds come from the manifest, outcomes and statuses are fixed sets, and principals are cut
//! at `PRINCIPALS_SHOWN_MAX` per tool.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::run::runs::Runs;
use crate::store::ledger::{Counting, RunPhase};

/// Label sets: a few fixed keys, values from bounded sets.
type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;
type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// Per tool, the principals whose quota use is shown (the first in order); the rest are left
/// out, so a flood of principals cannot grow a scrape without bound.
pub const PRINCIPALS_SHOWN_MAX: usize = 100;

/// Seconds: 1 ms to about 17 min, quadrupling (a run, an action: a program's steps, a service).
fn duration_histogram() -> Histogram {
    Histogram::new([0.001, 0.004, 0.016, 0.064, 0.256, 1.024, 4.096, 16.384, 65.536, 262.144, 1048.576])
}

/// What the server counts as it works. Cheap to clone (each metric is shared).
#[derive(Clone)]
pub struct Metrics {
    calls: Family<Labels, Counter>,
    run_seconds: Histograms,
    action_seconds: Histograms,
    http_requests: Family<Labels, Counter>,
    /// 2025-11-25 HTTP sessions open now (set by the HTTP front).
    pub http_sessions: Gauge,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            calls: Family::default(),
            run_seconds: Family::new_with_constructor(duration_histogram),
            action_seconds: Family::new_with_constructor(duration_histogram),
            http_requests: Family::default(),
            http_sessions: Gauge::default(),
        }
    }
}

impl Metrics {
    /// A `tools/call` answered: `outcome` is one of a fixed set (see `call::outcome_label`).
    pub fn count_call(&self, tool: &str, outcome: &'static str) {
        self.calls.get_or_create(&vec![("tool", tool.to_string()), ("outcome", outcome.to_string())]).inc();
    }

    /// A run settled, `ms` after its reserve.
    pub fn observe_run(&self, tool: &str, ms: u64) {
        self.run_seconds.get_or_create(&vec![("tool", tool.to_string())]).observe(ms as f64 / 1000.0);
    }

    /// An action of `kind` performed (or tried) in `us` microseconds.
    pub fn observe_action(&self, kind: &str, us: u64) {
        self.action_seconds.get_or_create(&vec![("kind", kind.to_string())]).observe(us as f64 / 1e6);
    }

    /// An HTTP request answered with `status`.
    pub fn count_http(&self, status: u16) {
        self.http_requests.get_or_create(&vec![("status", status.to_string())]).inc();
    }
}

/// The scrape: every metric, the gauges read now.
pub async fn exposition(runs: &Runs) -> String {
    let metrics = &runs.metrics;
    let mut root = Registry::default();
    if let Some(usage) = runs.env.process.usage() {
        process_metrics(&mut root, usage);
    }
    let registry = root.sub_registry_with_prefix("warden");
    let build = Family::<Labels, Gauge>::default();
    build.get_or_create(&vec![("version", crate::VERSION.to_string())]).set(1);
    registry.register("build_info", "The version of Warden serving", build);
    registry.register("calls", "tools/call requests answered, by tool and outcome", metrics.calls.clone());
    registry.register("run_duration_seconds", "Runs from reserve to settle, by tool", metrics.run_seconds.clone());
    registry.register(
        "action_duration_seconds",
        "Actions (HTTP, database, model calls) from send to answer, by kind",
        metrics.action_seconds.clone(),
    );
    registry.register("ledger_fsync_seconds", "Each commit's fsync of the ledger", runs.ledger.fsync_seconds.clone());
    registry.register("http_requests", "HTTP requests answered, by status", metrics.http_requests.clone());
    registry.register("http_sessions", "2025-11-25 HTTP sessions open", metrics.http_sessions.clone());
    registry.register("runs", "Unfinished runs, by state", run_states(runs).await);
    let draining = prometheus_client::metrics::gauge::ConstGauge::new(runs.is_draining() as i64);
    registry.register("draining", "1 while the server stops (drains: no new calls), else 0", draining);
    let (used, limit) = quota_gauges(runs);
    registry.register("quota_used", "Quota use in the current window, by tool, principal and unit", used);
    registry.register("quota_limit", "Quota limits, by tool, principal and unit", limit);
    let mut text = String::new();
    encode(&mut text, &root).expect("writing to a String cannot fail");
    text
}

/// The process's own use of the machine, under the names every Prometheus client library
/// gives them (`process_*`), so the dashboards and alerts written for those read it.
fn process_metrics(registry: &mut Registry, usage: crate::env::ProcessUsage) {
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    registry.register("process_cpu_seconds", "User and system CPU time spent", ConstCounter::new(usage.cpu_seconds));
    let resident = ConstGauge::new(usage.resident_memory_bytes as i64);
    registry.register("process_resident_memory_bytes", "Resident memory size", resident);
    registry.register("process_open_fds", "Open file descriptors", ConstGauge::new(usage.open_fds as i64));
    let started = ConstGauge::new(usage.start_time_seconds);
    registry.register("process_start_time_seconds", "Start time of the process since the Unix epoch", started);
}

/// Unfinished runs by state: executing here, waiting for an operator, halted, waiting for
/// their client's input, or stopped (a drain, a failed write) until the next start.
async fn run_states(runs: &Runs) -> Family<Labels, Gauge> {
    let states = Family::<Labels, Gauge>::default();
    for state in ["in_progress", "waiting_for_operator", "halted", "waiting_for_input", "interrupted"] {
        states.get_or_create(&vec![("state", state.to_string())]).set(0);
    }
    let open: Vec<(String, String)> = (runs.ledger.state().runs.values())
        .filter(|entry| entry.phase == RunPhase::Open)
        .map(|entry| (entry.run.clone(), entry.tool.clone()))
        .collect();
    for (run, tool) in open {
        let state = if runs.is_in_progress(&run) {
            "in_progress"
        } else if runs.inputs.awaited(&run).is_some() {
            "waiting_for_input"
        } else {
            match runs.read_waiting(&tool, &run).await {
                Ok(Some(record)) if record.halted => "halted",
                Ok(Some(_)) => "waiting_for_operator",
                Ok(None) | Err(_) => "interrupted",
            }
        };
        states.get_or_create(&vec![("state", state.to_string())]).inc();
    }
    states
}

/// Each quota's use and limit in its window: calls, model tokens, and money in its currency's
/// units; per principal (the first `PRINCIPALS_SHOWN_MAX`) where each principal has the quota.
fn quota_gauges(runs: &Runs) -> (Family<Labels, FloatGauge>, Family<Labels, FloatGauge>) {
    let (used, limit) = (Family::<Labels, FloatGauge>::default(), Family::<Labels, FloatGauge>::default());
    let state = runs.ledger.state();
    let now = runs.env.clock.now_ms().max(state.last_at_ms);
    for tool in &runs.catalog.tools {
        let Some(quota) = &tool.config.quota else { continue };
        let name = &tool.config.name;
        let mut whose: Vec<(String, Counting)> = vec![(String::new(), Counting::AllRuns)];
        if quota.per_principal {
            let principals: std::collections::BTreeSet<Option<&str>> =
                state.runs.values().filter(|e| &e.tool == name).map(|e| e.principal.as_deref()).collect();
            whose = (principals.into_iter().take(PRINCIPALS_SHOWN_MAX))
                .map(|principal| (principal.unwrap_or("").to_string(), Counting::Principal(principal)))
                .collect();
        }
        for (principal, counting) in whose {
            let (calls, money, tokens) = state.quota_use(name, quota.window_ms, now, counting);
            let labels =
                |unit: &str| vec![("tool", name.clone()), ("principal", principal.clone()), ("unit", unit.to_string())];
            if let Some(max) = quota.calls {
                used.get_or_create(&labels("calls")).set(calls as f64);
                limit.get_or_create(&labels("calls")).set(max as f64);
            }
            if let Some(max) = quota.tokens {
                used.get_or_create(&labels("tokens")).set(tokens as f64);
                limit.get_or_create(&labels("tokens")).set(max as f64);
            }
            if let Some(max) = &quota.money {
                let minor = money.get(&max.currency).copied().unwrap_or(0);
                let spent = crate::base::money::Money { minor, currency: max.currency.clone() };
                used.get_or_create(&labels(&max.currency)).set(units(&spent));
                limit.get_or_create(&labels(&max.currency)).set(units(max));
            }
        }
    }
    (used, limit)
}

/// An amount in its currency's units (12.50 for 12.50 USD), for a gauge.
fn units(money: &crate::base::money::Money) -> f64 {
    money.amount_text().parse().unwrap_or(f64::NAN)
}
