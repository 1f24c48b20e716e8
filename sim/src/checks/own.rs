//! Findings about an operator's own configuration (`explore --manifest`): not broken
//! invariants of Warden's, but what its settings let happen, with the setting that prevents
//! it named. Three kinds:
//! - `done twice`: one request's effect (a refund of one order, one HTTP write) made by two
//!   runs, as a call sent again starts a second run when its tool has no `once`;
//! - `waited for a person`: a run stopped on an action in doubt that was not safe to send
//!   again (a write without an idempotency key);
//! - `refused by the service`: a write the service refused on its own account (not a fault),
//!   as a program that sends before it reads what it acts on does;
//! - `quota spent on resends`: calls refused over a tool's quota while requests sent again
//!   had each started runs of their own, counted against it again (a tool without `once`);
//! - `relies on the service honouring Idempotency-Key`: in a seed whose services ignore keys,
//!   one run's keyed write made again when Warden sent it again after a lost answer. Told, not
//!   failed: whether a real service honours keys only its operator knows.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use warden::store::ledger::{RunEntry, RunPhase, State};

use crate::checks::check;
use crate::checks::limits::ToolLimits;
use crate::env::services::Effect;
use crate::env::world::World;
use crate::report::Finding;

/// The most characters of a request shown in a finding.
const SHOWN_MAX: usize = 160;

/// The findings of one seed in an operator's world, one per kind and tool at most.
pub fn findings(world: &World, log: &[(u64, String)], limits: &BTreeMap<String, ToolLimits>) -> Vec<Finding> {
    let manifest: Value = (world.disk.peek(&World::path("manifest.json")))
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(Value::Null);
    let mut found = done_twice(world, &manifest, limits);
    found.extend(waited_for_a_person(log));
    found.extend(refused_by_the_service(world, &manifest));
    let mut seen = BTreeSet::new();
    found.retain(|finding| seen.insert((finding.kind, finding.tool.clone())));
    found
}

/// What the client model sent and heard, by call id: for the findings only it can see.
pub struct Calls<'a> {
    pub tools: &'a BTreeMap<i64, String>,
    pub answers: &'a BTreeMap<i64, Value>,
    /// Every run each call's progress named, over its resends.
    pub runs: &'a BTreeMap<i64, BTreeSet<String>>,
}

/// Tools without `once` whose calls were refused over their quota while a call sent again
/// (the same call, after a restart) had started more than one run: the quota paid for the
/// resends. Two calls that only happen to carry the same arguments are not a resend.
pub fn quota_spent_on_resends(world: &World, calls: &Calls<'_>) -> Vec<Finding> {
    let manifest: Value = (world.disk.peek(&World::path("manifest.json")))
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(Value::Null);
    resends_in(&manifest, calls)
}

fn resends_in(manifest: &Value, calls: &Calls<'_>) -> Vec<Finding> {
    let mut refused: BTreeMap<&str, u64> = BTreeMap::new();
    for (id, answer) in calls.answers {
        let limit = answer["_meta"][warden::call::answer::META_REFUSED].as_str().unwrap_or_default();
        if let (true, Some(tool)) = (limit.starts_with("quota."), calls.tools.get(id)) {
            *refused.entry(tool.as_str()).or_default() += 1;
        }
    }
    let mut found = Vec::new();
    for (tool, refusals) in refused.into_iter().filter(|(tool, _)| once_of(manifest, tool).is_none()) {
        let calls_of_tool = calls.tools.iter().filter(|(_, of)| of.as_str() == tool);
        let runs_of = |id: &i64| calls.runs.get(id).map_or(0, BTreeSet::len);
        let again: usize = calls_of_tool.map(|(id, _)| runs_of(id).saturating_sub(1)).sum();
        if again == 0 {
            continue;
        }
        let message = format!(
            "{refusals} call(s) of `{tool}` were refused over its quota, which had counted {again} run(s) started \
             by calls sent again (a call resent after a restart, whose first run had started). `{tool}` has no `once`, so each \
             resend (a client after a restart, a model asking twice) is a new run the quota pays for. Add \
             `\"once\": {{\"by\": [...]}}` to `{tool}`, naming the arguments that say what it acts on: a repeat \
             is then answered by the first run and counted once"
        );
        found.push(Finding { tool: tool.to_string(), kind: "quota spent on resends", message });
    }
    found
}

