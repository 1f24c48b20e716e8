//! The operator's manifest: read once at start, every problem reported with its path
//! (`tools[2].quota.window: ...`) before anything is served.

pub mod kinds;
mod raw;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::base::money::Money;

pub use validate::{parse_duration_ms, DurationUnits};

/// The reserved name of the server's own read-only status tool.
pub const RUN_STATUS_TOOL: &str = "warden_run_status";
/// The longest tool name MCP recommends.
pub const TOOL_NAME_CHARS_MAX: usize = 128;
/// Default `server.keep`, in days.
pub const KEEP_DAYS_DEFAULT: u64 = 90;
/// Default `server.shutdown_grace`, and its range (a grace beyond the range would outlive
/// every supervisor's own kill timeout).
pub const SHUTDOWN_GRACE_MS_DEFAULT: u64 = 30_000;
pub const SHUTDOWN_GRACE_MS_LIMIT: u64 = 3_600_000;
/// Default `server.store.postgres.lease`, and its range: renewed every third of it, a lease
/// under 3 s would be renewed more often than a loaded database answers; one over 10 min would
/// keep a paused server's runs from a new start that long.
pub const STORE_LEASE_MS_DEFAULT: u64 = 30_000;
pub const STORE_LEASE_MS_MIN: u64 = 3_000;
pub const STORE_LEASE_MS_MAX: u64 = 600_000;
/// Default `server.max_concurrent_runs`.
pub const MAX_CONCURRENT_RUNS_DEFAULT: u64 = 8;
/// Upper bound on any `max_concurrent_runs`, so every slot table stays small.
pub const MAX_CONCURRENT_RUNS_LIMIT: u64 = 1024;
/// Default `limits.max_steps` (Starlark ticks).
pub const MAX_STEPS_DEFAULT: u64 = 1_000_000;
/// Upper bound on `limits.max_steps`.
pub const MAX_STEPS_LIMIT: u64 = 1_000_000_000;
/// `limits.execution_ms` when the manifest leaves it out, and its range.
pub const EXECUTION_MS_DEFAULT: u64 = 10_000;
pub const EXECUTION_MS_MIN: u64 = 100;
pub const EXECUTION_MS_LIMIT: u64 = 600_000;
/// The largest manifest file read.
pub const MANIFEST_BYTES_MAX: usize = 1024 * 1024;
/// The most tools one manifest may serve (resources and prompts: as many of each).
pub const TOOLS_MAX: usize = 256;
/// Completion lists: the most values one argument may offer, and the longest value.
pub const COMPLETE_VALUES_MAX: usize = 1000;
pub const COMPLETE_VALUE_CHARS_MAX: usize = 256;
/// The longest URI template.
pub const URI_TEMPLATE_CHARS_MAX: usize = 1024;
/// `server.keep`: at most 100 years of days.
pub const KEEP_DAYS_LIMIT: u64 = 36_500;
/// `net.timeout_ms` and `net.connect_timeout_ms`: at most 10 minutes.
pub const NET_TIMEOUT_MS_LIMIT: u64 = 600_000;
/// `net.response_bytes_max` when the manifest leaves it out.
pub const RESPONSE_BYTES_DEFAULT: usize = 1024 * 1024;
/// The largest `net.response_bytes_max`: a done record holds the body twice (text and
/// parsed), escaped, and must stay under the journal reader's line limit.
pub const RESPONSE_BYTES_LIMIT: usize = 2 * 1024 * 1024;
/// `quota.calls`: at most a billion per window.
pub const QUOTA_CALLS_LIMIT: u64 = 1_000_000_000;
/// `model.timeout_ms`: at most 10 minutes; `model.retries`: at most 10.
pub const MODEL_TIMEOUT_MS_LIMIT: u64 = 600_000;
pub const MODEL_RETRIES_LIMIT: u64 = 10;
/// A quota's `tokens`: at most this many model tokens a window.
pub const QUOTA_TOKENS_LIMIT: u64 = 1_000_000_000_000;
/// The sends one model call gets: the first, and one after a crash (a third start finds its
/// run halted); `machine::CRASHES_BEFORE_HALT` asserts they agree.
pub const MODEL_SENDS_MAX: u64 = 2;

