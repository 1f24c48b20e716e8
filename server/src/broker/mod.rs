//! Grants and capabilities (DESIGN.md section 5). A program acts on the world only through
//! capability handles bound to the operator's grants; the broker checks every action against
//! its grant before it is journaled, and never lets a call's arguments add or widen one.
//!
//! Inside an execution the broker is pure: a capability method either returns the result the
//! journal already holds for that action number (replay), refuses the action (a capability
//! failure), or suspends the program with the request to perform. The runtime (`runs.rs`)
//! performs a suspended request durably outside Starlark, then executes the program again.

use crate::limits::ACTIONS_PER_RUN_MAX;

pub use crate::manifest::kinds::{self, Kind, Method};
pub mod narrow;
pub mod resolution;
pub mod shown;
pub mod stripe;
pub mod urls;

use std::cell::RefCell;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::base::money::Money;
use crate::manifest::{CapabilityGrant, DbMode, Grant};

/// The largest request body a program may send.
pub const REQUEST_BODY_BYTES_MAX: usize = 1024 * 1024;
/// What journals and logs hold in place of a secret's value.
pub const REDACTED: &str = "[redacted]";
/// The most bytes of rows (as JSON) a `db.sqlite` statement returns; past it, it fails.
pub const SQL_ROWS_BYTES_MAX: usize = 1024 * 1024;
/// The most bytes of response headers kept; past it, the action fails (the body's limit is
/// the manifest's `net.response_bytes_max`).
pub const RESPONSE_HEADERS_BYTES_MAX: usize = 64 * 1024;
/// The most characters of a database's error text kept, cut after it is scrubbed.
pub const ERROR_TEXT_CHARS_MAX: usize = 2048;
/// The longest URL or SQL statement a program may send.
pub const TARGET_BYTES_MAX: usize = 64 * 1024;
/// The most bytes of header names and values a program may set on one request.
pub const HEADERS_BYTES_MAX: usize = 64 * 1024;
/// How deep `scrub_value` decodes JSON held inside strings (a body's text is one level).
const NESTED_JSON_DEPTH_MAX: usize = 4;
/// Headers only Warden sets: the ones that frame the request or carry its authority. A
/// program setting one could send a second `Authorization`, a `Host` the `only` check never
/// approved, or a truncated body.
pub const RESERVED_HEADERS: &[&str] =
    &["host", "authorization", "idempotency-key", "content-length", "transfer-encoding", "connection", "te", "upgrade"];

/// An action as the journal records it: everything needed to perform it again, except
/// secret values (headers from secrets are named, never written).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    pub op: u64,
    /// The capability parameter it was taken through.
    pub grant: String,
    pub kind: Kind,
    pub method: Method,
    /// HTTP: the URL; SQLite: the statement.
    pub target: String,
    /// HTTP headers the program set (secrets are added at send time).
    pub headers: BTreeMap<String, String>,
    /// HTTP body text, or SQLite parameters as JSON text.
    pub body: String,
    /// The money the request moves, read from the request itself.
    pub amount: Option<Value>,
    pub idempotency_key: Option<String>,
    /// The limits of the narrowed handle it was taken through (`narrow.rs`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub narrowed: Option<narrow::Narrowing>,
}

impl Action {
    pub fn is_read(&self) -> bool {
        self.method.is_read()
    }

    pub fn money(&self) -> Option<Money> {
        let amount = self.amount.as_ref()?;
        Money::parse(amount.get("amount")?.as_str()?, amount.get("currency")?.as_str()?).ok()
    }
}

/// What one capability parameter has done in the run so far (the result's `usage`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub actions: u64,
    /// Actions that count against the grant's `uses` (for a composite kind, only its own
    /// action: a refund, not the lookups before it).
    pub limited: u64,
    /// Minor units charged, per currency.
    pub charged: BTreeMap<String, i64>,
    /// Output tokens a model grant's calls used: what `max_tokens` bounds, so what a token
    /// quota counts (the input's tokens are the caller's text, reported in each answer).
    #[serde(default)]
    pub tokens: u64,
}