/// How each tool's calls went, from the client's answers.
pub fn tool_outcomes(
    tools: &BTreeMap<i64, String>,
    answers: &BTreeMap<i64, Value>,
) -> BTreeMap<String, crate::report::ToolOutcome> {
    let mut outcomes: BTreeMap<String, crate::report::ToolOutcome> = BTreeMap::new();
    for (id, answer) in answers {
        let Some(tool) = tools.get(id) else { continue };
        let outcome = outcomes.entry(tool.clone()).or_default();
        outcome.answered += 1;
        match answer["isError"] == Value::Bool(true) {
            false => outcome.succeeded += 1,
            true if outcome.first_failure.is_none() => {
                outcome.first_failure = Some(shown(answer["content"][0]["text"].as_str().unwrap_or_default()));
            }
            true => {}
        }
    }
    outcomes
}

/// Adds the reads beside the workload (by method) to the tools' outcomes: a resource or a
/// prompt that never answers is as worth a warning as a tool.
pub fn add_read_outcomes(outcomes: &mut BTreeMap<String, crate::report::ToolOutcome>, reads: &[(&str, Value)]) {
    for (method, message) in reads {
        let outcome = outcomes.entry(method.to_string()).or_default();
        outcome.answered += 1;
        let failed = message.get("result").is_none() || message["result"]["isError"] == Value::Bool(true);
        match failed {
            false => outcome.succeeded += 1,
            true if outcome.first_failure.is_none() => {
                let said = message["error"]["message"].as_str().unwrap_or_default();
                outcome.first_failure = Some(shown(said));
            }
            true => {}
        }
    }
}

/// The finding of a sweep whose calls to `tool` all failed, if they did.
pub fn never_succeeded(tool: &str, outcome: &crate::report::ToolOutcome) -> Option<String> {
    (outcome.answered > 0 && outcome.succeeded == 0).then(|| {
        format!(
            "none of the {} answered calls of `{tool}` succeeded; the first said: {}. Check the examples its docstring \
             gives (`e.g.`), its grants' `only` patterns, and its database's tables (an `init` file)",
            outcome.answered,
            outcome.first_failure.as_deref().unwrap_or("(nothing)")
        )
    })
}

/// Effects made more than once for one request, by more than one run, each run begun while the
/// `once` key of the run before it held (a run begun after it expired is a new request by the
/// operator's own `once.keep`).
fn done_twice(world: &World, manifest: &Value, limits: &BTreeMap<String, ToolLimits>) -> Vec<Finding> {
    let effects = world.services.effects.borrow();
    let mut by_request: BTreeMap<(&str, &str), Vec<&Effect>> = BTreeMap::new();
    for effect in effects.iter().filter(|effect| effect.kind == "refund" || effect.kind == "http") {
        by_request.entry((effect.kind.as_str(), effect.detail.as_str())).or_default().push(effect);
    }
    let journals = World::path("journals");
    let state = check::ledger_state(&world.disk, &journals).ok();
    let tool_of = |run: &str| state.as_ref().and_then(|state| state.run(run)).map(|entry| entry.tool.clone());
    let mut found = Vec::new();
    for ((kind, detail), made) in by_request.into_iter().filter(|(_, made)| made.len() > 1) {
        let runs: BTreeSet<&str> = made.iter().filter_map(|effect| run_of_key(effect.key.as_deref()?)).collect();
        let keyed = made.iter().all(|effect| effect.key.is_some());
        if keyed && runs.len() < 2 {
            // One run's action, sent again with its key: made once by a service that honours
            // keys, and again by one that does not.
            if world.services.own_writes_ignore_keys.get() && kind == "http" {
                let tools = runs.iter().filter_map(|run| tool_of(run));
                found.extend(tools.map(|tool| relies_on_keys(tool, detail, made.len())));
            }
            continue;
        }
        if keyed && state.as_ref().is_some_and(|state| each_begun_after_a_key_expired(state, &runs, limits)) {
            continue;
        }
        let tools: BTreeSet<String> = match keyed {
            true => runs.iter().filter_map(|run| tool_of(run)).collect(),
            false => tools_reaching(manifest, kind, detail),
        };
        let what = match kind {
            "refund" => format!("a refund of {detail}"),
            _ => format!("an HTTP write of {}", shown(detail)),
        };
        for tool in tools {
            let once = once_of(manifest, &tool);
            let message = done_twice_message(&tool, &what, made.len(), (once, keyed));
            found.push(Finding { tool, kind: "done twice", message });
        }
    }
    found
}

/// The kind of finding that says what holds only if a service honours idempotency keys: told,
/// not a fault of the manifest's (a sweep with only these passes).
pub const RELIES_ON_KEYS: &str = "relies on the service honouring Idempotency-Key";

