//! The admin channel: `warden resolve` beside a live server hands it the operator's word through
//! a Unix socket in the journals directory (`server.admin`, 0600, this account only); the
//! server journals the word, removes the waiting record and resumes the run at once.
//! Resolution never travels over MCP.
//!
//! One request line, one answer line: `{"command": "resolve", "run", "tool", "op", "verdict":
//! {"happened": result} | "did_not_happen", "deadline_at_ms"}` or `{"command": "resume", "run",
//! "tool", "deadline_at_ms"}`; answered `{"ok": text}` or `{"error": text}`. A request taken
//! past its deadline (its client gave up) is refused: nothing is recorded behind its back.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::env::{Env, RecordKind};
use crate::run::driver::Entry;
use crate::run::machine::State;
use crate::run::runs::Runs;
use crate::run::store::RunStore;
use crate::store::journal::{JournalRecord, Word};
use crate::store::ledger::{Event, LedgerError, RunPhase};

/// The socket's name in the journals directory (`server.` names are not runs' files).
pub const ADMIN_SOCKET_FILE: &str = "server.admin";
/// The longest request line: a resolution's result and the rest of the request.
pub const REQUEST_BYTES_MAX: usize = crate::operator::verdict::RESOLUTION_BYTES_MAX + 4096;
/// How long `warden resolve` waits for a live server's answer (a journal append and a removal,
/// each fsynced).
pub const ASK_TIMEOUT_MS: u64 = 30_000;
/// A request is refused when less than this is left of its client's wait: what the server
/// records, the client hears.
pub const ASK_MARGIN_MS: u64 = 5_000;

/// What the operator asks a live server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Action `op` of `run` (of `tool`) happened, or did not.
    Resolve {
        run: String,
        tool: String,
        op: u64,
        verdict: Verdict,
        deadline_at_ms: u64,
        /// Who gives the word (kept in the run's journal).
        #[serde(default)]
        by: Option<crate::store::journal::Word>,
    },
    /// A halted run: resume it again.
    Resume { run: String, tool: String, deadline_at_ms: u64 },
    /// End a run with nothing in doubt (between actions, halted before its next action, or
    /// awaiting its client's input) as cancelled, nothing further sent.
    Cancel {
        run: String,
        tool: String,
        deadline_at_ms: u64,
        #[serde(default)]
        by: Option<crate::store::journal::Word>,
    },
    /// Forget the `once` key of an ended run (`warden once release`), as a ledger event: a
    /// call with the same key runs again.
    ReleaseOnce { run: String, tool: String, deadline_at_ms: u64, by: Option<String> },
}

/// The operator's verdict, always explicit: no field left out reads as "did not happen".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Verdict {
    /// It happened, with this result (as the operator gave it, JSON text).
    Happened(String),
    /// It did not: the resumed run may perform it again.
    DidNotHappen,
}

impl Request {
    fn run(&self) -> &str {
        match self {
            Request::Resolve { run, .. }
            | Request::Resume { run, .. }
            | Request::Cancel { run, .. }
            | Request::ReleaseOnce { run, .. } => run,
        }
    }

    fn tool(&self) -> &str {
        match self {
            Request::Resolve { tool, .. }
            | Request::Resume { tool, .. }
            | Request::Cancel { tool, .. }
            | Request::ReleaseOnce { tool, .. } => tool,
        }
    }

    fn deadline_at_ms(&self) -> u64 {
        match self {
            Request::Resolve { deadline_at_ms, .. }
            | Request::Resume { deadline_at_ms, .. }
            | Request::Cancel { deadline_at_ms, .. }
            | Request::ReleaseOnce { deadline_at_ms, .. } => *deadline_at_ms,
        }
    }
}

/// The socket of the server using `journals`; on the PostgreSQL store, instances share the
/// folder, and each has its own socket, named after the instance.
pub fn socket_path(journals: &Path, instance: Option<&str>) -> PathBuf {
    match instance {
        None => journals.join(ADMIN_SOCKET_FILE),
        Some(name) => journals.join(format!("{ADMIN_SOCKET_FILE}.{name}")),
    }
}

/// This server's own socket.
fn own_socket(runs: &Runs) -> PathBuf {
    socket_path(&runs.journals, runs.records.store().map(crate::store::owners::me))
}

