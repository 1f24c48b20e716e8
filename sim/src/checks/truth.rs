//! Ground truth against the journals, with every limit taken from the manifest the world
//! serves (generated or fixed; no number copied from a fixture).
//!
//! Every write action a journal holds is classified (happened, maybe sent, not happened, in
//! doubt) and given a signature the services' own records carry too: the idempotency key, or
//! the note's body, or the refund's intent and amount, or the (run, action) row an SQLite
//! write commits in `warden_actions`. Then, per signature, the services saw exactly as many
//! effects as the journals say happened (a maybe-sent action may add one). Per run, refunds
//! keep the grant's `each`, `max` and `uses`; per tool, runs admitted in any quota window
//! keep its calls and money.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use warden::broker::Action;
use warden::manifest::kinds::Method;
use warden::manifest::Manifest;
use warden::store::journal::OpState;
use warden::store::ledger::{RunPhase, State};

use crate::checks::limits::{amount, GrantLimits, ToolLimits};

use crate::checks::check;
use crate::env::services::http_write;
use crate::env::world::World;
use crate::report::Violation;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Happened,
    /// A keyed request whose answer was lost: it may have reached the service.
    Maybe,
    NotHappened,
    InDoubt,
}

/// One write action a journal holds.
#[derive(Clone, Debug)]
pub struct WriteOp {
    pub tool: String,
    pub run: String,
    pub op: u64,
    pub action: Action,
    pub status: Status,
}

/// What the services' records name an action by.
pub fn signature(action: &Action, run: &str) -> String {
    if action.kind.is_database() {
        return format!("sql {run} {}", action.op);
    }
    // The key (when sent) and what was sent under it: a request that sends other content
    // than its journal holds does not match.
    let key = action.idempotency_key.as_ref().map(|key| format!("key {key} ")).unwrap_or_default();
    match (action.method, action.money()) {
        // The service records the amount it was sent: in Stripe's unit for the currency.
        (Method::Refund, Some(money)) => {
            let sent = warden::broker::stripe::amount(&money).unwrap_or(money.minor);
            format!("refund {key}{} {sent}", action.body)
        }
        // Where it was sent too: two writes of one body to two URLs are two effects.
        _ => format!("post {key}{}", http_write(action.method.name(), &action.target, &action.body)),
    }
}

fn status_of(state: &OpState) -> (Action, Status) {
    let (action, status) = match state {
        OpState::Begun(action) => (action, Status::InDoubt),
        OpState::NotHappened(action) => (action, Status::NotHappened),
        OpState::Done { action, happened: true, .. } => (action, Status::Happened),
        OpState::Done { action, result, .. } => {
            let answered = result.get("status").and_then(Value::as_u64).is_some_and(|s| (200..300).contains(&s));
            let committed = result.get("changes").is_some();
            let maybe = result.get("may_have_been_sent") == Some(&Value::Bool(true));
            let status = match (answered || committed, maybe) {
                (true, _) => Status::Happened,
                (false, true) => Status::Maybe,
                (false, false) => Status::NotHappened,
            };
            (action, status)
        }
    };
    let action: Action = serde_json::from_value(action.clone()).expect("a journal's action parses as one");
    (action, status)
}

/// Every write action of every journal the ledger names.
pub fn write_ops(world: &World, state: &State) -> Vec<WriteOp> {
    let journals = World::path("journals");
    let mut ops = Vec::new();
    for entry in state.runs.values() {
        let Some(Ok(journal)) = check::journal(&world.disk, &journals, &entry.tool, &entry.run) else { continue };
        for (op, op_state) in &journal.ops {
            let (action, status) = status_of(op_state);
            if !action.is_read() {
                ops.push(WriteOp { tool: entry.tool.clone(), run: entry.run.clone(), op: *op, action, status });
            }
        }
    }
    ops
}