pub fn usage_json(usage: &BTreeMap<String, Usage>) -> Value {
    let mut out = serde_json::Map::new();
    for (grant, use_) in usage {
        let charged: Vec<Value> = use_
            .charged
            .iter()
            .map(|(currency, &minor)| Money { minor, currency: currency.clone() }.to_json())
            .collect();
        let mut entry = json!({"actions": use_.actions, "charged": charged});
        if use_.tokens > 0 {
            entry["output_tokens"] = json!(use_.tokens);
        }
        out.insert(grant.clone(), entry);
    }
    Value::Object(out)
}

/// What performing an action produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Performed {
    /// A result to journal as the action's done record.
    Done(Value),
    /// The request may have reached the service and cannot safely be sent again.
    InDoubt(String),
}

/// Whether re-sending `action` after a crash between its begin and done records is safe.
pub fn resend_is_safe(action: &Action) -> bool {
    action.is_read() || action.idempotency_key.is_some()
}

/// Why an action is refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    Capability(String),
    Deadline(String),
}

/// One completed action as the journal holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completed {
    pub action: Action,
    pub result: Value,
    /// An operator resolved it as happened (`warden resolve --happened`).
    #[serde(default)]
    pub happened: bool,
}

/// The broker of one execution: the grants, the journal's completed actions, and what this
/// execution asked for. Lives in `Evaluator::extra`.
#[derive(starlark::any::ProvidesStaticType)]
pub struct Broker {
    pub grants: BTreeMap<String, CapabilityGrant>,
    pub completed: Vec<Completed>,
    pub deadline_passed: bool,
    pub deadline_text: String,
    next_op: RefCell<u64>,
    pub usage: RefCell<BTreeMap<String, Usage>>,
    pub suspended: RefCell<Option<Action>>,
    pub refused: RefCell<Option<Refusal>>,
    pub mismatch: RefCell<Option<String>>,
    pub run: String,
    /// What the program reported with `progress(...)` in this execution.
    pub progress: RefCell<Vec<ProgressReport>>,
    /// The journal's input rounds (`ask`), in order; the last may be unanswered.
    pub asked: Vec<AskedRound>,
    pub(crate) next_round: RefCell<usize>,
    /// The requests of a round this execution asks that the journal does not hold.
    pub asking: RefCell<Option<Value>>,
    /// What actions through each narrowing did (by grant and narrowing, as JSON).
    narrowed_usage: RefCell<BTreeMap<String, Usage>>,
}

/// One input round as the journal holds it: the program's requests, and the client's
/// answers once they are journaled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AskedRound {
    pub requests: Value,
    pub answers: Option<Value>,
}

/// What a broker starts one execution with: everything it decides from, so the execution can
/// run in a worker process (`program::job`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BrokerSeed {
    pub run: String,
    pub grants: BTreeMap<String, CapabilityGrant>,
    pub completed: Vec<Completed>,
    pub deadline_passed: bool,
    pub deadline_text: String,
    #[serde(default)]
    pub asked: Vec<AskedRound>,
}

impl Broker {
    pub fn from_seed(seed: BrokerSeed) -> Broker {
        Broker {
            grants: seed.grants,
            completed: seed.completed,
            deadline_passed: seed.deadline_passed,
            deadline_text: seed.deadline_text,
            next_op: RefCell::new(0),
            usage: RefCell::new(BTreeMap::new()),
            suspended: RefCell::new(None),
            refused: RefCell::new(None),
            mismatch: RefCell::new(None),
            run: seed.run,
            progress: RefCell::new(Vec::new()),
            asked: seed.asked,
            next_round: RefCell::new(0),
            asking: RefCell::new(None),
            narrowed_usage: RefCell::new(BTreeMap::new()),
        }
    }

    /// The seed an execution of this broker would start from.
    pub fn seed(&self) -> BrokerSeed {
        BrokerSeed {
            run: self.run.clone(),
            grants: self.grants.clone(),
            completed: self.completed.clone(),
            deadline_passed: self.deadline_passed,
            deadline_text: self.deadline_text.clone(),
            asked: self.asked.clone(),
        }
    }

