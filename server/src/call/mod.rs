//! The `tools/call` pipeline (seed 000 section 5), shared by both protocol eras:
//!
//! 1. find the tool (the caller: an unknown name is a protocol error);
//! 2. check the arguments by Warden's own rules (a refusal is a tool result);
//! 3. find an earlier run by the `once` key;
//! 4. take a concurrency slot (busy is answered at once, never queued);
//! 5. reserve in the ledger (over quota is answered, nothing runs);
//! 6. run with a new journal (`runs.rs` writes inputs and header; the run's state machine,
//!    `machine.rs`, driven by `driver.rs`, does the rest);
//! 7. settle, then answer from the run's end (`answer.rs`).
//!
//! Steps 3 to 5 are `admission.rs`: under the ledger's append lock, so two calls can never
//! both find a key absent, or both fit under a quota, before either's reservation is durable.

pub mod admission;
pub mod answer;
pub mod retry;
pub mod status;
pub mod surface;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::{json, Map, Value};

use crate::base::json::{canonical_json, sha256_hex};
use crate::base::money::Money;
use crate::call::admission::Admission;
pub use crate::call::admission::Slots;
use crate::call::answer::{answer, error_result, stopped_result};
use crate::catalog::Tool;
use crate::env::Point;
use crate::manifest::Grant;
use crate::run::notice::Notice;
use crate::run::runs::Runs;
use crate::run::store::RunStore;
use crate::store::ledger::OnceRecord;

/// Calls in progress beyond which a new call is answered busy at once (seed 000 section 5:
/// four times `server.max_concurrent_runs`, plus 16).
pub fn calls_in_progress_max(server_max_concurrent_runs: u64) -> usize {
    4 * server_max_concurrent_runs as usize + 16
}

/// A call's cancellation state, shared with the protocol layer.
#[derive(Default)]
pub struct CallControl {
    cancelled: Cell<bool>,
}

impl CallControl {
    pub fn cancel(&self) {
        self.cancelled.set(true);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.get()
    }
}

/// What the protocol layer sends for a call.
#[derive(Debug, PartialEq)]
pub enum CallReply {
    /// An era-neutral `CallToolResult` (content, structuredContent, isError), and the run
    /// it answers for, if one was reserved.
    Result(Value, Option<String>),
    /// The run asks its client for input: `{"inputRequests", "requestState"}` (2026-07-28's
    /// `input_required` result), and the run.
    InputRequired(Value, String),
    /// A retry whose `requestState` or `inputResponses` cannot be used: a protocol error
    /// (-32602) saying why; nothing changed.
    Invalid(String),
    /// The call was cancelled: nothing more is sent for it.
    Silent,
}

/// What the caller brings besides its arguments: who it is, the input kinds its client
/// declared, and (a retry) the answers to a round its run asked.
#[derive(Clone, Copy, Default)]
pub struct Caller<'a> {
    pub principal: Option<&'a Principal>,
    pub input_kinds: &'a [String],
    pub retry: Option<&'a Retry>,
    /// The caller's W3C trace context: the call's span continues it.
    pub traceparent: Option<&'a str>,
}

/// A retry of a call whose run asked for input.
#[derive(Clone, Debug, PartialEq)]
pub struct Retry {
    pub request_state: Value,
    pub input_responses: Option<Value>,
}

/// The `once` key and arguments hash of a call, from its normalised inputs.
pub fn once_record(tool: &Tool, inputs: &Map<String, Value>, principal: Option<&Principal>) -> Option<OnceRecord> {
    let once = tool.config.once.as_ref()?;
    let named: Map<String, Value> =
        once.by.iter().map(|name| (name.clone(), inputs.get(name).cloned().unwrap_or(Value::Null))).collect();
    // A principal's own keys: the same arguments from another principal make another key.
    let keyed = match (once.per_principal, principal) {
        (true, Some(principal)) => json!([tool.config.name, named, {"principal": principal.subject}]),
        _ => json!([tool.config.name, named]),
    };
    let key = sha256_hex(canonical_json(&keyed).as_bytes());
    let arguments = sha256_hex(canonical_json(&Value::Object(inputs.clone())).as_bytes());
    Some(OnceRecord { key, arguments })
}

/// The most a run of `tool` can spend, per currency: for each money-limited grant, `max`,
/// or `each` times `uses` where there is no `max` (seed 000 section 6).
pub fn worst_case(tool: &Tool) -> Vec<Money> {
    let mut by_currency: BTreeMap<String, i64> = BTreeMap::new();
    for grant in tool.config.grants.values() {
        let Grant::Capability(grant) = grant else {
            continue;
        };
        let limit = match (&grant.max, &grant.each, grant.uses) {
            (Some(max), _, _) => Some(max.clone()),
            (None, Some(each), Some(uses)) => {
                Some(Money { minor: each.minor.saturating_mul(uses as i64), currency: each.currency.clone() })
            }
            _ => None,
        };
        if let Some(limit) = limit {
            *by_currency.entry(limit.currency).or_insert(0) += limit.minor;
        }
    }
    by_currency.into_iter().map(|(currency, minor)| Money { minor, currency }).collect()
}