/// Model output tokens each run's journal says its model calls were charged (every completed
/// model action's `tokens_charged`: every attempt that may have reached the provider), by run.
pub fn tokens_by_run(world: &World, state: &State) -> BTreeMap<String, u64> {
    let journals = World::path("journals");
    let mut used = BTreeMap::new();
    for entry in state.runs.values() {
        let Some(Ok(journal)) = check::journal(&world.disk, &journals, &entry.tool, &entry.run) else { continue };
        let tokens: u64 = (journal.ops.values())
            .filter_map(|op| match op {
                OpState::Done { action, result, .. } if action["kind"] == "model" => Some(result),
                _ => None,
            })
            .map(|result| {
                let charged = result.get("tokens_charged").and_then(Value::as_u64);
                charged.or_else(|| result["usage"]["output_tokens"].as_u64()).unwrap_or(0)
            })
            .sum();
        used.insert(entry.run.clone(), tokens);
    }
    used
}

/// The services' effects by signature.
pub fn effects(world: &World) -> BTreeMap<String, u32> {
    let mut seen = BTreeMap::new();
    // A model call changes nothing in the world: it is no effect to account for.
    for effect in world.services.effects.borrow().iter().filter(|effect| effect.kind != "model") {
        let key = effect.key.as_ref().map(|key| format!("key {key} ")).unwrap_or_default();
        let signature = match effect.kind.as_str() {
            "refund" => format!("refund {key}{} {}", effect.detail, effect.minor),
            _ => format!("post {key}{}", effect.detail),
        };
        *seen.entry(signature).or_insert(0) += 1;
    }
    for (signature, times) in world.services.inherited.borrow().iter() {
        *seen.entry(signature.clone()).or_insert(0) += times;
    }
    for desk in world.services.database_keys() {
        world.services.sql(&desk, crate::env::services::ACTIONS_TABLE);
        for row in world.services.sql(&desk, "SELECT run, action FROM warden_actions") {
            let run = row.get("run").and_then(Value::as_str).unwrap_or_default();
            let action = row.get("action").and_then(Value::as_i64).unwrap_or(-1);
            *seen.entry(format!("sql {run} {action}")).or_insert(0) += 1;
        }
    }
    seen
}

/// Credits the services with the writes done in the journals the world starts from: the
/// services that really made them are not simulated, and they were made once.
pub fn inherit(world: &World) {
    let Ok(state) = check::ledger_state(&world.disk, &World::path("journals")) else { return };
    let mut inherited = world.services.inherited.borrow_mut();
    for op in write_ops(world, &state).into_iter().filter(|op| op.status == Status::Happened) {
        *inherited.entry(signature(&op.action, &op.run)).or_insert(0) += 1;
    }
}

/// Invariants 2 and 5: the services saw each action the journals say happened exactly once,
/// and none they say did not happen.
pub fn journals_match_services(world: &World, ops: &[WriteOp]) -> Vec<Violation> {
    let mut claimed: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for op in ops {
        let (certain, maybe) = claimed.entry(signature(&op.action, &op.run)).or_insert((0, 0));
        match op.status {
            Status::Happened => *certain += 1,
            Status::Maybe | Status::InDoubt => *maybe += 1,
            Status::NotHappened => {}
        }
    }
    let seen = effects(world);
    let mut found = Vec::new();
    for op in ops.iter().filter(|op| op.status == Status::Maybe && !op.action.kind.is_database()) {
        found.push(answer_lost_recorded_done(op, seen.get(&signature(&op.action, &op.run)).copied().unwrap_or(0)));
    }
    // In an operator's world whose services ignore keys, a keyed write Warden sent again is
    // made again by design: `checks/own.rs` tells what relies on the key, once per tool.
    let resent_to_a_keyless_service =
        |signature: &str| world.services.own_writes_ignore_keys.get() && signature.starts_with("post key ");
    for (signature, &(certain, maybe)) in &claimed {
        let times = seen.get(signature).copied().unwrap_or(0);
        if times < certain || (times > certain + maybe && !resent_to_a_keyless_service(signature)) {
            let expected = if maybe == 0 { format!("{certain}") } else { format!("{certain} to {}", certain + maybe) };
            found.push(Violation {
                invariant: 2,
                message: format!("{signature}: the services saw it {times} times, the journals say {expected}"),
            });
        }
    }
    for (signature, times) in seen.iter().filter(|(s, _)| !claimed.contains_key(*s)) {
        found.push(Violation {
            invariant: 2,
            message: format!("{signature}: the services saw it {times} times, and no journal holds it"),
        });
    }
    found
}

