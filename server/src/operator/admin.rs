//! The admin channel: `warden resolve` beside a live server hands it the operator's word through
//! a Unix socket in the journals directory (`server.admin`, 0600, this account only); the
//! server journals the word, removes the waiting record and resumes the run at once.
//! Resolution never travels over MCP.
//!
//! One request line, one answer line: `{"command": "resolve", "run", "op", "happened"}` or
//! `{"command": "resume", "run"}`; answered `{"ok": text}` or `{"error": text}`.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::env::Env;
use crate::run::runs::Runs;
use crate::run::store::RunStore;
use crate::store::journal::JournalRecord;
use crate::store::ledger::RunPhase;

/// The socket's name in the journals directory (`server.` names are not runs' files).
pub const ADMIN_SOCKET_FILE: &str = "server.admin";
/// The longest request line: a resolution's result and the rest of the request.
pub const REQUEST_BYTES_MAX: usize = crate::operator::verdict::RESOLUTION_BYTES_MAX + 4096;
/// How long `warden resolve` waits for a live server's answer (a journal append and a removal,
/// each fsynced).
pub const ASK_TIMEOUT_MS: u64 = 30_000;

/// What the operator asks a live server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Action `op` of `run` happened (`happened`: its result, as the operator gave it) or not.
    Resolve { run: String, op: u64, happened: Option<String> },
    /// A halted run: resume it again.
    Resume { run: String },
}

/// The socket of the server using `journals`.
pub fn socket_path(journals: &Path) -> PathBuf {
    journals.join(ADMIN_SOCKET_FILE)
}

/// Starts the server's admin channel. A channel that cannot listen (a journals path too long
/// for a Unix socket, say) is logged and the server goes on: resolving then needs it stopped.
pub fn start(runs: &Rc<Runs>) {
    let path = socket_path(&runs.journals);
    let served = Rc::clone(runs);
    let handler: crate::env::AdminHandler = Rc::new(move |line| {
        let runs = Rc::clone(&served);
        Box::pin(async move { handle(&runs, &line).await })
    });
    let listening = runs.env.admin.serve(&path, REQUEST_BYTES_MAX, handler);
    let env = runs.env.clone();
    runs.env.spawn.spawn(Box::pin(async move {
        if let Err(error) = listening.await {
            env.log_at(
                crate::env::Level::Warn,
                &format!(
                    "{}: the admin channel is off ({error}): `warden resolve` needs the server stopped",
                    path.display()
                ),
                &[],
            );
        }
    }));
}

/// Answers one request line.
async fn handle(runs: &Rc<Runs>, line: &[u8]) -> Vec<u8> {
    let answered = match serde_json::from_slice::<Request>(line) {
        Ok(request) => carry_out(runs, request).await,
        Err(error) => Err(format!("not a request this server knows: {error}")),
    };
    let answer = match answered {
        Ok(text) => json!({"ok": crate::broker::scrub(&text, &runs.secrets)}),
        Err(problem) => json!({"error": crate::broker::scrub(&problem, &runs.secrets)}),
    };
    serde_json::to_vec(&answer).expect("JSON values serialise")
}

/// Journals the operator's word for a waiting run, then resumes the run in this server.
async fn carry_out(runs: &Rc<Runs>, request: Request) -> Result<String, String> {
    let run = match &request {
        Request::Resolve { run, .. } | Request::Resume { run } => run.clone(),
    };
    let entry = runs.ledger.state().run(&run).cloned().ok_or_else(|| format!("run {run} is not in the ledger"))?;
    if entry.phase != RunPhase::Open {
        return Err(format!("run {run} has ended; there is nothing to resolve"));
    }
    if runs.is_draining() {
        return Err("the server is stopping: resolve once it has stopped".to_string());
    }
    let tool = runs.catalog.tool(&entry.tool).ok_or_else(|| format!("run {run}: its tool is not served"))?;
    if runs.is_in_progress(&run) {
        return Err(format!("run {run} is executing, not waiting for an operator"));
    }
    // Held while the word is journaled: the run is not resolved twice, and a drain waits.
    let held = runs.running(&run);
    let files = runs.files(&entry.tool, &run);
    let record = word(runs, &request, &files.journal, &files.waiting).await?;
    runs.append(tool, &run, &record).await.map_err(|fatal| stop(runs, &fatal))?;
    runs.remove_if_present(&files.waiting).await.map_err(|fatal| stop(runs, &fatal))?;
    drop(held);
    let said = match &record {
        JournalRecord::Resolved { op, happened, .. } => crate::operator::verdict::resolved_text(*op, *happened),
        _ => "the halted run will be resumed".to_string(),
    };
    runs.env.log(&format!("run {run}: {said} (by the operator, through the admin channel); resuming it"));
    resume(runs, run, entry.tool.clone());
    Ok(format!("{}: {said}; the server resumes the run now", files.journal.display()))
}