    pub fn new(run: &str, grants: &BTreeMap<String, Grant>, completed: Vec<Completed>) -> Broker {
        let grants = grants
            .iter()
            .filter_map(|(name, grant)| match grant {
                Grant::Capability(grant) => Some((name.clone(), grant.clone())),
                Grant::Secret { .. } => None,
            })
            .collect();
        Broker {
            grants,
            completed,
            deadline_passed: false,
            deadline_text: String::new(),
            next_op: RefCell::new(0),
            usage: RefCell::new(BTreeMap::new()),
            suspended: RefCell::new(None),
            refused: RefCell::new(None),
            mismatch: RefCell::new(None),
            run: run.to_string(),
            progress: RefCell::new(Vec::new()),
            asked: Vec::new(),
            next_round: RefCell::new(0),
            asking: RefCell::new(None),
            narrowed_usage: RefCell::new(BTreeMap::new()),
        }
    }

    /// Takes the next action number and checks `action` against its grant. Returns the
    /// journaled result when the action was already performed, or the reason to stop.
    pub fn act(&self, mut action: Action) -> Result<Value, Stop> {
        let op = {
            let mut next = self.next_op.borrow_mut();
            let op = *next;
            *next += 1;
            op
        };
        action.op = op;
        if op >= ACTIONS_PER_RUN_MAX {
            return self.refuse(Refusal::Capability(format!("a run may take at most {ACTIONS_PER_RUN_MAX} actions")));
        }
        if self.grants.get(&action.grant).is_some_and(|grant| sends_idempotency_key(grant, &action)) {
            action.idempotency_key = Some(format!("warden-{}-{op}", self.run));
        }
        if let Some(done) = self.completed.get(op as usize) {
            if done.action != action {
                *self.mismatch.borrow_mut() = Some(format!(
                    "action {op} differs from the one journaled: the program did not replay deterministically"
                ));
                return Err(Stop::Mismatch);
            }
            self.count(&action, &done.result, done.happened);
            return Ok(done.result.clone());
        }
        // An action in doubt is resolved before the program executes again (`machine.rs`), so
        // any action asked for here is new: past the deadline it is refused.
        if self.deadline_passed {
            return self.refuse(Refusal::Deadline(deadline_refusal(&self.deadline_text, op)));
        }
        if let Err(refusal) = self.check(&action) {
            return self.refuse(refusal);
        }
        *self.suspended.borrow_mut() = Some(action);
        Err(Stop::Suspend)
    }

    /// Stops the program with a capability failure (a narrowing wider than its handle).
    pub fn refuse_capability(&self, problem: String) -> Stop {
        *self.refused.borrow_mut() = Some(Refusal::Capability(problem));
        Stop::Refused
    }

    fn refuse(&self, refusal: Refusal) -> Result<Value, Stop> {
        *self.refused.borrow_mut() = Some(refusal);
        Err(Stop::Refused)
    }

    fn count(&self, action: &Action, result: &Value, happened: bool) {
        if let Some(key) = narrowed_key(action) {
            let mut narrowed = self.narrowed_usage.borrow_mut();
            self.count_into(narrowed.entry(key).or_default(), action, result, happened);
        }
        let mut usage = self.usage.borrow_mut();
        let use_ = usage.entry(action.grant.clone()).or_default();
        self.count_into(use_, action, result, happened);
    }

    fn count_into(&self, use_: &mut Usage, action: &Action, result: &Value, happened: bool) {
        use_.actions += 1;
        if action.kind == Kind::Model {
            // What the call was charged (every attempt that may have reached the provider);
            // a journal written before that was recorded holds only the answer's usage.
            let charged = result.get("tokens_charged").and_then(Value::as_u64);
            let output = charged.or_else(|| result["usage"]["output_tokens"].as_u64()).unwrap_or(0);
            use_.tokens = use_.tokens.saturating_add(output);
        }
        if self.grants.get(&action.grant).is_some_and(|grant| counts_against_uses(grant, action)) {
            use_.limited += 1;
        }
        let succeeded = result.get("status").and_then(Value::as_u64).is_some_and(|s| (200..300).contains(&s));
        // A request that may have reached the service is charged as if it did: a retry with a
        // new key must not slip past `max` or the quota on the strength of a lost answer.
        let maybe_sent = result.get("may_have_been_sent") == Some(&Value::Bool(true));
        // An operator's word that it happened is charged whatever shape its result has.
        if let (Some(money), true) = (action.money(), succeeded || maybe_sent || happened) {
            *use_.charged.entry(money.currency).or_insert(0) += money.minor;
        }
    }