/// A write whose answer was lost, journaled done as a failure: what the program was told is
/// a guess. Without a key it must wait for a person (5); with one, Warden sends it again
/// until the service answers, so a write the service made and its caller heard failed is the
/// effect and the answer disagreeing (2).
fn answer_lost_recorded_done(op: &WriteOp, times_seen: u32) -> Violation {
    let what = format!("run {} recorded action {} ({} {})", op.run, op.op, op.action.method, op.action.target);
    match op.action.idempotency_key {
        None => Violation { invariant: 5, message: format!("{what} as failed though it may have been sent") },
        Some(_) => Violation {
            invariant: 2,
            message: format!(
                "{what} as failed though its answer was lost, and it carried an idempotency key (safe to send \
                 again); the service made it {times_seen} time(s), and the program was told it failed"
            ),
        },
    }
}

/// Minor units a run's refunds through each grant moved, by what the services saw.
fn charged_by_run(ops: &[WriteOp], seen: &BTreeMap<String, u32>) -> BTreeMap<(String, String), (i64, u64)> {
    let mut charged: BTreeMap<(String, String), (i64, u64)> = BTreeMap::new();
    for op in ops.iter().filter(|op| op.action.method == Method::Refund) {
        let happened = happened_as_seen(op, seen);
        if let (true, Some(money)) = (happened, op.action.amount.as_ref().and_then(amount)) {
            let entry = charged.entry((op.run.clone(), op.action.grant.clone())).or_insert((0, 0));
            entry.0 += money.minor;
            entry.1 += 1;
        }
    }
    charged
}

/// Whether a write counts as made: it happened, or it may have and the service saw it (a
/// refund that failed before it was sent has the signature of the same refund sent again).
fn happened_as_seen(op: &WriteOp, seen: &BTreeMap<String, u32>) -> bool {
    match op.status {
        Status::Happened => true,
        Status::Maybe => seen.get(&signature(&op.action, &op.run)).is_some_and(|&n| n > 0),
        _ => false,
    }
}

/// The limits of `tool`'s grant `grant`, if the manifest gives it that grant.
fn grant_of<'a>(limits: &'a BTreeMap<String, ToolLimits>, tool: &str, grant: &str) -> Option<&'a GrantLimits> {
    limits.get(tool).and_then(|t| t.grants.get(grant))
}

/// Invariants 1 and 4 from the manifest: each refund within `each`, each run within `max`
/// and `uses`, each quota window within its calls and money.
pub fn limits_kept(
    world: &World,
    limits: &BTreeMap<String, ToolLimits>,
    state: &State,
    ops: &[WriteOp],
) -> Vec<Violation> {
    let seen = effects(world);
    let charged = charged_by_run(ops, &seen);
    let tokens = tokens_by_run(world, state);
    let mut found = refunds_within_grants(world, limits, ops, &seen);
    found.extend(refunds_within_narrowings(ops, &seen));
    found.extend(runs_within_grants(limits, state, &charged));
    found.extend(quota_windows_kept(limits, state, &charged, &tokens));
    found.extend(tokens_billed_within_held(world, state));
    found.sort_by(|a, b| a.message.cmp(&b.message));
    found.dedup();
    found
}