/// One run's keyed write made `times` times by a service that ignored its key, each resend
/// Warden's own after a lost answer.
fn relies_on_keys(tool: String, detail: &str, times: usize) -> Finding {
    let url = detail.split(' ').nth(1).unwrap_or_default();
    let message = format!(
        "an HTTP write of {} was made {times} times by one run of `{tool}`: its answer was lost, and Warden sent it \
         again with the same Idempotency-Key, as it does for every keyed write. In this seed the service at {} \
         ignored the key (a webhook that never reads it does); one that honours it makes the write once. If \
         yours does not, take `idempotency_key` off the grant: a write whose answer is lost then waits for a \
         person instead of being sent again",
        shown(detail),
        shown(url)
    );
    Finding { tool, kind: RELIES_ON_KEYS, message }
}

/// Whether each of `runs` after the first, in the order they were reserved, began once the run
/// before it had settled and its tool's `once.keep` had passed.
fn each_begun_after_a_key_expired(state: &State, runs: &BTreeSet<&str>, limits: &BTreeMap<String, ToolLimits>) -> bool {
    let mut entries: Vec<&RunEntry> = runs.iter().filter_map(|run| state.run(run)).collect();
    if entries.len() < runs.len() {
        return false;
    }
    entries.sort_by_key(|entry| entry.reserved_at_ms);
    entries.windows(2).all(|pair| {
        let RunPhase::Settled { at_ms: settled, .. } = pair[0].phase else { return false };
        let keep = limits.get(&pair[0].tool).and_then(|tool| tool.once_keep_ms);
        keep.is_some_and(|keep| pair[1].reserved_at_ms >= settled.saturating_add(keep))
    })
}

/// The run an idempotency key Warden made names (`warden-<run>-<op>`).
fn run_of_key(key: &str) -> Option<&str> {
    key.strip_prefix("warden-")?.rsplit_once('-').map(|(run, _)| run)
}

/// `once` of the tool; `keyed`: the writes carried Warden's keys, so their runs are known
/// (and were found to begin while the key before held), else which runs made them is not.
fn done_twice_message(tool: &str, what: &str, times: usize, (once, keyed): (Option<&Value>, bool)) -> String {
    match once {
        Some(once) if !keyed => format!(
            "{what} was made {times} times by separate runs of `{tool}`, whose `once` is {once}: either the calls \
             differed in an argument outside `once.by`, or a repeat came after `once.keep` had passed (the writes \
             carried no idempotency key, so which runs made them is not known); name in `once.by` every argument \
             that says what the tool acts on, and keep the key as long as a repeat may come"
        ),
        None => format!(
            "{what} was made {times} times by separate runs of `{tool}`. `{tool}` has no `once`, so a call sent \
             again (a client resending after a restart, a model asking twice) starts another run, which does it \
             again. Add `\"once\": {{\"by\": [...]}}` to `{tool}`, naming the arguments that say what it acts on \
             (an order, a ticket): a repeat then finds the first run and gets its answer"
        ),
        Some(once) => format!(
            "{what} was made {times} times by separate runs of `{tool}`, whose `once` is {once}: the calls differed \
             in an argument outside `once.by`; name in `once.by` every argument that says what the tool acts on"
        ),
    }
}

fn once_of<'a>(manifest: &'a Value, tool: &str) -> Option<&'a Value> {
    let tools = manifest["tools"].as_array()?;
    tools.iter().find(|t| t["name"] == tool).and_then(|t| t.get("once"))
}

/// The tools whose grants can make an effect of `kind` (a keyless write names no run): for an
/// HTTP write (`detail`: method, URL, body), a write grant whose `only` allows its URL.
fn tools_reaching(manifest: &Value, kind: &str, detail: &str) -> BTreeSet<String> {
    let url = detail.split(' ').nth(1).unwrap_or_default();
    let reaches = |grant: &Value| {
        let cap = grant["cap"].as_str().unwrap_or_default();
        let only: Vec<String> =
            (grant["only"].as_array().into_iter().flatten()).filter_map(|p| p.as_str().map(str::to_string)).collect();
        match kind {
            "refund" => cap == "payments.stripe.refund",
            _ => {
                cap.starts_with("net.http.")
                    && cap != "net.http.get"
                    && warden::broker::urls::allowed(&only, url).is_ok()
            }
        }
    };
    let tools = manifest["tools"].as_array().into_iter().flatten();
    tools
        .filter(|tool| {
            let grants = tool["grants"].as_object().into_iter().flat_map(|grants| grants.values());
            grants.into_iter().any(reaches)
        })
        .filter_map(|tool| tool["name"].as_str().map(str::to_string))
        .collect()
}

