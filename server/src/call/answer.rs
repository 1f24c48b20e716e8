//! What a call is answered with, from a run's end (seed 000 section 5's outcome table):
//! the same every time it is asked, so a repeated `once` call gets exactly what the first
//! call got.

use crate::limits::RESULT_BYTES_MAX;
use serde_json::{json, Value};

use crate::program::FailureKind;
use crate::store::journal::{EndRecord, RunOutcome};

/// The answer a run's end gives. A program returning content (`content: true`) is answered
/// with its blocks as the result's content, and no `structuredContent`.
pub fn answer(run: &str, end: &EndRecord, content: bool) -> Value {
    let result = match (end.outcome, &end.result) {
        (RunOutcome::Done, Some(result)) if content => {
            let blocks = match result {
                Value::Array(blocks) => blocks.clone(),
                block => vec![block.clone()],
            };
            json!({"content": blocks, "isError": false})
        }
        (RunOutcome::Done, Some(result)) => {
            let text = serde_json::to_string(result).expect("JSON values serialise");
            json!({
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"result": result},
                "isError": false
            })
        }
        (RunOutcome::Failed(FailureKind::Internal), _) | (RunOutcome::Done, None) => {
            error_result(format!("an internal error happened in run {run}; the details are in the server's log"))
        }
        (RunOutcome::Failed(FailureKind::Capability), _) => {
            error_result(without_paths(end.message.as_deref().unwrap_or_default()))
        }
        (RunOutcome::Failed(kind), _) => {
            error_result(format!("{}: {}", kind.name(), without_paths(end.message.as_deref().unwrap_or(""))))
        }
    };
    // Every answer from a run names it (a `once` repeat answers from an earlier run), so a
    // client can follow it with warden_run_status. Not in `structuredContent`, which must
    // match the tool's output schema.
    let mut result = bounded(result, run);
    result["_meta"] = json!({META_RUN: {"run": run, "outcome": end.outcome.name()}});
    result
}

/// `text` with the folders of every program location (`<folders>/<file>.star:<line>`) left
/// out: where the server keeps its programs is the operator's business (the journal and the
/// log keep it), not the caller's.
pub fn without_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(".star:") {
        let (before, after) = rest.split_at(at);
        // The location's start: after the last character that cannot be in a path.
        let start = before.rfind(|c: char| c.is_whitespace() || "\"'`(<[,".contains(c)).map_or(0, |i| i + 1);
        let location = &before[start..];
        out.push_str(&before[..start]);
        out.push_str(location.rsplit_once('/').map_or(location, |(_, file)| file));
        out.push_str(".star:");
        rest = &after[".star:".len()..];
    }
    out.push_str(rest);
    out
}

pub fn error_result(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// The `_meta` key under which a call refused on its arguments carries each problem with its
/// JSON path.
pub const META_INVALID_ARGUMENTS: &str = "dev.warden/invalid-arguments";

/// The `_meta` key under which an answer from a run names the run, and its outcome (or,
/// stopped, its status).
pub const META_RUN: &str = "dev.warden/run";
/// The `_meta` key naming the limit a refused call met (`quota.calls`, `quota.money`,
/// `quota.tokens`): a client, and the simulator, can tell refusals apart without reading text.
pub const META_REFUSED: &str = "dev.warden/refused";
/// What `META_REFUSED` names for a call refused because the server is stopping.
pub const REFUSED_STOPPING: &str = "shutdown";

/// A call refused on its arguments: every problem as text, and again with paths in `_meta`.
pub fn invalid_arguments(invalid: &crate::program::InvalidInputs) -> Value {
    let mut result = error_result(invalid.text());
    result["_meta"] = json!({META_INVALID_ARGUMENTS: invalid.meta()});
    result
}

/// A result over `RESULT_BYTES_MAX` is not sent; it stays in the journal.
pub fn bounded(result: Value, run: &str) -> Value {
    let size = serde_json::to_vec(&result).map(|bytes| bytes.len()).unwrap_or(usize::MAX);
    if size <= RESULT_BYTES_MAX {
        return result;
    }
    error_result(format!(
        "the result of run {run} is {size} bytes, over the limit of {RESULT_BYTES_MAX} bytes, so it was not sent; \
         it is kept in the run's journal, where warden_run_status and the operator can reach it"
    ))
}

/// A run stopped in doubt: it waits for an operator (seed 000 section 5, `stopped`).
pub fn stopped_result(run: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": format!(
            "run {run} stopped: an action may already have happened and only an operator can tell. \
             The run is waiting for an operator. Do not call this tool again for it; follow run {run} with warden_run_status."
        )}],
        // Not in `structuredContent`, which must match the tool's output schema.
        "_meta": {META_RUN: {"status": "waiting_for_operator", "run": run}},
        "isError": true
    })
}

/// The answer to a call whose run stopped between actions because the server is stopping.
pub fn drained_result(run: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": format!(
            "the server is stopping: run {run} stopped between two actions, with nothing in doubt, and goes on when \
             the server starts again. Follow run {run} with warden_run_status; calling this tool again starts another \
             run, unless the tool's `once` key answers the call from this one."
        )}],
        "_meta": {META_RUN: {"status": "interrupted", "run": run}},
        "isError": true
    })
}

/// The answer to a call that came while the server stops.
pub fn stopping_result() -> Value {
    let mut result = error_result("the server is stopping; nothing was run: call again once it is back".to_string());
    result["_meta"] = json!({META_REFUSED: REFUSED_STOPPING});
    result
}

#[cfg(test)]
mod path_tests {
    use super::without_paths;

    #[test]
    fn a_caller_never_sees_where_programs_are_kept() {
        assert_eq!(
            without_paths(
                "error: boom\n --> /srv/warden/support-desk/close_ticket.star:17:9\n at support-desk/x.star:2:1"
            ),
            "error: boom\n --> close_ticket.star:17:9\n at x.star:2:1"
        );
        assert_eq!(without_paths("no location here"), "no location here");
        assert_eq!(without_paths("(a/b.star:1:2)"), "(b.star:1:2)");
    }
}
