//! The fault vocabulary of Warden's simulator: what can go wrong, and when. A fault plan is
//! data (a list of faults, each attached to the call before which it is armed), so a failing
//! seed can be written down as a scenario file, shrunk, and replayed exactly.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod words;
pub use words::duration;

/// A durable step of a call (seed 000 section 7), named as the server's probe names it (the
/// simulator maps each to `warden::env::Point`, exhaustively). An unknown name in a scenario
/// file is a parse error, never a fault that silently arms nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrashPoint {
    Reserved,
    InputsKept,
    JournalCreated,
    RunRecorded,
    WaitingRecorded,
    Settled,
    Answered,
    ActionBegun,
    Resumed,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 9] = [
        CrashPoint::Reserved,
        CrashPoint::InputsKept,
        CrashPoint::JournalCreated,
        CrashPoint::RunRecorded,
        CrashPoint::WaitingRecorded,
        CrashPoint::Settled,
        CrashPoint::Answered,
        CrashPoint::ActionBegun,
        CrashPoint::Resumed,
    ];
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// Crash the server the next time it reaches `point`.
    CrashAtPoint {
        point: CrashPoint,
    },
    /// Crash the server at its `after`-th disk operation from now (unsynced data is lost or torn).
    CrashAtDiskOperation {
        after: u64,
    },
    /// Fail the next fsync (the server must stop, not go on).
    FailFsync,
    /// The disk is full for the next write of this call.
    FillDisk,
    /// Step the wall clock by `ms` (negative: backwards).
    StepClock {
        ms: i64,
    },
    /// Step the wall clock by `ms` while the next program execution runs: inside a run,
    /// between its start and its next action. Time did not pass: no deadline may expire.
    StepClockDuringRun {
        ms: i64,
    },
    /// The next program execution, and every later one of the same run, crashes the server
    /// (as a program that exhausts the machine would) until the faults stop. The server must
    /// stop resuming that run after a few crashes and serve the others.
    PoisonRun,
    /// Let virtual time pass.
    AdvanceTime {
        ms: u64,
    },
    /// The next `ops` disk operations each take `ms` of virtual time (a slow or stalling
    /// disk): deadlines, timeouts and other runs' progress cross them.
    SlowDisk {
        ms: u64,
        ops: u64,
    },
    /// The client reads the server's next `lines` lines `ms` apart; the pipe between them
    /// holds two lines, so the server's writes wait while it is full.
    SlowReader {
        ms: u64,
        lines: u32,
    },
    /// Make the wall clock drift by `ppm` millionths (negative: slow) from now on.
    DriftClock {
        ppm: i64,
    },
    /// The next request to a URL containing `url` gets this network fault.
    Network {
        url: String,
        kind: NetworkFault,
    },
    /// The notify command fails this many times before it succeeds.
    NotifyFails {
        times: u32,
    },
    /// The notify command hangs this many times (killed at its timeout) before it succeeds.
    NotifyHangs {
        times: u32,
    },
    /// A line over the 4 MiB limit arrives before the call.
    OversizedLine,
    /// A malformed line arrives before the call.
    MalformedLine,
    /// The client cancels the call right after sending it.
    Cancel,
    /// Before the call, the client sends `calls` status calls at once (a hostile client
    /// flooding the server); their answers are not the workload's.
    Flood {
        calls: u32,
    },
    /// Beside the call, the client sends it twice more as calls the server must refuse before
    /// anything runs: with one argument more, which is no parameter of the tool, and with a
    /// string argument replaced by a secret the manifest names. Their answers are not the
    /// workload's; the checker holds that each was refused and made no run.
    RefusableCalls,
    /// In an HTTP world, the next live stream of a 2025-11-25 session is cut after `after`
    /// events (when `stalls`, the client first stops reading it until the server's write
    /// timeout passes); the client then asks for the rest with `Last-Event-ID`, which must
    /// bring every event after the last one it read, the answer included.
    StreamCut {
        after: u32,
        stalls: bool,
    },
    /// The client goes away right after sending the call (its stdin closes, writes to it
    /// fail), then connects to a new server and sends again what `once` lets it.
    ClientGone,
    /// A shutdown signal (SIGTERM) comes `after_ms` of virtual time after the call is sent: the
    /// server drains (no new call, each run stops between actions) and exits, then starts
    /// again. A drained server leaves nothing in doubt that a person was not already asked about.
    Shutdown {
        after_ms: u64,
    },
    /// With the server stopped, a durable byte of `file` rots: the byte at `at` modulo the
    /// length before the last newline flips. At the next start, recovery must report the
    /// damage naming the file and line, and the seed ends there (damage waits for a person).
    RotByte {
        file: DamagedFile,
        at: u64,
    },
    /// The next read of the ledger returns one byte flipped (at `at` modulo the length before
    /// the last newline); the disk stays intact. The start that reads it must refuse, naming
    /// the ledger; the next start goes on.
    FlipLedgerRead {
        at: u64,
    },
    /// The next append to the ledger lands 1 + `at` % 64 bytes early, over the end of the
    /// line before it. Once durable, the next start must refuse naming the line; the seed
    /// ends there.
    MisdirectLedgerAppend {
        at: u64,
    },
    /// In a world on the PostgreSQL store, the store fails: it refuses the next `times`
    /// connections (the database down, restarting or partitioned away), or the next write
    /// commits and the answer to its COMMIT is lost (the server cannot tell whether it
    /// committed). A world on files does not reach the store: the fault never fires there.
    StoreRefuses {
        times: u32,
    },
    StoreLosesCommitAnswer,
    /// The next write's COMMIT never reaches the database: it is rolled back, and the server
    /// hears, as when the answer is lost, that it may have committed.
    StoreLosesCommit,
    /// The database restarts before its next operation, which is refused: every connection
    /// ends, each instance's slot included, so the serving instance stops and its next start
    /// takes the store again.
    StoreRestarts,
    /// The server pauses (a stall, SIGSTOP) for `ms` right after the next action's begin record
    /// is durable, before it sends the action: in a world on the store, longer than its lease,
    /// so the action rule must keep it from sending what it may no longer own.
    PausesAfterActionBegun {
        ms: u64,
    },
}

