//! The operator's view: the read-only `warden_run_status` tool (listed last), and the
//! report of `warden mcp status`, which reads the ledger without locking or changing it.

use std::path::Path;

use serde_json::{json, Value};

use crate::base::layout::RunFiles;
use crate::base::money::Money;
use crate::catalog::Catalog;
use crate::env::Env;
use crate::manifest::RUN_STATUS_TOOL;
use crate::run::runs::Runs;
use crate::store::ledger::{self, RunPhase, State, LEDGER_FILE};

/// The `tools/list` entry of the status tool.
pub fn describe() -> Value {
    json!({
        "name": RUN_STATUS_TOOL,
        "title": "Run status",
        "description": "Tell what became of a run of this server's tools, by its run id: done (with its result), \
                        failed, running, waiting for an operator, expired (its records are no longer kept) or unknown.",
        "inputSchema": {
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
    // What the state says is answered only once it is durable.
    if let Err(error) = runs.ledger.flush().await {
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
        RunPhase::Open if runs.is_in_progress(&run) => {
            json!({"run": run, "tool": tool, "status": "running"})
        }
        RunPhase::Open if runs.inputs.awaited(&run).is_some() => {
            json!({"run": run, "tool": tool, "status": "waiting_for_input",
                   "detail": "the run asked its client for input; it goes on when the client retries with the answers, or ends when the wait expires"})
        }
        RunPhase::Open => {
            json!({"run": run, "tool": tool, "status": "waiting", "detail": "an action may have happened; the run waits for an operator"})
        }
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

fn status_result(status: Value, summary: String) -> Value {
    let text = format!("{summary}: {}", serde_json::to_string(&status).expect("JSON values serialise"));
    json!({"content": [{"type": "text", "text": text}], "structuredContent": {"result": status}, "isError": false})
}

fn is_run_id(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `warden mcp status <manifest>`: whether a server runs, each unfinished run (its state,
/// the action it is in, its age, the one thing to do) and each tool's quota use (per
/// principal where each has the quota), read from the ledger as it is on disk (beside a
/// running server, without its lock).
pub async fn report(env: &Env, catalog: &Catalog) -> Result<String, String> {
    let journals = &catalog.manifest.server.journals;
    let file = journals.join(LEDGER_FILE);
    let state = ledger::read_on_disk(env, journals).await?;
    let now = env.clock.now_ms().max(state.last_at_ms);
    let running = server_running(env, journals).await;
    let mut out = format!("ledger {} ({} runs recorded)\n", file.display(), state.runs.len());
    out.push_str(match running {
        Some(true) => "server: running (it holds the journals' lock)\n",
        Some(false) => "server: not running\n",
        None => "server: unknown (the journals' lock cannot be probed)\n",
    });
    let here = Here { env, journals, manifest: &catalog.manifest.path, now_ms: now, running: running == Some(true) };
    out.push_str(&unfinished(&here, &state).await);
    out.push_str("quota use:\n");
    for tool in &catalog.tools {
        out.push_str(&quota_lines(tool, &state, now));
    }
    Ok(out)
}

/// Whether a server holds the journals' lock: probed by taking it for an instant (a server
/// starting meanwhile waits for it).
pub async fn server_running(env: &Env, journals: &Path) -> Option<bool> {
    let path = journals.join(crate::base::layout::SERVER_LOCK_FILE);
    if !env.disk.exists(&path).await.ok()? {
        return Some(false);
    }
    match env.disk.try_lock(&path).await {
        Ok(Some(lock)) => {
            drop(lock);
            Some(false)
        }
        Ok(None) => Some(true),
        Err(_) => None,
    }
}

/// A tool's quota use: one line, or one per principal when each principal has the quota.
fn quota_lines(tool: &crate::catalog::Tool, state: &State, now: u64) -> String {
    let name = &tool.config.name;
    let Some(quota) = &tool.config.quota else {
        return format!("  {name}: no quota\n");
    };
    let mut whose: Vec<(String, ledger::Counting)> = vec![(String::new(), ledger::Counting::AllRuns)];
    if quota.per_principal {
        let principals: std::collections::BTreeSet<Option<&str>> =
            state.runs.values().filter(|e| &e.tool == name).map(|e| e.principal.as_deref()).collect();
        whose = (principals.into_iter())
            .map(|principal| {
                let label = format!(" for {}", principal.unwrap_or("callers without a principal"));
                (label, ledger::Counting::Principal(principal))
            })
            .collect();
        if whose.is_empty() {
            return format!("  {name}: none used (each principal has the quota)\n");
        }
    }
    let mut out = String::new();
    for (label, counting) in whose {
        let (calls, money, tokens) = state.quota_use(name, quota.window_ms, now, counting);
        let mut line = format!("  {name}{label}: {calls}");
        match quota.calls {
            Some(max) => line.push_str(&format!(" of {max} calls")),
            None => line.push_str(" calls"),
        }
        if let Some(max) = &quota.money {
            let used = Money { minor: money.get(&max.currency).copied().unwrap_or(0), currency: max.currency.clone() };
            line.push_str(&format!(", {used} of {max}"));
        }
        if let Some(max) = quota.tokens {
            line.push_str(&format!(", {tokens} of {max} model tokens"));
        }
        line.push_str(&format!(" in the last {}\n", ledger::duration_text(quota.window_ms)));
        out.push_str(&line);
    }
    out
}

/// What the report of unfinished runs reads from.
struct Here<'a> {
    env: &'a Env,
    journals: &'a Path,
    manifest: &'a Path,
    now_ms: u64,
    running: bool,
}

/// What a waiting run needs: its action in doubt and the command that resolves it, from
/// its waiting record.
async fn waiting_line(env: &Env, path: &Path) -> String {
    match crate::run::runs::read_waiting(env, path).await {
        Ok(record) => format!(
            "waiting for an operator at action {}: {}; resolve with: {}",
            record.op, record.reason, record.resolve
        ),
        Err(problem) => format!("waiting for an operator, but {} cannot be read: {problem}", path.display()),
    }
}

async fn unfinished(here: &Here<'_>, state: &State) -> String {
    let open: Vec<_> = state.runs.values().filter(|e| e.is_open()).collect();
    if open.is_empty() {
        return "unfinished runs: none\n".to_string();
    }
    let mut out = format!("unfinished runs: {}\n", open.len());
    for entry in open {
        let files = RunFiles::new(here.journals, &entry.tool, &entry.run);
        let waiting = here.env.disk.exists(&files.waiting).await.unwrap_or(false);
        // Whom the run is for, when a remote principal called it.
        let run = match &entry.principal {
            Some(principal) => format!("{} (for {principal})", entry.run),
            None => entry.run.clone(),
        };
        let age = ledger::duration_text(here.now_ms.saturating_sub(entry.reserved_at_ms).max(1000));
        let line = match waiting {
            true => waiting_line(here.env, &files.waiting).await,
            false => run_line(here, &files.journal).await,
        };
        out.push_str(&format!("  {} {run}, reserved {age} ago: {line}\n", entry.tool));
    }
    out
}

/// An unfinished run without a waiting record: what its journal says it is doing, and what
/// applies (nothing while a server runs it; a start when none does).
async fn run_line(here: &Here<'_>, path: &Path) -> String {
    let start = format!("start the server: warden mcp {} (or warden serve-http)", here.manifest.display());
    let journal = match crate::store::files::read_if_present(here.env, path).await {
        Ok(Some(bytes)) => crate::store::journal::Journal::parse(path, &bytes),
        Ok(None) => Err("it has no journal yet".to_string()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    };
    let journal = match journal {
        Ok(journal) => journal,
        Err(problem) if here.running => return format!("starting ({problem})"),
        Err(problem) => return format!("not started ({problem}); the next start releases it; {start}"),
    };
    let halts_next =
        matches!(crate::run::machine::State::from_journal(&journal), Ok(crate::run::machine::State::Halted { .. }));
    if halts_next && !here.running {
        return format!(
            "interrupted at {} starts in a row without getting further: the next start halts it (it may be what \
             stops the server), and it then waits for: warden resolve --journal {} --resume",
            crate::run::machine::CRASHES_BEFORE_HALT,
            path.display()
        );
    }
    if let Some(round) = journal.awaiting_round() {
        return format!(
            "waiting for its client's input (round {round}); it ends as `deadline` when the wait expires; nothing to do"
        );
    }
    let begun = journal.begun_op().and_then(|op| match journal.ops.get(&op) {
        Some(crate::store::journal::OpState::Begun(action)) => {
            serde_json::from_value::<crate::broker::Action>(action.clone()).ok()
        }
        _ => None,
    });
    match (begun, here.running) {
        (Some(action), true) => format!("{} in flight; nothing to do while it runs", action_text(&action)),
        (Some(action), false) => {
            let next = if crate::broker::resend_is_safe(&action) {
                "the next start sends it again (safe to resend)"
            } else if action.kind.is_database() && !action.is_read() {
                "the next start looks it up in warden_actions"
            } else {
                "the next start asks an operator whether it happened"
            };
            format!("{} begun, interrupted when the server stopped; {next}; {start}", action_text(&action))
        }
        (None, true) => "executing its program; nothing to do while it runs".to_string(),
        (None, false) => format!("interrupted when the server stopped; the next start resumes it; {start}"),
    }
}

fn action_text(action: &crate::broker::Action) -> String {
    let target: String = action.target.chars().take(120).collect();
    let target = if target.is_empty() || action.kind == crate::broker::Kind::Model {
        String::new()
    } else {
        format!(" {target}")
    };
    format!("action {} ({} {}{target})", action.op, action.kind, action.method.name())
}