/// Writes a service refused on its own account: the program sent what the service could not
/// do, where reading first (and narrowing its grant to what it read) fails the call before
/// anything is sent.
fn refused_by_the_service(world: &World, manifest: &Value) -> Vec<Finding> {
    let journals = World::path("journals");
    let state = check::ledger_state(&world.disk, &journals).ok();
    let tool_of = |run: &str| state.as_ref().and_then(|state| state.run(run)).map(|entry| entry.tool.clone());
    let refused = world.services.refused.borrow();
    let mut found = Vec::new();
    for refusal in refused.iter() {
        let tools: BTreeSet<String> = match refusal.key.as_deref().and_then(run_of_key).and_then(tool_of) {
            Some(tool) => BTreeSet::from([tool]),
            None => tools_reaching(manifest, "refund", ""),
        };
        for tool in tools {
            let message = format!(
                "{} sent by `{tool}` was refused by the service: {}. The program sent it without checking first: read \
                 what it acts on (the payment intent: that it exists, what was paid, in which currency) and narrow \
                 its grant to what it read (`pay.narrow(only = [order], max = paid)`), so a call the service would \
                 refuse fails before anything is sent",
                refusal.what,
                shown(&refusal.answer)
            );
            found.push(Finding { tool, kind: "refused by the service", message });
        }
    }
    found
}

/// Runs that stopped on an action in doubt that was not safe to send again, from the
/// server's warnings.
fn waited_for_a_person(log: &[(u64, String)]) -> Vec<Finding> {
    let mut found = Vec::new();
    for (_, line) in log {
        let Some((head, reason)) = line.split_once(": stopped, waiting for an operator: ") else { continue };
        // A halted run, an action safe to send again whose resend failed too, and a keyed
        // write still unanswered at the run's deadline wait by the design's rule whatever the
        // settings: no setting of the operator's prevents it.
        let by_design = ["without getting further", "sending it again failed", "with the same key, without an answer"];
        if by_design.iter().any(|said| reason.contains(said)) {
            continue;
        }
        let Some(tool) = head.strip_prefix("tool ").and_then(|rest| rest.split(" run ").next()) else { continue };
        let reason = reason.split("; resolve with:").next().unwrap_or(reason);
        let message = format!(
            "a run of `{tool}` waited for a person: {reason}. An action a crash or a lost answer leaves in doubt \
             waits for an operator unless it is safe to send again: a read, or a write with an idempotency key \
             (`\"idempotency_key\": true` on its grant, for a service that honours one)"
        );
        found.push(Finding { tool: tool.to_string(), kind: "waited for a person", message });
    }
    found
}

fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN_MAX) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_key_warden_made_names_its_run() {
        assert_eq!(run_of_key("warden-3e09f1b4-1"), Some("3e09f1b4"));
        assert_eq!(run_of_key("client-key"), None);
    }

    #[test]
    fn a_halted_run_is_no_finding_and_an_action_in_doubt_is() {
        let log = vec![
            (1, "tool t run r: stopped, waiting for an operator: the run was found unfinished at 3 starts in a row without getting further; resolve with: x".to_string()),
            (2, "tool pay run q: stopped, waiting for an operator: action 1 (POST net.http.post) may have reached the service: timeout; resolve with: y".to_string()),
        ];
        let found = waited_for_a_person(&log);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].tool, "pay");
        assert!(found[0].message.contains("action 1 (POST net.http.post) may have reached the service: timeout."));
    }

    fn runs(ids: &[(i64, &[&str])]) -> BTreeMap<i64, BTreeSet<String>> {
        ids.iter().map(|(id, runs)| (*id, runs.iter().map(|r| r.to_string()).collect())).collect()
    }

    #[test]
    fn only_a_call_sent_again_that_ran_again_counts_as_a_resend() {
        let manifest = json!({"tools": [{"name": "t"}]});
        let tools: BTreeMap<i64, String> = (1..=3).map(|id| (id, "t".to_string())).collect();
        let refused = json!({"isError": true, "_meta": {warden::call::answer::META_REFUSED: "quota.calls"}});
        let answers: BTreeMap<i64, Value> = [(3, refused)].into_iter().collect();
        // Two calls with the same arguments, each its own run: a repeat, not a resend.
        let repeats = runs(&[(1, &["r1"]), (2, &["r2"])]);
        let calls = Calls { tools: &tools, answers: &answers, runs: &repeats };
        assert!(resends_in(&manifest, &calls).is_empty());
        // Call 1 sent again after a restart, and run again.
        let resent = runs(&[(1, &["r1", "r3"]), (2, &["r2"])]);
        let calls = Calls { tools: &tools, answers: &answers, runs: &resent };
        let found = resends_in(&manifest, &calls);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].message.contains("counted 1 run(s)"), "{}", found[0].message);
        // With `once`, a resend finds its first run: not this finding's to tell.
        let with_once = json!({"tools": [{"name": "t", "once": {"by": ["x"]}}]});
        assert!(resends_in(&with_once, &calls).is_empty());
    }
}