/// The file a `rot_byte` fault damages. An unknown name in a scenario file is a parse error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DamagedFile {
    /// The ledger (`ledger.jsonl`).
    Ledger,
    /// The journal of an unfinished run (the seed's draw picks which).
    Journal,
}

impl DamagedFile {
    pub const ALL: [DamagedFile; 2] = [DamagedFile::Ledger, DamagedFile::Journal];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkFault {
    Refuse,
    LoseResponse,
    CrashAfterActing,
    /// The service acts at once and answers after `ms` of virtual time; past the request's
    /// timeout the server sees a timeout after sending.
    Slow {
        ms: u64,
    },
}

impl Fault {
    /// The kind, for the simulator's table of faults injected.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::CrashAtPoint { .. } => "crash at a step",
            Fault::CrashAtDiskOperation { .. } => "crash at a disk operation",
            Fault::FailFsync => "fsync failure",
            Fault::FillDisk => "full disk",
            Fault::StepClock { .. } => "clock step",
            Fault::StepClockDuringRun { .. } => "clock step during a run",
            Fault::PoisonRun => "a run that crashes the server",
            Fault::AdvanceTime { .. } => "time passes",
            Fault::SlowDisk { .. } => "slow disk",
            Fault::SlowReader { .. } => "client reads slowly",
            Fault::DriftClock { .. } => "clock drift",
            Fault::NotifyHangs { .. } => "notify command hangs",
            Fault::OversizedLine => "oversized line",
            Fault::Network { kind: NetworkFault::Refuse, .. } => "request refused",
            Fault::Network { kind: NetworkFault::LoseResponse, .. } => "response lost after acting",
            Fault::Network { kind: NetworkFault::CrashAfterActing, .. } => "crash after the service acted",
            Fault::Network { kind: NetworkFault::Slow { .. }, .. } => "slow response",
            Fault::NotifyFails { .. } => "notify command fails",
            Fault::MalformedLine => "malformed line",
            Fault::Cancel => "cancellation",
            Fault::Flood { .. } => "a flood of calls",
            Fault::ClientGone => "client gone mid-call",
            Fault::RefusableCalls => "calls that must be refused",
            Fault::StreamCut { .. } => "a live stream cut and resumed",
            Fault::Shutdown { .. } => "a shutdown signal",
            Fault::RotByte { .. } => "a durable byte rots",
            Fault::FlipLedgerRead { .. } => "a flipped byte read",
            Fault::MisdirectLedgerAppend { .. } => "a misdirected write",
            Fault::StoreRefuses { .. } => "the store refuses connections",
            Fault::StoreLosesCommitAnswer => "a COMMIT's answer lost",
            Fault::StoreLosesCommit => "a COMMIT lost on its way",
            Fault::StoreRestarts => "the store restarts",
            Fault::PausesAfterActionBegun { .. } => "a pause after an action's begin",
        }
    }
}

/// Faults armed before a given call of the workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Planned {
    pub before_call: u32,
    pub fault: Fault,
}

/// What a scenario expects: to pass, or to fail naming an invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    Pass,
    Fails { invariant: u8 },
}

/// A canary: a planted bug the checker must find.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Canary {
    /// fsync acknowledges without making anything durable.
    LyingFsync,
    /// The payment service ignores idempotency keys.
    IgnoreIdempotencyKeys,
}