/// The most model output tokens a run with `grants` can be charged: each model grant's
/// `max_tokens` x `uses` x the attempts of one send x `MODEL_SENDS_MAX`; without `uses`,
/// as many actions as a run may take.
pub fn worst_tokens(grants: &BTreeMap<String, Grant>, model: Option<&ModelConfig>) -> u64 {
    let attempts = model.map_or(1, |model| model.retries.saturating_add(1));
    let per_call = attempts.saturating_mul(MODEL_SENDS_MAX);
    (grants.values())
        .filter_map(|grant| match grant {
            Grant::Capability(g) if g.cap == crate::manifest::kinds::Kind::Model => {
                let uses = g.uses.unwrap_or(crate::limits::ACTIONS_PER_RUN_MAX);
                Some(g.max_tokens.unwrap_or(0).saturating_mul(uses).saturating_mul(per_call))
            }
            _ => None,
        })
        .fold(0, u64::saturating_add)
}

/// A `model` grant's `max_tokens`: at most this many tokens a call.
pub const MODEL_MAX_TOKENS_LIMIT: u64 = 200_000;
/// The providers a `model` section may name, and the root of each one's API.
pub const MODEL_PROVIDERS: [(&str, &str); 2] =
    [("anthropic", "https://api.anthropic.com"), ("openai", "https://api.openai.com")];

#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The manifest file, and the directory relative paths are resolved against.
    pub path: PathBuf,
    pub server: ServerConfig,
    pub model: Option<ModelConfig>,
    pub tools: Vec<ToolConfig>,
    pub resources: Vec<ResourceConfig>,
    pub prompts: Vec<PromptConfig>,
}

/// A resource: the tool its reads run as, and how it is addressed.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceConfig {
    pub tool: ToolConfig,
    pub uri_template: String,
    /// The template's variables, in order.
    pub variables: Vec<String>,
    pub mime_type: String,
    pub ttl_ms: Option<u64>,
    /// Completions offered for template variables (`completion/complete`).
    pub complete: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PromptConfig {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub program: PathBuf,
    pub entry: String,
    pub max_steps: u64,
    pub execution_ms: u64,
    /// Completions offered for arguments (`completion/complete`).
    pub complete: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub name: String,
    pub journals: PathBuf,
    pub keep: Keep,
    pub max_concurrent_runs: u64,
    pub notify: Vec<String>,
    pub notify_env: Vec<String>,
    /// `server.shutdown_grace`: after SIGTERM, SIGINT or the end of stdin, how long runs in
    /// progress have to reach a point between actions before the server exits anyway.
    pub shutdown_grace_ms: u64,
    /// `server.store`: where the server's own state lives.
    pub store: Store,
    /// `server.store.postgres.lease`: how long a serving instance's lease on the store lasts
    /// unless renewed (`store::lease`); unused on files.
    pub store_lease_ms: u64,
}