/// Starts the server's admin channel. A channel that cannot listen (a journals path too long
/// for a Unix socket, say) is logged and the server goes on: resolving then needs it stopped.
pub fn start(runs: &Rc<Runs>) {
    let path = own_socket(runs);
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

/// A server exiting cleanly removes its socket (one a crash leaves is replaced at the next
/// start); `warden resolve` then finds the lock free and writes to the journal itself.
pub async fn remove_socket(runs: &Runs) {
    let _ = runs.env.disk.remove(&own_socket(runs)).await;
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
    let run = request.run().to_string();
    if runs.env.clock.now_ms() > request.deadline_at_ms() {
        return Err("the request reached the server after its client gave up waiting: nothing was recorded".into());
    }
    // Draining, or stopping after a failed durable write (its ledger takes no more writes):
    // nothing is attempted, not even reading the store, and the word is given again once it
    // has stopped (seed 460399 of the sweep over new seeds).
    if runs.is_draining() || runs.fatal_message().is_some() {
        return Err("the server is stopping: resolve once it has stopped".to_string());
    }
    if let Request::ReleaseOnce { by, .. } = &request {
        return release_once(runs, &run, request.tool(), by.clone()).await;
    }
    if let Some(target) = runs.records.store() {
        owned_here(runs, target, &run).await?;
    }
    let entry = runs.ledger.state().run(&run).cloned().ok_or_else(|| format!("run {run} is not in the ledger"))?;
    if entry.tool != request.tool() {
        return Err(format!("run {run} is a run of `{}`, not of `{}`: check --journal", entry.tool, request.tool()));
    }
    if entry.phase != RunPhase::Open {
        return Err(format!("run {run} has ended; there is nothing to resolve"));
    }
    let most = runs.catalog.manifest.server.max_concurrent_runs;
    if runs.runs_executing() as u64 >= most {
        return Err(format!(
            "the server is running its most runs at once ({most}, server.max_concurrent_runs): resolve again in a \
             moment"
        ));
    }
    let tool = runs.catalog.tool(&entry.tool).ok_or_else(|| format!("run {run}: its tool is not served"))?;
    if runs.is_in_progress(&run) {
        return Err(format!("run {run} is executing, not waiting for an operator"));
    }
    if let Request::Cancel { by, .. } = &request {
        return cancel(runs, tool, &run, by.as_ref()).await;
    }
    // Held while the word is journaled: the run is not resolved twice, and a drain waits.
    let held = runs.running(&run);
    let record = word(runs, &request, &entry.tool).await?;
    runs.append(tool, &run, &record).await.map_err(|fatal| stop(runs, &fatal))?;
    let removed = runs.remove_record(&entry.tool, &run, RecordKind::Waiting, true).await;
    removed.map_err(|fatal| stop(runs, &fatal))?;
    drop(held);
    let said = match &record {
        JournalRecord::Resolved { op, happened, .. } => crate::operator::verdict::resolved_text(*op, *happened),
        _ => "the halted run will be resumed".to_string(),
    };
    let whom = match &request {
        Request::Resolve { by: Some(by), .. } => format!("by {}", by.account),
        _ => "by the operator".to_string(),
    };
    runs.env.log(&format!("run {run}: {said} ({whom}, through the admin channel); resuming it"));
    let journal = runs.records.name(&entry.tool, &run, RecordKind::Journal);
    resume(runs, run, entry.tool.clone());
    Ok(format!("{journal}: {said}; the server resumes the run now"))
}

/// Ends `run` as cancelled by the operator `by`, if nothing of it is in doubt: between
/// actions, halted before its next action, or awaiting its client's input (the round taken
/// first, so no retry answers it meanwhile). Its usage so far is charged at its settle.
async fn cancel(runs: &Rc<Runs>, tool: &crate::catalog::Tool, run: &str, by: Option<&Word>) -> Result<String, String> {
    let name = &tool.config.name;
    let journal = runs.read_journal(name, run).await?.ok_or_else(|| format!("run {run} has not started"))?;
    let state = crate::run::machine::State::from_journal(&journal).map_err(|e| format!("run {run}: {e}"))?;
    let waiting = runs.read_waiting(name, run).await?;
    let in_doubt = match (&state, &waiting) {
        (_, Some(record)) if !record.halted => Some(record.op),
        (State::InDoubt(action) | State::Halted { action: Some(action), .. }, _) => Some(action.op),
        _ => None,
    };
    if let Some(op) = in_doubt {
        return Err(format!(
            "run {run} has action {op} in doubt: decide it first (`warden mcp status` shows it and the command), \
             then cancel; nothing was changed"
        ));
    }
    if let State::Awaiting { round, .. } = state {
        runs.inputs.take(run, round).ok_or_else(|| format!("run {run}: its client is answering it; try again"))?;
    }
    let by = by.map(|by| crate::operator::verdict::word(Some(&by.account), by.note.as_deref())).transpose()?;
    let said = match &by {
        Some(Word { account, note: Some(note) }) => format!("cancelled by {account} (\"{note}\")"),
        Some(Word { account, note: None }) => format!("cancelled by {account}"),
        None => "cancelled by the operator".to_string(),
    };
    let inputs = runs.read_inputs(name, run).await?.unwrap_or_default();
    let ended = runs.execute_to_end(tool, run, &inputs, Entry::CancelledByOperator(said.clone()), &[]).await;
    ended.map_err(|fatal| stop(runs, &fatal))?;
    runs.env.log(&format!("run {run}: {said}, through the admin channel; nothing further is sent"));
    Ok(format!("run {run}: {said}; it ended, nothing further sent"))
}

/// Forgets the `once` key of `run`, an ended run of `tool`, as a ledger event (`by`: the
/// account that asked): a call with the same key runs again. An ended run has no owner, so on
/// the PostgreSQL store any instance does it, after reading what the others wrote.
async fn release_once(runs: &Runs, run: &str, tool: &str, by: Option<String>) -> Result<String, String> {
    if let Some(account) = &by {
        crate::operator::verdict::word(Some(account), None)?;
    }
    let held = runs.ledger.lock().await;
    let unread = |problem: String| format!("the ledger could not be read: {problem}; nothing was changed, try again");
    runs.ledger.catch_up(&held).await.map_err(|error| unread(error.to_string()))?;
    let event = Event::Forget { run: run.to_string(), at_ms: runs.ledger.stamp(), by };
    {
        let state = runs.ledger.state();
        let entry = state.run(run).ok_or_else(|| format!("run {run} is not in the ledger"))?;
        if entry.tool != tool {
            return Err(format!("run {run} is a run of `{}`, not of `{tool}`", entry.tool));
        }
        if entry.is_open() {
            return Err(format!(
                "run {run} has not ended: a key is released once its run has ended (`warden runs cancel` ends one \
                 waiting for input, interrupted or halted); nothing was changed"
            ));
        }
        if state.check(&event).is_err() {
            return Err(format!(
                "run {run} holds no `once` key: its tool has no `once`, the key was released already, or a later run \
                 took it; nothing was changed"
            ));
        }
    }
    match runs.ledger.append(held, event).await {
        Ok(()) => {}
        Err(LedgerError::Unreachable(problem)) => return Err(unread(problem)),
        Err(error) => return Err(stop(runs, &error.into())),
    }
    runs.env.log(&format!("run {run}: its `once` key was released through the admin channel"));
    Ok(format!("run {run}: its `once` key is released; a call of `{tool}` with the same key runs again"))
}

/// On the PostgreSQL store, only the run's owner takes the word (another instance could take
/// the run over meanwhile): refused, naming the owner, when it is another instance. The
/// shared ledger is read first, so a run another instance admitted is known.
async fn owned_here(runs: &Runs, target: &crate::env::PostgresTarget, run: &str) -> Result<(), String> {
    let owners = crate::store::owners::listed(&runs.env, target).await?;
    let me = crate::store::owners::me(target);
    if let Some(owner) = owners.get(run).filter(|owner| *owner != me) {
        return Err(format!(
            "run {run} is owned by instance `{owner}`, not by this one (`{me}`): its own admin channel takes the word; \
             try again"
        ));
    }
    let held = runs.ledger.lock().await;
    match runs.ledger.catch_up(&held).await {
        Ok(()) => Ok(()),
        Err(crate::store::ledger::LedgerError::Unreachable(problem)) => {
            Err(format!("the PostgreSQL store cannot be reached: {problem}; nothing was recorded, try again"))
        }
        Err(error) => Err(stop(runs, &error.into())),
    }
}

/// The record the request asks for, checked against the run's waiting record and journal.
async fn word(runs: &Runs, request: &Request, tool: &str) -> Result<JournalRecord, String> {
    let run = request.run();
    let Some(record) = runs.read_waiting(tool, run).await? else {
        return Err(format!("run {run} is not waiting for an operator; this server decides its actions"));
    };
    let name = runs.records.name(tool, run, RecordKind::Journal);
    let journal = Path::new(&name);
    let parsed = runs.read_journal(tool, run).await?.ok_or_else(|| format!("{name}: the journal is missing"))?;
    let at_ms = runs.env.clock.now_ms();
    match request {
        Request::Resolve { op, verdict, by, .. } if !record.halted => {
            let happened = match verdict {
                Verdict::Happened(result) => Some(result.as_str()),
                Verdict::DidNotHappen => None,
            };
            let by = by.as_ref().map(|by| crate::operator::verdict::word(Some(&by.account), by.note.as_deref()));
            let by = by.transpose()?;
            crate::operator::verdict::resolved(&parsed, journal, *op, happened, (at_ms, by))
        }
        Request::Resolve { .. } => Err(format!(
            "run {run} is halted, not waiting for a verdict: resume it with `warden resolve --journal {} --resume`",
            journal.display()
        )),
        Request::Resume { .. } if record.halted => Ok(JournalRecord::Retried { at_ms }),
        Request::Resume { .. } => {
            Err(format!("run {run} is not halted; it waits for a verdict on action {}: {}", record.op, record.resolve))
        }
        Request::Cancel { .. } | Request::ReleaseOnce { .. } => {
            unreachable!("a cancel or a release is carried out before a word is looked for")
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

/// Why `ask` got no answer.
pub enum Unanswered {
    /// Nothing listens at the socket (a server still starting, or a command that held the
    /// journals' lock for an instant): worth trying again.
    Unreachable(String),
    /// The server refused, or the exchange failed: the message says why.
    Failed(String),
}

/// `warden resolve` beside a live server: hands `request` to it and returns what it said.
pub async fn ask(env: &Env, journals: &Path, instance: Option<&str>, request: &Request) -> Result<String, Unanswered> {
    let path = socket_path(journals, instance);
    let line = serde_json::to_vec(request).expect("requests serialise");
    let answer = env.admin.ask(&path, line, ASK_TIMEOUT_MS).await.map_err(|error| match error.kind() {
        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound if instance.is_some() => {
            Unanswered::Unreachable(format!(
                "instance `{}` owns the run on the PostgreSQL store, and its admin channel {} cannot be reached \
                 ({error}): start the server again (a start in its slot, or another instance once its lease has \
                 ended, takes the run up), then resolve through it",
                instance.unwrap_or_default(),
                path.display()
            ))
        }
        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => Unanswered::Unreachable(format!(
            "a Warden server is using this journal directory, and its admin channel {} cannot be reached ({error}); \
             stop the server, then resolve",
            path.display()
        )),
        std::io::ErrorKind::TimedOut => Unanswered::Failed(format!(
            "the server did not answer within {} s: it may still record the word; look with `warden runs show` \
             before resolving again",
            ASK_TIMEOUT_MS / 1000
        )),
        _ => Unanswered::Failed(format!("{}: {error}", path.display())),
    })?;
    let answer = answered(&path, &answer);
    answer.map_err(Unanswered::Failed)
}

/// The server's answer line: its `ok` text, or its `error`.
fn answered(path: &Path, answer: &[u8]) -> Result<String, String> {
    let answer: serde_json::Value = serde_json::from_slice(answer)
        .map_err(|e| format!("{}: the server's answer is not JSON: {e}", path.display()))?;
    match (answer["ok"].as_str(), answer["error"].as_str()) {
        (Some(text), _) => Ok(format!("{text}\n")),
        (None, Some(problem)) => Err(problem.to_string()),
        (None, None) => Err(format!("{}: the server's answer says neither ok nor error", path.display())),
    }
}