/// The most model tokens a run of `tool` can be charged (`manifest::worst_tokens`).
pub fn worst_tokens(tool: &Tool, model: Option<&crate::manifest::ModelConfig>) -> u64 {
    crate::manifest::worst_tokens(&tool.config.grants, model)
}

/// The `outcome` label a reply counts under: one of a fixed set (a run's outcome names,
/// `waiting_for_operator`, `interrupted`, `input_required`, `invalid_arguments`, `refused`
/// (quota, `once`, scope, busy, stopping), `invalid_request`, `cancelled`).
pub fn outcome_label(reply: &CallReply) -> &'static str {
    let result = match reply {
        CallReply::InputRequired(..) => return "input_required",
        CallReply::Invalid(_) => return "invalid_request",
        CallReply::Silent => return "cancelled",
        CallReply::Result(result, _) => result,
    };
    let meta = &result["_meta"];
    if meta.get(crate::call::answer::META_INVALID_ARGUMENTS).is_some() {
        return "invalid_arguments";
    }
    let run = &meta[crate::call::answer::META_RUN];
    match (run["status"].as_str(), serde_json::from_value::<crate::store::journal::RunOutcome>(run["outcome"].clone()))
    {
        (Some("waiting_for_operator"), _) => "waiting_for_operator",
        (Some("interrupted"), _) => "interrupted",
        (_, Ok(outcome)) => outcome.name(),
        _ if result["isError"] == true => "refused",
        _ => "done",
    }
}

/// Runs one call of a known tool to its reply, counted by outcome (`warden_calls_total`).
pub async fn call_tool(
    runs: &Runs,
    slots: &Rc<Slots>,
    tool: &Tool,
    arguments: &Map<String, Value>,
    control: &CallControl,
    listener: Option<Rc<dyn crate::run::notice::Listener>>,
    caller: Caller<'_>,
) -> CallReply {
    // The request's own span is a SERVER span; a program's call inside another request (a
    // resource's read) is internal to it.
    let kind = if tracing::Span::current().is_none() { "server" } else { "internal" };
    let span = tracing::info_span!(target: "warden", "tools/call", otel.kind = kind,
        otel.status_code = tracing::field::Empty, rpc.system = "jsonrpc", rpc.method = "tools/call",
        tool = %tool.config.name, principal = caller.principal.map(|p| p.subject.as_str()), run = tracing::field::Empty,
        outcome = tracing::field::Empty);
    // Inside a request's own span (a resource read by a program), the call is its child;
    // otherwise the call is the request, and continues its caller's trace.
    if let Some(traceparent) = caller.traceparent.filter(|_| tracing::Span::current().is_none()) {
        crate::io::trace::continue_trace(&span, traceparent);
    }
    let traced = span.clone();
    let reply = tracing::Instrument::instrument(
        async {
            let inputs = match refused_before_running(runs, tool, arguments, caller.principal) {
                Ok(inputs) => inputs,
                Err(refused) => return refused,
            };
            if let Some(retry) = caller.retry {
                return crate::call::retry::continue_run(runs, slots, tool, &inputs, control, listener, caller, retry)
                    .await;
            }
            let admitted =
                admission::admit(runs, slots, tool, &inputs, control, caller.principal, caller.input_kinds).await;
            match admitted {
                Admission::Answered(reply) => reply,
                Admission::Reserved { run, slot, running } => {
                    let running = (slot, running);
                    run_admitted(runs, tool, &run, &inputs, control, listener, caller, running).await
                }
            }
        },
        span,
    )
    .await;
    let outcome = outcome_label(&reply);
    traced.record("outcome", outcome);
    // An answer that is not what was asked for is an error of the request's (a failed run, an
    // action in doubt, a refusal); one that asks for input, is interrupted by a stop or was
    // cancelled by its client is not.
    if !matches!(outcome, "done" | "input_required" | "interrupted" | "cancelled") {
        traced.record("otel.status_code", "ERROR");
    }
    runs.metrics.count_call(&tool.config.name, outcome);
    log_refusal(runs, tool, caller.principal, outcome, &reply);
    reply
}

/// A call refused before or at its reserve (its arguments, a quota, `once`, a scope, a busy
/// or stopping server) is logged with the reason its caller was given.
fn log_refusal(runs: &Runs, tool: &Tool, principal: Option<&Principal>, outcome: &str, reply: &CallReply) {
    let reason = match reply {
        CallReply::Result(result, _) if matches!(outcome, "refused" | "invalid_arguments") => {
            result["content"][0]["text"].as_str().unwrap_or_default().to_string()
        }
        CallReply::Invalid(problem) => problem.clone(),
        _ => return,
    };
    let reason: String = crate::broker::scrub(&reason, &runs.secrets).chars().take(LOGGED_REASON_CHARS_MAX).collect();
    let mut fields = vec![("tool", tool.config.name.as_str())];
    fields.extend(principal.map(|principal| ("principal", principal.subject.as_str())));
    runs.env.log_at(crate::env::Level::Info, &format!("call refused ({outcome}): {reason}"), &fields);
}