    /// The grant's limits, for an action not yet performed.
    fn check(&self, action: &Action) -> Result<(), Refusal> {
        let Some(grant) = self.grants.get(&action.grant) else {
            return Err(Refusal::Capability(format!("`{}` is not a grant of this tool", action.grant)));
        };
        let cap = &grant.cap;
        if let (Some(uses), true) = (grant.uses, counts_against_uses(grant, action)) {
            let used = self.usage.borrow().get(&action.grant).map(|u| u.limited).unwrap_or(0);
            if used >= uses {
                return Err(Refusal::Capability(format!(
                    "'{cap}' allows at most {uses} action(s) per run; this is action {}",
                    used + 1
                )));
            }
        }
        if let Some(money) = action.money() {
            if let Some(each) = &grant.each {
                if money.currency != each.currency || money.minor > each.minor {
                    return Err(Refusal::Capability(format!(
                        "'{cap}' allows at most {each} per action; this action needs {money}"
                    )));
                }
            }
            if let Some(max) = &grant.max {
                let spent = self
                    .usage
                    .borrow()
                    .get(&action.grant)
                    .and_then(|u| u.charged.get(&max.currency).copied())
                    .unwrap_or(0);
                if money.currency != max.currency || spent + money.minor > max.minor {
                    let spent = Money { minor: spent, currency: max.currency.clone() };
                    return Err(Refusal::Capability(format!(
                        "'{cap}' allows at most {max} per run; {spent} is spent and this action needs {money}"
                    )));
                }
            }
        }
        check_headers(grant, action)?;
        if let Some(only) = only_list(grant, action) {
            if let Err(problem) = urls::allowed(only, &action.target) {
                return Err(Refusal::Capability(format!("'{}' refused the request: {problem}", action.kind)));
            }
        }
        if grant.cap == Kind::Model {
            let asked = serde_json::from_str::<Value>(&action.body).ok().and_then(|body| body["max_tokens"].as_u64());
            let limit = grant.max_tokens.unwrap_or(0);
            match asked {
                Some(tokens) if (1..=limit).contains(&tokens) => {}
                _ => {
                    let asked = asked.map_or("no".to_string(), |t| t.to_string());
                    return Err(Refusal::Capability(format!(
                        "'model' allows at most {limit} tokens a call; this call asks {asked}"
                    )));
                }
            }
        }
        if grant.mode == Some(DbMode::Read) && action.method == Method::Execute {
            return Err(Refusal::Capability(format!("'{cap}' is granted read-only; `execute` is refused")));
        }
        if let (Some(narrowing), Some(key)) = (&action.narrowed, narrowed_key(action)) {
            let used = self.narrowed_usage.borrow().get(&key).cloned().unwrap_or_default();
            narrowing.check(grant, action, &used).map_err(Refusal::Capability)?;
        }
        Ok(())
    }

    /// The usage of every completed action in the journal (what a run that ended without
    /// reporting its usage, such as a runtime panic, is settled with).
    pub fn journaled_usage(&self) -> BTreeMap<String, Usage> {
        for done in &self.completed {
            self.count(&done.action, &done.result, done.happened);
        }
        self.usage.borrow().clone()
    }
}

/// A program's headers: none Warden sets itself (reserved, or set by the grant from a
/// secret), names that are HTTP tokens, values without line breaks.
fn check_headers(grant: &CapabilityGrant, action: &Action) -> Result<(), Refusal> {
    let refuse = |why: String| Err(Refusal::Capability(format!("'{}' refused the request: {why}", action.kind)));
    for (name, value) in &action.headers {
        let lower = name.to_ascii_lowercase();
        if RESERVED_HEADERS.contains(&lower.as_str()) {
            return refuse(format!("header `{name}` is set by Warden, never by a program"));
        }
        if grant.headers.keys().any(|granted| granted.eq_ignore_ascii_case(name)) {
            return refuse(format!("header `{name}` is set by the grant from a secret, never by a program"));
        }
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return refuse(format!("header name `{}` is not an HTTP token", name.escape_debug()));
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return refuse(format!("header `{name}` has a line break or NUL in its value"));
        }
    }
    Ok(())
}