/// A scenario: a seed (which drives the workload and scheduling), a fault plan, and what is
/// expected. `warden-sim replay` runs one exactly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub description: String,
    pub seed: u64,
    pub calls: u32,
    pub faults: Vec<Planned>,
    #[serde(default)]
    pub canary: Option<Canary>,
    /// Which tool each call uses, in turn (the seed picks the arguments); when absent, the
    /// seed picks the tools too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// The world simulated: a generated one written out whole, so the file replays without
    /// the generator; when absent, the fixed world (`sim/src/workload/fixture.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<WorldFile>,
    pub expect: Expect,
}

/// A simulated world as data: the manifest and programs the server is given, and the shape
/// of each tool's arguments, which the client model fills in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorldFile {
    /// The manifest's JSON text.
    pub manifest: String,
    /// Program file name -> Starlark text.
    pub programs: BTreeMap<String, String>,
    pub tools: Vec<ToolShape>,
    /// How the client reaches the server: stdio (`warden mcp`), or Streamable HTTP
    /// (`warden serve-http`, each message a request through the HTTP front).
    #[serde(default, skip_serializing_if = "Transport::is_stdio")]
    pub transport: Transport,
    /// An operator's own world (`warden-sim explore --manifest`): what it needs beyond the
    /// manifest and programs; absent for a generated world.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own: Option<OwnWorld>,
    /// Instances serving beside the first on the same PostgreSQL store (at most `PEERS_MAX`; a
    /// world on the store only): each with a client of its own, some killed, stalled or skewed
    /// (`sim/src/sweep/peers.rs`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub peers: u32,
}

/// The bounds a scenario file's numbers are held to where it is read (a file is data from
/// anyone: an endless flood or a clock step past what the clock's arithmetic holds would be
/// blamed on the server). Each is far above what the sweep draws.
pub const SCENARIO_CALLS_MAX: u32 = 1_000;
pub const CLOCK_STEP_MS_MAX: i64 = 7 * 24 * 3_600_000;
pub const TIME_PASSING_MS_MAX: u64 = 400 * 24 * 3_600_000;
pub const DRIFT_PPM_MAX: i64 = 500_000;
pub const FAULT_WAIT_MS_MAX: u64 = 3_600_000;
pub const FAULT_COUNT_MAX: u64 = 10_000;

impl Scenario {
    /// Every number of the scenario within its bound, or the first one over it, named.
    pub fn check_bounds(&self) -> Result<(), String> {
        if self.calls > SCENARIO_CALLS_MAX {
            return Err(format!("calls is {}, over the limit of {SCENARIO_CALLS_MAX}", self.calls));
        }
        for (index, planned) in self.faults.iter().enumerate() {
            if planned.before_call > SCENARIO_CALLS_MAX {
                return Err(format!("faults[{index}].before_call is over the limit of {SCENARIO_CALLS_MAX}"));
            }
            planned.fault.check_bounds().map_err(|problem| format!("faults[{index}].{problem}"))?;
        }
        Ok(())
    }
}

impl Fault {
    fn check_bounds(&self) -> Result<(), String> {
        let over =
            |field: &str, value: String, limit: String| Err(format!("{field} is {value}, over the limit of {limit}"));
        let count = |field: &str, value: u64| match value > FAULT_COUNT_MAX {
            true => over(field, value.to_string(), FAULT_COUNT_MAX.to_string()),
            false => Ok(()),
        };
        let wait = |field: &str, value: u64| match value > FAULT_WAIT_MS_MAX {
            true => over(field, value.to_string(), FAULT_WAIT_MS_MAX.to_string()),
            false => Ok(()),
        };
        match self {
            Fault::StepClock { ms } | Fault::StepClockDuringRun { ms }
                if ms.unsigned_abs() > CLOCK_STEP_MS_MAX as u64 =>
            {
                over("ms", ms.to_string(), format!("±{CLOCK_STEP_MS_MAX}"))
            }
            Fault::AdvanceTime { ms } if *ms > TIME_PASSING_MS_MAX => {
                over("ms", ms.to_string(), TIME_PASSING_MS_MAX.to_string())
            }
            Fault::DriftClock { ppm } if ppm.unsigned_abs() > DRIFT_PPM_MAX as u64 => {
                over("ppm", ppm.to_string(), format!("±{DRIFT_PPM_MAX}"))
            }
            Fault::SlowDisk { ms, ops } => wait("ms", *ms).and_then(|()| count("ops", *ops)),
            Fault::SlowReader { ms, lines } => wait("ms", *ms).and_then(|()| count("lines", u64::from(*lines))),
            Fault::Shutdown { after_ms } => wait("after_ms", *after_ms),
            Fault::Flood { calls } => count("calls", u64::from(*calls)),
            Fault::NotifyFails { times } | Fault::NotifyHangs { times } => count("times", u64::from(*times)),
            Fault::StreamCut { after, .. } => count("after", u64::from(*after)),
            _ => Ok(()),
        }
    }
}