/// 1, refund by refund: in its intent's currency, within its grant's `each`, and in the
/// currency of the grant's `max`.
fn refunds_within_grants(
    world: &World,
    limits: &BTreeMap<String, ToolLimits>,
    ops: &[WriteOp],
    seen: &BTreeMap<String, u32>,
) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut push = |message: String| found.push(Violation { invariant: 1, message });
    for op in ops.iter().filter(|op| op.action.method == Method::Refund && op.status != Status::NotHappened) {
        let grant = grant_of(limits, &op.tool, &op.action.grant);
        let money = op.action.amount.as_ref().and_then(amount);
        // The intent's currency is checked when the refund is sent: only a refund the
        // payment service saw is held to it (one begun before a crash may never be sent).
        let reached = seen.contains_key(&signature(&op.action, &op.run));
        let intent_currency = world.services.intents.borrow().get(&op.action.body).map(|(_, c)| c.clone());
        if let (true, Some(currency), Some(money)) = (reached, intent_currency, &money) {
            if !currency.eq_ignore_ascii_case(&money.currency) {
                push(format!("run {} refunded {money} of intent {}, which is in {currency}", op.run, op.action.body));
            }
        }
        if let (Some(grant), Some(money)) = (grant, &money) {
            if let Some(each) =
                grant.each.as_ref().filter(|each| money.currency != each.currency || money.minor > each.minor)
            {
                push(format!("run {} refunded {money}, beyond `each` of {each} ({})", op.run, op.tool));
            }
            if let Some(max) = grant.max.as_ref().filter(|max| money.currency != max.currency) {
                push(format!("run {} refunded {money}, in another currency than `max` of {max}", op.run));
            }
        }
    }
    found
}

/// 1: a refund through a narrowed handle keeps the narrowing its begin record names: the
/// intent in `only`, `each`, and per run and narrowing, `max` and `uses`.
fn refunds_within_narrowings(ops: &[WriteOp], seen: &BTreeMap<String, u32>) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut push = |message: String| found.push(Violation { invariant: 1, message });
    let mut through: BTreeMap<(String, String), (i64, u64)> = BTreeMap::new();
    for op in ops.iter().filter(|op| op.action.method == Method::Refund) {
        let (Some(narrowing), Some(money)) = (&op.action.narrowed, op.action.amount.as_ref().and_then(amount)) else {
            continue;
        };
        if !happened_as_seen(op, seen) {
            continue;
        }
        let outside = !narrowing.only.is_empty() && !narrowing.only.contains(&op.action.body);
        let over_each = narrowing.each.as_ref().is_some_and(|each| money.minor > each.minor);
        if outside || over_each {
            push(format!("run {} refunded {money} of {} outside its narrowing {narrowing:?}", op.run, op.action.body));
        }
        let key = (op.run.clone(), serde_json::to_string(narrowing).expect("narrowings serialise"));
        let entry = through.entry(key).or_insert((0, 0));
        entry.0 += money.minor;
        entry.1 += 1;
        let (minor, count) = *entry;
        if narrowing.max.as_ref().is_some_and(|max| minor > max.minor)
            || narrowing.uses.is_some_and(|uses| count > uses)
        {
            push(format!(
                "run {} refunded {minor} minor units in {count} refunds, beyond its narrowing {narrowing:?}",
                op.run
            ));
        }
    }
    found
}

/// 1, run by run: what its refunds through each grant moved keeps the grant's `max` and `uses`.
fn runs_within_grants(
    limits: &BTreeMap<String, ToolLimits>,
    state: &State,
    charged: &BTreeMap<(String, String), (i64, u64)>,
) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut push = |message: String| found.push(Violation { invariant: 1, message });
    for ((run, grant_name), (minor, count)) in charged {
        let Some(entry) = state.run(run) else { continue };
        let Some(grant) = grant_of(limits, &entry.tool, grant_name) else { continue };
        if let Some(max) = grant.max.as_ref().filter(|max| *minor > max.minor) {
            push(format!("run {run} refunded {minor} minor units, over `max` of {max}"));
        }
        if let Some(uses) = grant.uses.filter(|uses| count > uses) {
            push(format!("run {run} made {count} refunds, over `uses` of {uses}"));
        }
    }
    found
}