/// What a log line keeps of a refusal's reason.
const LOGGED_REASON_CHARS_MAX: usize = 500;

/// The checks before anything is reserved: the caller's scopes, no secret in the arguments,
/// the arguments against the program's signature. `Ok`: the inputs checked.
fn refused_before_running(
    runs: &Runs,
    tool: &Tool,
    arguments: &Map<String, Value>,
    principal: Option<&Principal>,
) -> Result<Map<String, Value>, CallReply> {
    let name = &tool.config.name;
    if let Some(principal) = principal {
        let missing = principal.missing(&tool.config.scopes);
        if !missing.is_empty() {
            let text = format!(
                "`{name}` needs the scope(s) {}, which the caller's token does not grant; nothing was run",
                missing.join(" ")
            );
            return Err(CallReply::Result(error_result(text), None));
        }
    }
    // A secret in the arguments would be scrubbed from the journal while the program saw it:
    // the run could never replay what it did. It is refused before anything runs.
    let given = Value::Object(arguments.clone());
    if crate::broker::scrub_value(&given, &runs.secrets) != given {
        let text = "the arguments hold a value this server keeps secret (a credential it uses); nothing was run";
        return Err(CallReply::Result(error_result(text.to_string()), None));
    }
    tool.check_arguments(arguments)
        .map_err(|invalid| CallReply::Result(crate::call::answer::invalid_arguments(&invalid), None))
}

/// A reserved run, started and driven to its reply.
#[allow(clippy::too_many_arguments)] // the call's own parts, passed on whole
async fn run_admitted(
    runs: &Runs,
    tool: &Tool,
    run: &str,
    inputs: &Map<String, Value>,
    control: &CallControl,
    listener: Option<Rc<dyn crate::run::notice::Listener>>,
    caller: Caller<'_>,
    held: (admission::Slot, crate::run::runs::InProgress<'_>),
) -> CallReply {
    let principal = caller.principal;
    let name = &tool.config.name;
    let (_slot, running) = held;
    tracing::Span::current().record("run", run);
    runs.env.reached(Point::Reserved, run);
    let _listening = listener.map(|listener| runs.listeners.listen(run, listener));
    runs.listeners.tell(run, Notice::Started).await;
    let outcome = match RunStore::start(runs, tool, run, inputs).await {
        Ok(()) => {
            runs.log_run_at(name, run, "started", Some(crate::run::notice::DEBUG)).await;
            runs.execute_to_end(tool, run, inputs, crate::run::driver::Entry::Fresh, caller.input_kinds).await
        }
        Err(fatal) => Err(fatal),
    };
    drop(running);
    reply_of(runs, tool, run, inputs, outcome, control, principal)
}

/// The reply a run's outcome gives its caller.
pub(crate) fn reply_of(
    runs: &Runs,
    tool: &Tool,
    run: &str,
    inputs: &Map<String, Value>,
    outcome: Result<crate::run::store::RunEnd, crate::run::store::Fatal>,
    control: &CallControl,
    principal: Option<&Principal>,
) -> CallReply {
    let reply = match outcome {
        Ok(crate::run::store::RunEnd::Ended(end)) => answer(run, &end, tool.program.returns_content()),
        Ok(crate::run::store::RunEnd::Stopped { .. }) => stopped_result(run),
        Ok(crate::run::store::RunEnd::Drained) => crate::call::answer::drained_result(run),
        Ok(crate::run::store::RunEnd::Asking { round, requests, expires_at_ms }) if !control.is_cancelled() => {
            let claims = crate::run::input::Claims {
                run: run.to_string(),
                round,
                tool: tool.config.name.clone(),
                principal: principal.map(|p| p.subject.clone()),
                expires_at_ms,
                request: crate::run::input::request_digest(&tool.config.name, inputs),
            };
            let state = runs.inputs.seal(&claims);
            let meta = json!({crate::call::answer::META_RUN: {"run": run, "status": "waiting_for_input"}});
            let result = json!({"inputRequests": requests, "requestState": state, "_meta": meta});
            return CallReply::InputRequired(result, run.into());
        }
        Ok(crate::run::store::RunEnd::Asking { .. }) => error_result(String::new()),
        Err(fatal) => {
            runs.stop(&fatal);
            error_result(format!(
                "run {run} could not be recorded durably and the server is stopping; it will be recovered at the next start"
            ))
        }
    };
    if control.is_cancelled() {
        let name = &tool.config.name;
        runs.env.log(&format!("tool {name} run {run}: the call was cancelled while running; its answer is not sent"));
        return CallReply::Silent;
    }
    CallReply::Result(reply, Some(run.to_string()))
}
/// Who a call runs for: the token's subject, and the scopes it was granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub subject: String,
    pub scopes: Vec<String>,
}

impl Principal {
    /// The scopes of `wanted` (a tool's) this principal's token does not grant: the HTTP
    /// front answers 403 for them, and a call reaching a run refuses them again.
    pub fn missing<'a>(&self, wanted: &'a [String]) -> Vec<&'a str> {
        wanted.iter().filter(|scope| !self.scopes.contains(scope)).map(String::as_str).collect()
    }
}
