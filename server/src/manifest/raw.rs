//! The manifest exactly as the operator writes it (seed 000 section 2). Unknown keys are
//! refused at every level. Validation and defaults are in `validate.rs`.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawManifest {
    pub server: RawServer,
    pub model: Option<RawModel>,
    pub tools: Vec<RawTool>,
    #[serde(default)]
    pub resources: Vec<RawResource>,
    #[serde(default)]
    pub prompts: Vec<RawPrompt>,
}

/// A resource: a program read through a URI template; a read is a run like a tool call's,
/// with only grants that read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResource {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    /// An RFC 6570 level-1 template, e.g. "ticket://{ticket_id}"; each variable a parameter.
    pub uri: String,
    pub mime_type: String,
    /// How long a client may cache a read (a duration); reads are not cached without it.
    pub ttl: Option<String>,
    pub program: String,
    pub entry: Option<String>,
    #[serde(default)]
    pub grants: BTreeMap<String, RawGrant>,
    pub net: Option<RawNet>,
    pub deadline: Option<String>,
    pub max_concurrent_runs: Option<u64>,
    pub quota: Option<RawQuota>,
    pub limits: Option<RawLimits>,
    /// Completions offered for template variables: variable -> values.
    pub complete: Option<BTreeMap<String, Vec<String>>>,
    /// Scopes an authenticated remote principal must hold to read the resource.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// What a resource has besides the tool its reads run as.
pub struct ResourceAddress {
    pub uri: String,
    pub mime_type: String,
    pub ttl: Option<String>,
    pub complete: BTreeMap<String, Vec<String>>,
}

impl RawResource {
    /// The tool a read runs as (the same validation, journal and quotas).
    pub fn into_tool(self) -> (RawTool, ResourceAddress) {
        let tool = RawTool {
            name: self.name,
            title: self.title,
            description: self.description,
            program: self.program,
            entry: self.entry,
            grants: self.grants,
            net: self.net,
            deadline: self.deadline,
            max_concurrent_runs: self.max_concurrent_runs,
            once: None,
            quota: self.quota,
            limits: self.limits,
            scopes: self.scopes,
            requires: Vec::new(),
            task: None,
            headers: None,
            input_schema: None,
        };
        let address = ResourceAddress {
            uri: self.uri,
            mime_type: self.mime_type,
            ttl: self.ttl,
            complete: self.complete.unwrap_or_default(),
        };
        (tool, address)
    }
}

/// A prompt: a program without grants whose `str` parameters are the prompt's arguments and
/// whose result is its messages.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrompt {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub program: String,
    pub entry: Option<String>,
    pub limits: Option<RawLimits>,
    /// Completions offered for arguments: argument -> values.
    pub complete: Option<BTreeMap<String, Vec<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub name: String,
    pub journals: String,
    /// Days a settled run's files are kept: a whole number of at least 1, or "forever".
    pub keep: Option<serde_json::Value>,
    pub max_concurrent_runs: Option<u64>,
    pub notify: Option<Vec<String>>,
    pub notify_env: Option<Vec<String>>,
    /// How long a stopping server lets its runs reach a point between actions (a duration).
    pub shutdown_grace: Option<String>,
    /// Where the server's own state lives: files under `journals` when left out.
    pub store: Option<RawStore>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub postgres: RawPostgresStore,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPostgresStore {
    pub url: RawEnvRef,
    pub lease: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    pub provider: String,
    pub model: String,
    pub api_key: RawEnvRef,
    pub timeout_ms: Option<u64>,
    pub retries: Option<u64>,
    /// Where the provider's API is (a gateway, a test double); each provider has its own default.
    pub base_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEnvRef {
    pub env: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTool {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub program: String,
    pub entry: Option<String>,
    #[serde(default)]
    pub grants: BTreeMap<String, RawGrant>,
    pub net: Option<RawNet>,
    pub deadline: Option<String>,
    pub max_concurrent_runs: Option<u64>,
    pub once: Option<RawOnce>,
    pub quota: Option<RawQuota>,
    pub limits: Option<RawLimits>,
    /// Scopes an authenticated remote principal must hold to call the tool.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Client capabilities a call must declare (`sampling`, `elicitation`, `roots`); a call
    /// without one is refused (-32021) before any run. Last, with `task`: a tool without
    /// either keeps the binding it had before they existed (`canonical_tool_json`).
    #[serde(default)]
    pub requires: Vec<String>,
    /// Whether a 2026-07-28 call of a client that negotiated the tasks extension becomes a
    /// task: "optional" or "required".
    pub task: Option<String>,
    /// Arguments a 2026-07-28 HTTP request mirrors in a header: argument name -> the header's
    /// name after `Mcp-Param-` (SEP-2243). The front checks each against the body.
    pub headers: Option<BTreeMap<String, String>>,
    /// A JSON Schema (2020-12) file for the tool's arguments, listed as its `inputSchema` in
    /// place of the one derived from the program's signature, and checked after it.
    pub input_schema: Option<String>,
}

/// A grant, or (inside `needs`) a secret reference `{ "env": NAME }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGrant {
    pub cap: Option<String>,
    pub env: Option<String>,
    pub only: Option<Vec<String>>,
    pub each: Option<RawMoney>,
    pub max: Option<RawMoney>,
    pub uses: Option<u64>,
    pub needs: Option<BTreeMap<String, RawGrant>>,
    pub idempotency_key: Option<bool>,
    pub headers: Option<BTreeMap<String, RawHeaderSecret>>,
    pub path: Option<String>,
    pub mode: Option<String>,
    /// `db.sqlite`: an SQL file run once, when the database does not exist yet.
    pub init: Option<String>,
    /// `model`: the most tokens one model call may ask for.
    pub max_tokens: Option<u64>,
    /// `db.postgres`: `{ "env": NAME }`, the variable holding the connection URL. Read as
    /// any JSON so that a URL written here by mistake is refused without being quoted (a
    /// serde type error would quote it, password and all).
    pub url: Option<serde_json::Value>,
}

/// A header whose value comes from an environment variable: `prefix` + the variable's value.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeaderSecret {
    pub env: String,
    pub prefix: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMoney {
    pub amount: String,
    pub currency: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNet {
    pub timeout_ms: Option<u64>,
    pub connect_timeout_ms: Option<u64>,
    pub response_bytes_max: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOnce {
    pub by: Vec<String>,
    pub keep: Option<String>,
    /// `"principal"`: each authenticated principal has keys of its own.
    pub per: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQuota {
    pub window: String,
    pub calls: Option<u64>,
    pub money: Option<RawMoney>,
    /// Model output tokens the tool's runs may use in the window.
    pub tokens: Option<u64>,
    /// `"principal"`: each authenticated principal has a quota of its own.
    pub per: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_steps: Option<u64>,
    pub execution_ms: Option<u64>,
}