/// The record the request asks for, checked against the run's waiting record and journal.
async fn word(runs: &Runs, request: &Request, journal: &Path, waiting: &Path) -> Result<JournalRecord, String> {
    let run = match request {
        Request::Resolve { run, .. } | Request::Resume { run } => run,
    };
    let exists = runs.env.disk.exists(waiting).await.map_err(|e| format!("{}: {e}", waiting.display()))?;
    if !exists {
        return Err(format!("run {run} is not waiting for an operator; this server decides its actions"));
    }
    let record = crate::run::runs::read_waiting(&runs.env, waiting).await?;
    let bytes = runs.env.disk.read(journal).await.map_err(|e| format!("{}: {e}", journal.display()))?;
    let parsed = crate::store::journal::Journal::parse(journal, &bytes)?;
    let at_ms = runs.env.clock.now_ms();
    match request {
        Request::Resolve { op, happened, .. } if !record.halted => {
            crate::operator::verdict::resolved(&parsed, journal, *op, happened.as_deref(), at_ms)
        }
        Request::Resolve { .. } => Err(format!(
            "run {run} is halted, not waiting for a verdict: resume it with `warden resolve --journal {} --resume`",
            journal.display()
        )),
        Request::Resume { .. } if record.halted => Ok(JournalRecord::Retried { at_ms }),
        Request::Resume { .. } => {
            Err(format!("run {run} is not halted; it waits for a verdict on action {}: {}", record.op, record.resolve))
        }
    }
}

/// A durable write failed: the server stops, as it does for any run's write.
fn stop(runs: &Runs, fatal: &crate::run::store::Fatal) -> String {
    runs.stop(fatal);
    format!("the server could not record it and is stopping: {fatal}")
}

/// Resumes `run` from its journal in the background, as a start would.
fn resume(runs: &Rc<Runs>, run: String, tool: String) {
    let runs = Rc::clone(runs);
    let env = runs.env.clone();
    env.spawn.spawn(Box::pin(async move {
        if let Err(fatal) = crate::run::recovery::resume_now(&runs, &run, &tool).await {
            runs.stop(&fatal);
        }
    }));
}

/// `warden resolve` beside a live server: hands `request` to it and returns what it said.
pub async fn ask(env: &Env, journals: &Path, request: &Request) -> Result<String, String> {
    let path = socket_path(journals);
    let line = serde_json::to_vec(request).expect("requests serialise");
    let answer = env.admin.ask(&path, line, ASK_TIMEOUT_MS).await.map_err(|error| {
        format!(
            "a Warden server is using this journal directory, and its admin channel {} cannot be reached ({error}); \
             stop the server, then resolve",
            path.display()
        )
    })?;
    let answer: serde_json::Value = serde_json::from_slice(&answer)
        .map_err(|e| format!("{}: the server's answer is not JSON: {e}", path.display()))?;
    match (answer["ok"].as_str(), answer["error"].as_str()) {
        (Some(text), _) => Ok(format!("{text}\n")),
        (None, Some(problem)) => Err(problem.to_string()),
        (None, None) => Err(format!("{}: the server's answer says neither ok nor error", path.display())),
    }
}
