//! One execution as a self-contained job, so it can run where it can be stopped.
//!
//! `max_steps` counts Starlark steps, but a single builtin (`json.encode` of a shared
//! structure, `[0] * 10**9`) can spin or allocate without taking a step. A limit that holds
//! inside builtins needs a process the server can kill: the real `Env::sandbox` runs each job
//! in a worker (`warden exec-program`) with a memory limit, and kills it at its wall-clock
//! limit; the run then ends as `budget` and the server keeps serving. The simulator runs jobs
//! in-process through the same function.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{execute_with, Execution, Outcome, Program, RunLimits};
use crate::broker::{Broker, BrokerSeed, Usage};

/// The address space a worker may map: the program's heap, Starlark's and the binary's own.
pub const EXECUTION_MEMORY_BYTES_MAX: u64 = 2 * 1024 * 1024 * 1024;
/// The largest reply a worker may write (an execution's result, prints and usage).
pub const REPLY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// What a worker needs to run one execution: the program's source (not its path, which
/// may have changed on disk since the server compiled it), the inputs and the broker's seed.
#[derive(Serialize, Deserialize)]
pub struct Job {
    pub path: PathBuf,
    pub source: String,
    pub entry: String,
    /// The tool's grant names (parameters so named are capability handles).
    pub grant_names: Vec<String>,
    /// (parameter, kind) of each capability handed to the program.
    pub capabilities: Vec<(String, crate::broker::Kind)>,
    pub inputs: Map<String, Value>,
    pub max_steps: u64,
    /// The wall-clock limit of this job (`limits.execution_ms`).
    pub time_ms: u64,
    pub broker: BrokerSeed,
    /// Only compile the program and define its entry (at start and `warden check`).
    pub load_only: bool,
    /// The program already compiled, for a sandbox that runs in this process.
    #[serde(skip)]
    pub compiled: Option<Program>,
}

/// What one execution produced, with the broker's usage.
#[derive(Debug, Serialize, Deserialize)]
pub struct Executed {
    pub execution: Execution,
    pub usage: BTreeMap<String, Usage>,
}

/// Why a sandbox stopped a job before it produced anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It ran past its `time_ms` and was killed.
    TimedOut { ms: u64 },
    /// It ended without a reply: out of memory, or a crash of the worker.
    Abnormal(String),
    /// No worker could run it (the binary, processes or memory of the machine): nothing
    /// about the program, so the run is not ended for it.
    Unavailable(String),
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::TimedOut { ms } => {
                write!(f, "one execution of the program ran past its wall-clock limit of {ms} ms and was stopped")
            }
            Stopped::Unavailable(why) => write!(f, "no worker could run the program: {why}"),
            Stopped::Abnormal(why) => write!(
                f,
                "the program's execution ended abnormally ({why}); it may have gone past the memory limit of {} MiB",
                EXECUTION_MEMORY_BYTES_MAX / (1024 * 1024)
            ),
        }
    }
}

impl Job {
    /// A job that only loads `source` (bounded like an execution).
    pub fn load(path: PathBuf, source: String, entry: String, grant_names: Vec<String>, time_ms: u64) -> Job {
        Job {
            path,
            source,
            entry,
            grant_names,
            capabilities: Vec::new(),
            inputs: Map::new(),
            max_steps: 0,
            time_ms,
            broker: Broker::new("", &BTreeMap::new(), Vec::new()).seed(),
            load_only: true,
            compiled: None,
        }
    }
}

/// Runs a job to its end in this process: what a worker does, and the simulator's sandbox.
/// A program that fails to load is an `internal` failure of the execution.
pub fn run(job: Job) -> Executed {
    let program = match job.compiled {
        Some(program) => program,
        None => match Program::load(&job.path, &job.source, &job.entry, &job.grant_names) {
            Ok(program) => program,
            Err(problem) => return failed(problem),
        },
    };
    if job.load_only {
        return loaded();
    }
    let broker = Broker::from_seed(job.broker);
    let limits = RunLimits { max_steps: job.max_steps };
    let execution = execute_with(&program, &job.inputs, limits, &broker, &job.capabilities);
    let usage = broker.usage.borrow().clone();
    Executed { execution, usage }
}

/// What a load-only job that loaded produces.
pub fn loaded() -> Executed {
    Executed { execution: execution(Outcome::Done(Value::Null)), usage: BTreeMap::new() }
}

fn execution(outcome: Outcome) -> Execution {
    Execution { outcome, prints: Vec::new(), prints_dropped: 0, ticks: 0, progress: Vec::new() }
}

fn failed(message: String) -> Executed {
    let failure = super::Failure { kind: super::FailureKind::Internal, message };
    Executed { execution: execution(Outcome::Failed(failure)), usage: BTreeMap::new() }
}