/// The most instances a world runs beside its first (`WorldFile::peers`): the issue's two or
/// three instances on one store. A scenario file naming more is refused where it is read.
pub const PEERS_MAX: u32 = 2;

fn is_zero(count: &u32) -> bool {
    *count == 0
}

/// What an operator's own world adds: the files its grants name (a database's `init` SQL),
/// and a value for each environment variable its manifest names (its secrets are made up,
/// so the checker can search every output for them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnWorld {
    /// Path relative to the manifest -> text.
    pub files: BTreeMap<String, String>,
    /// Variable name -> value.
    pub variables: BTreeMap<String, String>,
    /// Resource URIs the client reads now and then beside its calls (each template filled
    /// with its `complete` values, else its program's examples).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_uris: Vec<String>,
    /// Prompts the client gets now and then: (name, arguments), one entry per argument set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt_calls: Vec<(String, serde_json::Value)>,
    /// The services the operator's writes reach (any URL but the payments API and the model)
    /// ignore the Idempotency-Key header: a keyed write sent again is made again. Whether a
    /// real service honours keys the simulator cannot know, so `explore --manifest` draws
    /// both behaviours and reports what depends on it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub services_ignore_keys: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    #[default]
    Stdio,
    /// Behind a static bearer token: no principal.
    Http,
    /// OAuth: each call made by one of the client model's principals.
    HttpOauth,
}

impl Transport {
    pub fn is_stdio(&self) -> bool {
        *self == Transport::Stdio
    }
}

/// One tool of a world, as the client model sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolShape {
    pub name: String,
    pub template: Template,
    /// Whether the client sends an unanswered call again after a restart (the tool has
    /// `once`, so the same logical call finds its run).
    pub resend: bool,
    /// Arguments the client picks from (an operator's tool: its docstring's examples, or
    /// values drawn from its input schema); empty for a template's tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<serde_json::Value>,
}

/// The program template a tool was drawn from; it fixes the arguments the tool takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Template {
    /// `text`: no actions.
    Echo,
    /// `order`, `amount`, `parts`: refunds through `payments.stripe.refund`.
    Refund,
    /// `text`, `count`: posts to the notes service.
    Notes,
    /// `ticket`: an SQLite write.
    Close,
    /// `ticket`: an SQLite read.
    Lookup,
    /// `order`: an HTTP read.
    Fetch,
    /// `style`: an HTTP read of a service that reflects the request's secret header back,
    /// escaped as PHP, Go or `\u` escapes would, or behind an anti-XSSI prefix.
    Reflect,
    /// An operator's own tool: its arguments are the shape's `examples`.
    Own,
}

impl Scenario {
    /// A scenario of `calls` calls with `faults`, no canary, tools picked by the seed, that
    /// must keep every invariant.
    pub fn passing(description: String, seed: u64, calls: u32, faults: Vec<Planned>) -> Scenario {
        Scenario { description, seed, calls, faults, canary: None, tools: None, world: None, expect: Expect::Pass }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_round_trips_as_json() {
        let scenario = Scenario {
            description: "d".into(),
            seed: 3,
            calls: 4,
            faults: vec![Planned { before_call: 1, fault: Fault::CrashAtPoint { point: CrashPoint::Settled } }],
            canary: None,
            tools: None,
            world: None,
            expect: Expect::Fails { invariant: 7 },
        };
        let text = serde_json::to_string(&scenario).unwrap();
        assert_eq!(serde_json::from_str::<Scenario>(&text).unwrap(), scenario);
        assert!(serde_json::from_str::<Scenario>(&text.replace("\"calls\"", "\"callz\"")).is_err());
        assert!(text.contains("\"point\":\"settled\""), "{text}");
        // A crash point the server does not have is refused, not armed as nothing.
        let unknown = serde_json::from_str::<Scenario>(&text.replace("\"settled\"", "\"setled\""));
        assert!(unknown.unwrap_err().to_string().contains("unknown variant `setled`"));
    }

    #[test]
    fn a_damaged_file_is_named_by_the_vocabulary() {
        let rot: Fault = serde_json::from_str(r#"{"fault": "rot_byte", "file": "journal", "at": 5}"#).unwrap();
        assert_eq!(rot, Fault::RotByte { file: DamagedFile::Journal, at: 5 });
        // A file the simulator cannot damage is refused, not a fault that damages nothing.
        let unknown = serde_json::from_str::<Fault>(r#"{"fault": "rot_byte", "file": "ledgr", "at": 5}"#);
        assert!(unknown.unwrap_err().to_string().contains("unknown variant `ledgr`"));
    }
}