/// Why action `op` is refused once the tool's deadline (`deadline_text`) has passed.
pub fn deadline_refusal(deadline_text: &str, op: u64) -> String {
    format!("the tool's deadline ({deadline_text}) passed before action {op} could start; nothing more was done")
}

/// Whether the broker sends an `Idempotency-Key` with this action: the grant asks for it
/// (for a composite kind, its `needs.post` does), and the action writes.
fn sends_idempotency_key(grant: &CapabilityGrant, action: &Action) -> bool {
    if action.is_read() {
        return false;
    }
    match grant.needs.get("post") {
        Some(Grant::Capability(post)) => post.idempotency_key,
        _ => grant.idempotency_key,
    }
}

/// The `only` list an HTTP action is checked against: the grant's own, or for a composite
/// kind the one of the `needs` entry it goes through. `None` for actions with no URL.
/// The key under which actions through one narrowing are counted.
fn narrowed_key(action: &Action) -> Option<String> {
    let narrowing = action.narrowed.as_ref()?;
    Some(format!("{} {}", action.grant, serde_json::to_string(narrowing).expect("narrowings serialise")))
}

fn only_list<'a>(grant: &'a CapabilityGrant, action: &Action) -> Option<&'a [String]> {
    if action.kind.is_database() || action.kind == Kind::Model || action.method == Method::Refund {
        return None;
    }
    if grant.cap == Kind::StripeRefund {
        return match grant.needs.get("get") {
            Some(Grant::Capability(get)) => Some(&get.only),
            _ => Some(&[]),
        };
    }
    Some(&grant.only)
}

fn counts_against_uses(grant: &CapabilityGrant, action: &Action) -> bool {
    grant.cap != Kind::StripeRefund || action.method == Method::Refund
}

/// Why a capability method stopped the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Suspend,
    Refused,
    Mismatch,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Suspend => write!(f, "suspended until the action is performed or the input given"),
            Stop::Refused => write!(f, "the broker refused the action"),
            Stop::Mismatch => write!(f, "the program did not replay deterministically"),
        }
    }
}

impl std::error::Error for Stop {}

/// Replaces every secret value in `text` (the broker scrubs what services send back, so a
/// service echoing a header cannot put a secret into a journal).
pub fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        out = out.replace(secret.as_str(), REDACTED);
    }
    if out.contains('\\') {
        out = scrub_escaped(&out, secrets);
    }
    out
}

/// `text` scrubbed of each secret as written, JSON-escaped, or percent-encoded (a request's
/// path or query): where decoding reveals a secret, the decoded text is kept, scrubbed.
pub fn scrub_decoded(text: &str, secrets: &[String]) -> String {
    let scrubbed = scrub(text, secrets);
    if !scrubbed.contains('%') {
        return scrubbed;
    }
    let decoded = percent_encoding::percent_decode_str(&scrubbed).decode_utf8_lossy();
    match secrets.iter().any(|secret| secret.len() >= 4 && decoded.contains(secret.as_str())) {
        true => scrub(&decoded, secrets),
        false => scrubbed,
    }
}

/// `text` scrubbed, then cut to `chars_max` characters: in this order, so a secret the cut
/// would split is still found whole (cut first, its prefix would be kept).
pub fn scrub_then_cut(text: &str, secrets: &[String], chars_max: usize) -> String {
    scrub(text, secrets).chars().take(chars_max).collect()
}