/// 4: the runs of a tool admitted within any one quota window keep its calls, model tokens
/// and money.
fn quota_windows_kept(
    limits: &BTreeMap<String, ToolLimits>,
    state: &State,
    charged: &BTreeMap<(String, String), (i64, u64)>,
    tokens: &BTreeMap<String, u64>,
) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut push = |message: String| found.push(Violation { invariant: 4, message });
    for (tool, tool_limits) in limits {
        let Some(quota) = &tool_limits.quota else { continue };
        let runs: Vec<_> =
            state.runs.values().filter(|e| &e.tool == tool && !matches!(e.phase, RunPhase::Released { .. })).collect();
        let spent = |run: &str| charged.iter().filter(|((r, _), _)| r == run).map(|(_, (minor, _))| minor).sum::<i64>();
        for admitted in &runs {
            // Every run admitted before it and reserved within its window was counted then.
            let since = admitted.reserved_at_ms.saturating_sub(quota.window_ms);
            // A quota per principal counts that principal's runs alone.
            let counted =
                |e: &&&warden::store::ledger::RunEntry| !quota.per_principal || e.principal == admitted.principal;
            let window: Vec<_> = runs
                .iter()
                .filter(|e| e.sequence <= admitted.sequence && e.reserved_at_ms > since)
                .filter(counted)
                .collect();
            if let Some(calls) = quota.calls.filter(|&calls| window.len() as u64 > calls) {
                push(format!("{} runs of `{tool}` admitted within one window, over {calls}", window.len()));
            }
            if let Some(max) = quota.tokens {
                let used: u64 = window.iter().map(|e| tokens.get(&e.run).copied().unwrap_or(0)).sum();
                if used > max {
                    push(format!("runs of `{tool}` within one window used {used} model tokens, over {max}"));
                }
            }
            let money: i64 = window.iter().map(|e| spent(&e.run)).sum();
            if let Some(max) = quota.money.as_ref().filter(|max| money > max.minor) {
                push(format!("runs of `{tool}` within one window refunded {money} minor units, over {max}"));
            }
        }
    }
    found
}

/// Invariant 4 against the model provider, which bills every request it received: the tokens
/// it billed are never more than the ledger holds (settled runs at what they were charged,
/// open ones at their worst case). An attempt charged nothing while it may have reached the
/// provider (a timeout, an answer without usage, the send a crash interrupted) shows here.
fn tokens_billed_within_held(world: &World, state: &State) -> Vec<Violation> {
    let mut held = world.services.tokens_held.borrow_mut();
    for entry in state.runs.values() {
        let tokens = if matches!(entry.phase, RunPhase::Released { .. }) { 0 } else { entry.tokens };
        held.insert(entry.run.clone(), tokens);
    }
    let held: u64 = held.values().fold(0, |sum, &tokens| sum.saturating_add(tokens));
    let billed = world.services.model_billed.get();
    match billed > held {
        true => vec![Violation {
            invariant: 4,
            message: format!("the model provider billed {billed} output tokens; the ledger holds {held}"),
        }],
        false => vec![],
    }
}

/// The model calls a journal holds done with a completion: each must be the provider's own
/// text (the simulated provider words every completion `worded ...`), never an empty one made
/// of an answer that had none (a proxy's error page, another API's shape).
pub fn completions_are_the_providers(world: &World, state: &State) -> Vec<Violation> {
    let journals = World::path("journals");
    let mut found = Vec::new();
    for entry in state.runs.values() {
        let Some(Ok(journal)) = check::journal(&world.disk, &journals, &entry.tool, &entry.run) else { continue };
        for op in journal.ops.values() {
            let OpState::Done { action, result, happened: false } = op else { continue };
            let text = result.get("text").and_then(Value::as_str);
            if action["kind"] == "model" && text.is_some_and(|text| !text.starts_with("worded ")) {
                found.push(Violation {
                    invariant: 12,
                    message: format!("run {} was given a completion the provider never wrote: {result}", entry.run),
                });
            }
        }
    }
    found
}

/// Whether the operator should answer that an in-doubt action happened: the services saw
/// more effects of its signature than the journals already claim.
pub fn happened(world: &World, state: &State, run: &str, action: &Action) -> bool {
    let wanted = signature(action, run);
    let claimed = write_ops(world, state)
        .iter()
        .filter(|op| op.status == Status::Happened && signature(&op.action, &op.run) == wanted)
        .count() as u32;
    effects(world).get(&wanted).copied().unwrap_or(0) > claimed
}

/// The manifest the world serves, parsed as the server parses it.
pub fn manifest(world: &World) -> Result<Manifest, String> {
    let path = World::path("manifest.json");
    let text = world.disk.peek(&path).ok_or("the world has no manifest")?;
    Manifest::parse(Path::new(&path), &text).map_err(|e| e.to_string())
}
