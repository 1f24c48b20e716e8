//! The read-only `warden_run_status` tool (listed last): what became of a run, for its caller.

use serde_json::{json, Value};

use crate::manifest::RUN_STATUS_TOOL;
use crate::run::runs::Runs;
use crate::store::ledger::RunPhase;

/// The `tools/list` entry of the status tool.
pub fn describe() -> Value {
    json!({
        "name": RUN_STATUS_TOOL,
        "title": "Run status",
        "description": "Tell what became of a run of this server's tools, by its run id: done (with its result), \
                        failed, running, waiting for an operator, expired (its records are no longer kept) or unknown.",
        "inputSchema": {
            "$schema": crate::catalog::SCHEMA_DIALECT,
            "type": "object",
            "properties": {"run": {"type": "string", "description": "The run id (32 hexadecimal characters).", "pattern": "^[0-9a-f]{32}$"}},
            "required": ["run"],
            "additionalProperties": false
        },
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    })
}

/// Answers `warden_run_status` for `run`.
/// `principal`: the caller's (an authenticated remote principal), who may learn only of its
/// own runs; none over stdio or with a static token, who may learn of every run.
pub async fn run_status(
    runs: &Runs,
    arguments: &serde_json::Map<String, Value>,
    principal: Option<&crate::call::Principal>,
) -> Value {
    let run = match arguments.get("run") {
        Some(Value::String(run)) if arguments.len() == 1 && is_run_id(run) => run.clone(),
        _ => {
            return crate::call::answer::error_result(
                "invalid arguments:\n- $.run: expected a run id of 32 hexadecimal characters".into(),
            )
        }
    };
    if let Err(error) = read_up_to_date(runs).await {
        // The error names the ledger's path: the operator's log keeps it, not the caller.
        runs.env.log(&format!("run status: {error}"));
        return crate::call::answer::error_result("the server could not read its ledger durably".to_string());
    }
    let entry = runs.ledger.state().run(&run).cloned();
    // Another principal's run is unknown to this caller: neither its result nor that it exists.
    let entry = entry.filter(|entry| {
        principal.is_none_or(|principal| entry.principal.as_deref() == Some(principal.subject.as_str()))
    });
    let Some(entry) = entry else {
        return status_result(json!({"run": run, "status": "unknown"}), format!("run {run} is unknown to this server"));
    };
    let tool = entry.tool.clone();
    let status = match &entry.phase {
        RunPhase::Released { .. } => {
            json!({"run": run, "tool": tool, "status": "unknown", "detail": "the call was recorded but its run never started"})
        }
        RunPhase::Open => open_status(runs, &run, &tool).await,
        RunPhase::Settled { outcome, .. } => match runs.read_journal(&tool, &run).await {
            Ok(Some(journal)) if journal.end.is_some() => {
                let end = journal.end.expect("checked");
                // Only a failure's text is read from the answer: content or not does not matter.
                let answer = crate::call::answer::answer(&run, &end, false);
                if *outcome == crate::store::journal::RunOutcome::Done {
                    json!({"run": run, "tool": tool, "status": "done", "result": end.result})
                } else {
                    json!({"run": run, "tool": tool, "status": "failed", "kind": outcome,
                           "message": answer["content"][0]["text"]})
                }
            }
            Ok(_) => json!({"run": run, "tool": tool, "status": "expired"}),
            Err(problem) => {
                runs.env.log(&format!("warden_run_status: {problem}"));
                json!({"run": run, "tool": tool, "status": "failed", "kind": "internal", "message": "its journal cannot be read"})
            }
        },
    };
    let text = match status["status"].as_str() {
        Some(status) => format!("run {run} is {status}"),
        None => format!("run {run}"),
    };
    // The run's result may be up to a journal line's size; what is sent has the call's limit.
    crate::call::answer::bounded(status_result(status, text), &run)
}

/// An unfinished run's status: running here, waiting for its client's input, running on another
/// instance of the store, or waiting for an operator.
async fn open_status(runs: &Runs, run: &str, tool: &str) -> Value {
    if runs.is_in_progress(run) {
        return json!({"run": run, "tool": tool, "status": "running"});
    }
    if runs.inputs.awaited(run).is_some() {
        return json!({"run": run, "tool": tool, "status": "waiting_for_input",
               "detail": "the run asked its client for input; it goes on when the client retries with the answers, or ends when the wait expires"});
    }
    if runs.records.store().is_some() && !runs.has_waiting_record(tool, run).await.unwrap_or(true) {
        return json!({"run": run, "tool": tool, "status": "running", "detail": "on another instance of the store"});
    }
    json!({"run": run, "tool": tool, "status": "waiting", "detail": "an action may have happened; the run waits for an operator"})
}

/// What other instances appended is read first (a run admitted by another instance of the
/// store), and what the state says is answered only once it is durable.
pub(crate) async fn read_up_to_date(runs: &Runs) -> Result<(), crate::store::ledger::LedgerError> {
    let caught_up = {
        let held = runs.ledger.lock().await;
        runs.ledger.catch_up(&held).await
    };
    caught_up.and(runs.ledger.flush().await)
}

fn status_result(status: Value, summary: String) -> Value {
    let text = format!("{summary}: {}", serde_json::to_string(&status).expect("JSON values serialise"));
    json!({"content": [{"type": "text", "text": text}], "structuredContent": {"result": status}, "isError": false})
}

fn is_run_id(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