/// Replaces a secret written with JSON escapes (`\/`, `\uXXXX`, `\\`, `\"`) anywhere in
/// `text`, even where `text` as a whole is not JSON (a body behind an anti-XSSI prefix, a
/// message quoting JSON): the text is decoded with a map from each decoded character back to
/// its source bytes, the secrets are found in the decoded text, and their source spans go.
fn scrub_escaped(text: &str, secrets: &[String]) -> String {
    let mut decoded = String::new();
    // For each decoded char: the byte range of `text` it came from.
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while at < text.len() {
        let (c, width) = match (bytes[at], bytes.get(at + 1)) {
            (b'\\', Some(b'/')) => ('/', 2),
            (b'\\', Some(b'\\')) => ('\\', 2),
            (b'\\', Some(b'"')) => ('"', 2),
            (b'\\', Some(b'u')) => match text.get(at + 2..at + 6).and_then(|hex| u32::from_str_radix(hex, 16).ok()) {
                Some(code) => (char::from_u32(code).unwrap_or('\u{fffd}'), 6),
                None => ('\\', 1),
            },
            _ => {
                let c = text[at..].chars().next().expect("at is a char boundary");
                (c, c.len_utf8())
            }
        };
        decoded.push(c);
        spans.extend(std::iter::repeat_n((at, at + width), c.len_utf8()));
        at += width;
    }
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        for (start, found) in decoded.match_indices(secret.as_str()) {
            cuts.push((spans[start].0, spans[start + found.len() - 1].1));
        }
    }
    if cuts.is_empty() {
        return text.to_string();
    }
    cuts.sort();
    let mut out = String::new();
    let mut kept = 0;
    for (start, end) in cuts {
        if start >= kept {
            out.push_str(&text[kept..start]);
            out.push_str(REDACTED);
            kept = end;
        } else {
            kept = kept.max(end);
        }
    }
    out.push_str(&text[kept..]);
    out
}

/// Scrubs every string in `value` as a reader decodes it: JSON strings are compared after
/// their escapes are decoded (`\/`, `\u00XX`), and a string that is itself JSON (a response
/// body's text) is decoded, scrubbed, and written again when it held a secret. Every output
/// boundary (journal, answer, waiting record) passes its JSON through this.
pub fn scrub_value(value: &Value, secrets: &[String]) -> Value {
    scrub_value_at(value, secrets, 0)
}

fn scrub_value_at(value: &Value, secrets: &[String], depth: usize) -> Value {
    match value {
        Value::String(text) => Value::String(scrub_string(text, secrets, depth)),
        Value::Array(items) => Value::Array(items.iter().map(|item| scrub_value_at(item, secrets, depth)).collect()),
        Value::Object(map) => Value::Object(
            map.iter().map(|(k, v)| (scrub_string(k, secrets, depth), scrub_value_at(v, secrets, depth))).collect(),
        ),
        other => other.clone(),
    }
}

fn scrub_string(text: &str, secrets: &[String], depth: usize) -> String {
    let scrubbed = scrub(text, secrets);
    let looks_like_json = matches!(scrubbed.trim_start().as_bytes().first(), Some(b'{' | b'[' | b'"'));
    if depth >= NESTED_JSON_DEPTH_MAX || !looks_like_json || secrets.is_empty() {
        return scrubbed;
    }
    match serde_json::from_str::<Value>(&scrubbed) {
        Ok(inner) => {
            let clean = scrub_value_at(&inner, secrets, depth + 1);
            if clean == inner {
                scrubbed
            } else {
                serde_json::to_string(&clean).expect("JSON values serialise")
            }
        }
        Err(_) => scrubbed,
    }
}

/// What `progress(...)` reported during one execution, in order: a notice for the caller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressReport {
    pub done: i64,
    pub total: Option<i64>,
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_scrubbed_in_every_json_escaped_form_even_outside_json() {
        let secrets = vec!["tok/EN<secret>&1".to_string()];
        for text in [
            "plain tok/EN<secret>&1 text",
            ")]}'\n{\"a\":\"tok\\/EN<secret>&1\"}",
            "{\"a\":\"tok/EN\\u003csecret\\u003e\\u00261\"} and more",
            "\\u0074\\u006f\\u006b\\/EN<secret>&1",
        ] {
            let scrubbed = scrub(text, &secrets);
            assert!(scrubbed.contains(REDACTED), "{text} -> {scrubbed}");
            assert!(!scrubbed.contains("secret>"), "{text} -> {scrubbed}");
        }
        assert_eq!(scrub("nothing \\u0041 here", &secrets), "nothing \\u0041 here");
    }

    /// A secret the cut would split is scrubbed whole first: no prefix of it survives.
    #[test]
    fn a_secret_across_the_cut_leaves_no_prefix() {
        let secrets = vec!["sk-live-0123456789abcdef".to_string()];
        let text = format!("{} the key {} was refused", "x".repeat(20), secrets[0]);
        let kept = scrub_then_cut(&text, &secrets, 40);
        assert!(!kept.contains("sk-live") && kept.chars().count() <= 40, "{kept}");
    }
}
