//! A client's retry of a call whose run asked for input (2026-07-28 multi round-trip): the
//! `requestState` opened and checked against the request, the answers checked by the shape
//! of what was asked, the round taken (once), the answers journaled, the run continued.
//! Every refusal is a -32602 that changes nothing; a retry missing an answer is asked again.

use std::rc::Rc;

use serde_json::{json, Map, Value};

use crate::call::admission::Slots;
use crate::call::{reply_of, CallControl, CallReply, Caller, Retry};
use crate::catalog::Tool;
use crate::limits::INPUT_RESPONSES_BYTES_MAX;
use crate::program::ask::check_answer;
use crate::run::driver::Entry;
use crate::run::input::{request_digest, Claims};
use crate::run::runs::Runs;
use crate::store::journal::Round;

/// Takes the run a retry's `requestState` names up again with the client's answers.
#[allow(clippy::too_many_arguments)]
pub async fn continue_run(
    runs: &Runs,
    slots: &Rc<Slots>,
    tool: &Tool,
    inputs: &Map<String, Value>,
    control: &CallControl,
    listener: Option<Rc<dyn crate::run::notice::Listener>>,
    caller: Caller<'_>,
    retry: &Retry,
) -> CallReply {
    let claims = match checked_claims(runs, tool, inputs, caller, retry) {
        Ok(claims) => claims,
        Err(problem) => return CallReply::Invalid(problem),
    };
    let run = claims.run.as_str();
    let round = match awaited_round(runs, tool, &claims).await {
        Ok(round) => round,
        Err(Unusable::Invalid(problem)) => return CallReply::Invalid(problem),
        // Not a refusal: the state stays usable (found at seed 506, a store refusing a
        // connection; answered as refused, the client gave the round up).
        Err(Unusable::Unreadable) => {
            let text = "the server could not read the run's records just now (its log says why); retry with the \
                        same requestState";
            return CallReply::Result(crate::call::answer::error_result(text.to_string()), None);
        }
    };
    let answers = match answers_of(runs, &round, retry.input_responses.as_ref()) {
        Ok(Some(answers)) => answers,
        // Some answer is missing: the same round is asked again (the state stays usable), if
        // another retry did not take it while the journal was read.
        Ok(None) if runs.inputs.awaits(run, claims.round) => {
            return CallReply::InputRequired(asked_again(&round, retry, run), run.to_string())
        }
        Ok(None) => return CallReply::Invalid(used(run)),
        Err(problem) => return CallReply::Invalid(problem),
    };
    let Some(_slot) = slots.take_named(
        &tool.config.name,
        tool.config.max_concurrent_runs,
        runs.catalog.manifest.server.max_concurrent_runs,
    ) else {
        let text = format!(
            "the server is busy: `{}` already has its maximum of runs in progress; retry with the same requestState",
            tool.config.name
        );
        return CallReply::Result(crate::call::answer::error_result(text), None);
    };
    // The one place a round is taken: a second retry with the same state finds it gone.
    let Some(awaited) = runs.inputs.take(run, claims.round) else {
        return CallReply::Invalid(used(run));
    };
    let _listening = listener.map(|listener| runs.listeners.listen(run, listener));
    // The retry's caller hears which run it continues, as a fresh call's does.
    runs.listeners.tell(run, crate::run::notice::Notice::Started).await;
    runs.log_run(&tool.config.name, run, &format!("its client answered input round {}", claims.round)).await;
    let outcome = runs
        .execute_to_end(
            tool,
            run,
            inputs,
            Entry::Answered { answers, active_ms: awaited.active_ms },
            caller.input_kinds,
        )
        .await;
    reply_of(runs, tool, run, inputs, outcome, control, caller.principal)
}

/// The claims of the retry's state, if the state is this server's, unexpired, and for this
/// request and this principal, and the ledger holds its run as this tool's for this principal.
fn checked_claims(
    runs: &Runs,
    tool: &Tool,
    inputs: &Map<String, Value>,
    caller: Caller<'_>,
    retry: &Retry,
) -> Result<Claims, String> {
    let Value::String(state) = &retry.request_state else {
        return Err("requestState must be the string this server gave".to_string());
    };
    let claims = runs.inputs.open(state)?;
    let principal = caller.principal.map(|p| p.subject.as_str());
    let same_request = claims.tool == tool.config.name && claims.request == request_digest(&tool.config.name, inputs);
    if !same_request || claims.principal.as_deref() != principal {
        return Err("requestState was issued for another request or another caller".to_string());
    }
    if crate::run::input::round_is_over(runs.env.clock.now_ms(), claims.expires_at_ms) {
        return Err("requestState has expired: the run no longer waits for this input".to_string());
    }
    // The seal alone is not trusted with whose run it is: a key read off the disk must not
    // let one principal take another's waiting run. The ledger says whom the run is for.
    let owned = (runs.ledger.state().run(&claims.run))
        .is_some_and(|entry| entry.tool == tool.config.name && entry.principal.as_deref() == principal);
    if !owned {
        return Err("requestState was issued for another request or another caller".to_string());
    }
    Ok(claims)
}

fn used(run: &str) -> String {
    format!(
        "requestState was already used, or run {run} no longer waits for this input (warden_run_status tells how it went)"
    )
}

/// Why a retry's round cannot be taken: its state cannot be used (a protocol error), or the
/// run's journal cannot be read now (the state stays usable).
enum Unusable {
    Invalid(String),
    Unreadable,
}