/// Where the server's own state (ledger, journals, inputs, waiting records) lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    /// Files under `server.journals`, owned by one process (`server.lock`): the default.
    Files,
    /// A PostgreSQL database several instances share (issue 28), reached at the URL in the
    /// environment variable `url_env`, served by one instance at a time so far (issue 28).
    Postgres { url_env: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    Days(u64),
    Forever,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub provider: String,
    pub model: String,
    pub api_key_env: String,
    pub timeout_ms: u64,
    pub retries: u64,
    /// The API's root, without a trailing slash.
    pub base_url: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolConfig {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub program: PathBuf,
    pub entry: String,
    pub grants: BTreeMap<String, Grant>,
    pub net: NetConfig,
    pub deadline_ms: Option<u64>,
    pub max_concurrent_runs: u64,
    pub once: Option<OnceConfig>,
    pub quota: Option<QuotaConfig>,
    /// Scopes an authenticated remote principal must hold to call the tool.
    pub scopes: Vec<String>,
    /// Client capabilities a call must declare (`sampling`, `elicitation`, `roots`).
    pub requires: Vec<String>,
    /// Whether a call may, or must, become a task (the 2026-07-28 tasks extension).
    pub task: TaskSupport,
    /// Arguments mirrored in `Mcp-Param-*` headers: argument -> header name after the prefix.
    pub headers: BTreeMap<String, String>,
    /// The operator's own JSON Schema file for the arguments (`input_schema`).
    pub input_schema: Option<PathBuf>,
    pub max_steps: u64,
    /// The wall-clock limit of one execution of the program (`limits.execution_ms`).
    pub execution_ms: u64,
    /// The tool's config as canonical JSON, hashed into each journal's header.
    pub config_json: String,
}

/// The client capabilities a tool may require (`requires`): what a program's `ask` uses.
pub const CLIENT_CAPABILITIES: [&str; 3] = ["elicitation", "sampling", "roots"];

/// A tool's support of tasks: a call of a client that negotiated the extension becomes a task
/// (optional, required), or never does; a required one refuses other clients (-32021).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSupport {
    #[default]
    Forbidden,
    Optional,
    Required,
}

impl TaskSupport {
    pub fn name(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct NetConfig {
    pub timeout_ms: Option<u64>,
    pub connect_timeout_ms: Option<u64>,
    /// The largest response body kept; a larger one fails the action (`net.response_bytes_max`).
    pub response_bytes_max: usize,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Grant {
    Capability(CapabilityGrant),
    /// A secret reference inside `needs`: the environment variable's name, never its value.
    Secret {
        env: String,
    },
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CapabilityGrant {
    pub cap: crate::manifest::kinds::Kind,
    pub only: Vec<String>,
    pub each: Option<Money>,
    pub max: Option<Money>,
    pub uses: Option<u64>,
    pub needs: BTreeMap<String, Grant>,
    pub idempotency_key: bool,
    /// Header name -> (prefix, environment variable holding the value).
    pub headers: BTreeMap<String, (String, String)>,
    pub path: Option<PathBuf>,
    pub mode: Option<DbMode>,
    pub init: Option<PathBuf>,
    /// `model`: the most tokens one call may ask for.
    pub max_tokens: Option<u64>,
    /// `db.postgres`: the environment variable holding the connection URL (a secret).
    pub url_env: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DbMode {
    Read,
    Write,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OnceConfig {
    pub by: Vec<String>,
    pub keep_ms: u64,
    /// Keys are the principal's own (`per: "principal"`).
    pub per_principal: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct QuotaConfig {
    pub window_ms: u64,
    pub calls: Option<u64>,
    pub money: Option<Money>,
    /// Model output tokens per window: open runs count at their worst case (`max_tokens` x
    /// `uses`), settled ones what they used.
    pub tokens: Option<u64>,
    /// Each principal has this quota of its own (`per: "principal"`).
    pub per_principal: bool,
}

impl Manifest {
    /// Parses and validates manifest text. `path` names the file in errors and anchors
    /// relative paths. Every problem found is reported, one a line.
    pub fn parse(path: &Path, text: &[u8]) -> Result<Manifest, ManifestError> {
        validate::parse(path, text)
    }

    pub fn tool(&self, name: &str) -> Option<&ToolConfig> {
        self.tools.iter().find(|tool| tool.name == name)
    }
}

/// Every problem found in a manifest, each as `<file>: <path>: <message>`.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestError {
    pub problems: Vec<String>,
    /// The manifest less what had problems (none when it could not be read as JSON): what
    /// `warden check` can still load, so every problem is reported in one round.
    pub partial: Option<Box<Manifest>>,
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.problems.join("\n"))
    }
}
