//! What a simulation found: its report, and the violations of invariants in it. Every stage
//! (the world, the checks, the workload, the plans, the sweep) writes into it.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: u8,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.invariant {
            0 => write!(f, "a broken assertion: {}", self.message),
            n => write!(f, "invariant {n}: {}", self.message),
        }
    }
}

/// What an operator needs to hear about their own configuration (`explore --manifest`): not
/// a broken invariant of Warden's, but what a setting let happen, with the setting named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub tool: String,
    /// `done twice`, `waited for a person`, `refused by the service` or `quota spent on
    /// resends` (`checks/own.rs`).
    pub kind: &'static str,
    pub message: String,
}

/// How one tool's calls went.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    pub answered: u64,
    pub succeeded: u64,
    pub first_failure: Option<String>,
}

impl ToolOutcome {
    pub fn add(&mut self, other: &ToolOutcome) {
        self.answered += other.answered;
        self.succeeded += other.succeeded;
        if self.first_failure.is_none() {
            self.first_failure.clone_from(&other.first_failure);
        }
    }
}

/// The most runs whose journals a report keeps.
pub const JOURNALS_KEPT_MAX: usize = 200;
/// The most bytes of one journal a report keeps.
pub const JOURNAL_KEPT_BYTES_MAX: usize = 64 << 10;

/// What one simulation did and found.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub seed: u64,
    pub calls: u32,
    pub answered: u32,
    /// Crashes by the step they followed (index 1 to 7), and at disk operations (index 0).
    pub crashes: [u64; 8],
    /// Faults armed, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Faults that fired, by kind (`fired.rs`).
    pub fired: BTreeMap<&'static str, u64>,
    /// (plan position, kind) of planned faults that never fired.
    pub never_fired: Vec<(usize, &'static str)>,
    pub violations: Vec<Violation>,
    /// In an operator's own world: what its settings let happen (`checks/own.rs`).
    pub findings: Vec<Finding>,
    /// In an operator's own world: each tool's answered calls, how many succeeded, and the
    /// first failure's text (a tool that never succeeds is a finding of the sweep's).
    pub tool_outcomes: BTreeMap<String, ToolOutcome>,
    pub trace_hash: String,
    pub sim_ms: u64,
    pub restarts: u32,
    /// (simulated ms, lane, label) for the timeline.
    pub events: Vec<(u64, String, String)>,
    /// Each run's journal as the simulation left it, by run id (the timeline; at most
    /// `JOURNALS_KEPT_MAX` runs, each cut at `JOURNAL_KEPT_BYTES_MAX`).
    pub journals: BTreeMap<String, String>,
    /// Every server log line, all instances, with its simulated ms (`--verbose`, the timeline).
    pub log: Vec<(u64, String)>,
    /// Crashes by window (`coverage.rs`): where each landed x what was in flight.
    pub windows: BTreeMap<String, u64>,
    /// Faults by kind x what was in flight when each was armed (`coverage.rs`).
    pub fault_states: BTreeMap<String, u64>,
    /// The tool of each call sent, in order (shrinking pins them before dropping tools).
    pub sent_tools: Vec<String>,
    /// The world was served over Streamable HTTP (`serve-http`), not stdio; with OAuth
    /// principals.
    pub over_http: bool,
    pub with_principals: bool,
    /// The world kept its ledger and records in the PostgreSQL store (`server.store`).
    pub on_the_store: bool,
    /// Instances that served beside the first on that store (`peers.rs`).
    pub peers: u32,
    /// Input requests: calls answered `input_required`, retries served, retries refused
    /// (altered states among them).
    pub inputs: Inputs,
    /// Requests the simulated model provider received.
    pub model_requests: u64,
    /// Statements the simulated PostgreSQL server received.
    pub postgres_statements: u64,
}

/// What the client model's input rounds came to.
#[derive(Debug, Default, Clone, Copy)]
pub struct Inputs {
    pub asked: u64,
    pub served: u64,
    pub refused: u64,
    pub altered_refused: u64,
    /// Requests a 2025-11-25 session's client was sent (`elicitation/create`), and those it
    /// answered (the others it leaves, and their rounds expire).
    pub session_asked: u64,
    pub session_answered: u64,
}