/// The round the claims name, if the run awaits it now.
async fn awaited_round(runs: &Runs, tool: &Tool, claims: &Claims) -> Result<Round, Unusable> {
    if !runs.inputs.awaits(&claims.run, claims.round) {
        return Err(Unusable::Invalid(used(&claims.run)));
    }
    let journal = match runs.read_journal_telling(&tool.config.name, &claims.run).await {
        Ok(Some(journal)) => journal,
        Ok(None) => return Err(Unusable::Invalid(used(&claims.run))),
        Err((again, problem)) => {
            runs.env.log(&format!("reading the journal of run {} for a retry: {problem}", claims.run));
            return Err(match again {
                true => Unusable::Unreadable,
                false => Unusable::Invalid("the run's journal is damaged (see the server's log)".to_string()),
            });
        }
    };
    match journal.rounds.get(claims.round as usize) {
        Some(round) if round.answered.is_none() => Ok(round.clone()),
        _ => Err(Unusable::Invalid(used(&claims.run))),
    }
}

/// The answers to every key sent (others ignored), each checked by its method's result
/// shape; none when one is missing.
fn answers_of(runs: &Runs, round: &Round, responses: Option<&Value>) -> Result<Option<Value>, String> {
    let responses = match responses {
        None => return Ok(None),
        Some(Value::Object(responses)) => responses,
        Some(_) => return Err("inputResponses must be an object of answers by key".to_string()),
    };
    let mut answers = Map::new();
    for key in &round.sent {
        let Some(answer) = responses.get(key) else { return Ok(None) };
        let method = round.requests[key]["method"].as_str().unwrap_or_default();
        check_answer(method, answer).map_err(|problem| format!("inputResponses[\"{key}\"]: {problem}"))?;
        answers.insert(key.clone(), answer.clone());
    }
    let answers = Value::Object(answers);
    let bytes = serde_json::to_vec(&answers).map_or(usize::MAX, |b| b.len());
    if bytes > INPUT_RESPONSES_BYTES_MAX {
        return Err(format!("the answers take {bytes} bytes; the limit is {INPUT_RESPONSES_BYTES_MAX}"));
    }
    if crate::base::json::depth(&answers) > crate::limits::VALUE_DEPTH_MAX {
        return Err(format!("the answers nest deeper than {} levels", crate::limits::VALUE_DEPTH_MAX));
    }
    // A secret would be scrubbed from the journal while the program saw it: no replay could
    // give the program what it was given.
    if crate::broker::scrub_value(&answers, &runs.secrets) != answers {
        return Err("the answers hold a value this server keeps secret (a credential it uses)".to_string());
    }
    Ok(Some(answers))
}

/// The round's requests asked again, with the same state.
fn asked_again(round: &Round, retry: &Retry, run: &str) -> Value {
    let requests: Map<String, Value> =
        round.sent.iter().filter_map(|key| Some((key.clone(), round.requests.get(key)?.clone()))).collect();
    let meta = json!({crate::call::answer::META_RUN: {"run": run, "status": "waiting_for_input"}});
    json!({"inputRequests": requests, "requestState": retry.request_state, "_meta": meta})
}

/// A `once` repeat of a call whose run awaits input: the same round asked again, with a state
/// for this caller; none when the run does not await input.
pub async fn ask_again(
    runs: &Runs,
    tool: &Tool,
    entry: &crate::store::ledger::RunEntry,
    inputs: &Map<String, Value>,
    principal: Option<&crate::call::Principal>,
    input_kinds: &[String],
) -> Option<CallReply> {
    let awaited = runs.inputs.awaited(&entry.run)?;
    let run = entry.run.clone();
    if entry.principal.as_deref() != principal.map(|p| p.subject.as_str()) {
        let text = format!("run {run} waits for input from the caller that started it; nothing was run");
        return Some(CallReply::Result(crate::call::answer::error_result(text), Some(run)));
    }
    // A round at its deadline is over, though its expiry may not have run yet: a state for
    // it would be refused the moment it was given (seed 36756). The expiry goes by the
    // monotonic clock, so a round is over by either clock.
    let over_by_wall = crate::run::input::round_is_over(runs.env.clock.now_ms(), awaited.expires_at_ms);
    if over_by_wall || runs.env.clock.monotonic_ms() >= awaited.ends_at_monotonic_ms {
        let text = format!(
            "run {run}'s request for input has just expired; the run ends without it (warden_run_status tells how)"
        );
        return Some(CallReply::Result(crate::call::answer::error_result(text), Some(run)));
    }
    let journal = runs.read_journal(&tool.config.name, &run).await.ok()??;
    let round = journal.rounds.get(awaited.round as usize)?;
    // A retry may have taken the round while the journal was read.
    if !runs.inputs.awaits(&run, awaited.round) {
        return None;
    }
    // Only kinds this caller declared are asked: a round it cannot answer is named instead.
    let missing: Vec<&str> = (round.sent.iter())
        .filter_map(|key| {
            crate::program::ask::capability_of(round.requests[key]["method"].as_str().unwrap_or_default())
        })
        .filter(|kind| !input_kinds.iter().any(|k| k == kind))
        .collect();
    if !missing.is_empty() {
        let text = format!(
            "run {run} waits for input of kinds this client did not declare ({}); nothing was run",
            missing.join(", ")
        );
        return Some(CallReply::Result(crate::call::answer::error_result(text), Some(run)));
    }
    let claims = Claims {
        run: run.clone(),
        round: awaited.round,
        tool: tool.config.name.clone(),
        principal: principal.map(|p| p.subject.clone()),
        expires_at_ms: awaited.expires_at_ms,
        request: request_digest(&tool.config.name, inputs),
    };
    let retry = Retry { request_state: Value::String(runs.inputs.seal(&claims)), input_responses: None };
    Some(CallReply::InputRequired(asked_again(round, &retry, &run), run))
}
