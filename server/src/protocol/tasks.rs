//! The 2026-07-28 tasks extension (SEP-2663) over durable runs: a task is a run. A call of a
//! tool that supports tasks, from a client whose request declares the extension, returns a
//! `CreateTaskResult` naming the run once it is reserved, and the run goes on without the
//! request. `tasks/get` reads what the run's ledger entry and journal say (so a task outlives
//! the process that created it), `tasks/update` carries the answers to the round the run
//! awaits (each key as it comes; the run goes on once every key is answered), and
//! `tasks/cancel` ends the run at its next point between actions, never inside one.
//!
//! A principal sees only its own tasks: another's is unknown (-32602), as an absent one.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use serde_json::{json, Map, Value};

use super::jsonrpc::{self, RequestId, RpcError};
use super::{Connection, PendingCall};
use crate::base::sync::{select, Signal};
use crate::call::{CallControl, CallReply, Caller, Retry};
use crate::env::LocalBoxFuture;
use crate::manifest::{Keep, TaskSupport};
use crate::program::FailureKind;
use crate::run::notice::{Listener, Notice};
use crate::run::runs::Runs;
use crate::store::journal::{Journal, RunOutcome};
use crate::store::ledger::RunPhase;

/// The extension's id, under `capabilities.extensions` (the server's and a request's).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// How often a client is asked to poll a task.
pub const POLL_INTERVAL_MS: u64 = 1_000;
/// How often a `tasks/cancel` looks whether its run has ended, and how long it waits at most:
/// a minute past the longest timeout a manifest may give one attempt of an action (a model
/// call's retries can take longer; the answer then says to ask again).
const CANCEL_POLL_MS: u64 = 50;
const CANCEL_WAIT_MS_MAX: u64 = crate::manifest::NET_TIMEOUT_MS_LIMIT + 60_000;
/// Why a `tasks/*` request was not carried out: what it asked cannot be (-32602), or the
/// task's records could not be read just now (-32603, ask again).
enum Refused {
    Invalid(String),
    Unreadable(String),
}

impl Refused {
    /// A journal that could not be read now may be asked for again; one that reads back
    /// damaged is said so, for good.
    fn of_read((again, problem): (bool, String)) -> Refused {
        match again {
            true => Refused::Unreadable(problem),
            false => Refused::Invalid(format!("the task's records are damaged: {problem}")),
        }
    }
}

impl From<String> for Refused {
    fn from(message: String) -> Refused {
        Refused::Invalid(message)
    }
}

/// The longest task id taken (a run id is 32 characters).
const TASK_ID_BYTES_MAX: usize = 64;

/// A `tasks/*` request, its envelope checked.
pub(crate) struct TaskRequest {
    id: RequestId,
    method: TaskMethod,
    task: String,
    responses: Option<Value>,
    /// The input kinds the request's client declared: a run continued with its answers
    /// asks it only those.
    kinds: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TaskMethod {
    Get,
    Update,
    Cancel,
}

/// The answers given so far to the rounds runs await, by run (a round's answers reach its
/// run once every key is answered), and the rounds whose answers were all given. At most one
/// entry of each per run awaiting input.
#[derive(Default)]
pub(crate) struct PartialAnswers {
    given: RefCell<BTreeMap<String, Map<String, Value>>>,
    submitted: RefCell<BTreeSet<(String, u64)>>,
}

/// Whether a request's `_meta` declares the tasks extension among its client's capabilities.
pub(super) fn declared(meta: Option<&Map<String, Value>>) -> bool {
    let capabilities = meta.and_then(|meta| meta.get(super::META_CLIENT_CAPABILITIES));
    capabilities.and_then(|c| c.get("extensions")).and_then(|e| e.get(TASKS_EXTENSION)).is_some_and(Value::is_object)
}

/// -32021: the request lacks a client capability the server needs (`required`, shaped as
/// client capabilities); answered with HTTP 400 over HTTP.
pub(super) fn missing_capability(id: &RequestId, required: Value, what: &str) -> RpcError {
    RpcError::new(Some(id.clone()), jsonrpc::MISSING_CLIENT_CAPABILITY, what.to_string())
        .with_data(json!({"requiredCapabilities": required}))
}

/// The requirement of the extension itself.
pub(super) fn extension_required() -> Value {
    json!({"extensions": {TASKS_EXTENSION: {}}})
}

/// Routes `tasks/get`, `tasks/update` and `tasks/cancel`: the extension first (a client that
/// did not declare it learns nothing of any task), then the task id.
pub(super) fn route(
    method: &str,
    id: &RequestId,
    params: Option<&Map<String, Value>>,
) -> Result<TaskRequest, RpcError> {
    let method = match method {
        "tasks/get" => TaskMethod::Get,
        "tasks/update" => TaskMethod::Update,
        _ => TaskMethod::Cancel,
    };
    if !declared(params.and_then(|p| p.get("_meta")).and_then(Value::as_object)) {
        let what = format!("tasks are an extension the request must declare ({TASKS_EXTENSION})");
        return Err(missing_capability(id, extension_required(), &what));
    }
    let invalid = |message: &str| RpcError::new(Some(id.clone()), jsonrpc::INVALID_PARAMS, message.to_string());
    let task = match params.and_then(|p| p.get("taskId")) {
        Some(Value::String(task)) if !task.is_empty() && task.len() <= TASK_ID_BYTES_MAX => task.clone(),
        _ => return Err(invalid("`taskId` must be the string a CreateTaskResult gave")),
    };
    let responses = params.and_then(|p| p.get("inputResponses")).cloned();
    if method == TaskMethod::Update && !responses.as_ref().is_some_and(Value::is_object) {
        return Err(invalid("tasks/update needs an object `inputResponses`"));
    }
    let capabilities = params.and_then(|p| p.get("_meta")).and_then(|m| m.get(super::META_CLIENT_CAPABILITIES));
    let kinds = (crate::program::ask::INPUT_KINDS.iter())
        .filter(|kind| capabilities.and_then(|c| c.get(**kind)).is_some_and(Value::is_object))
        .map(|kind| kind.to_string())
        .collect();
    Ok(TaskRequest { id: id.clone(), method, task, responses, kinds })
}

/// Whether a call of `support` becomes a task for a request that declared the extension or not;
/// `Err` for a required one the request cannot take.
pub(super) fn becomes_task(support: TaskSupport, declared: bool) -> Result<bool, ()> {
    match (support, declared) {
        (TaskSupport::Required, false) => Err(()),
        (TaskSupport::Forbidden, _) | (TaskSupport::Optional, false) => Ok(false),
        _ => Ok(true),
    }
}

/// Hears the one notice a task waits for: its run was reserved and is starting.
#[derive(Default)]
struct Started {
    run: RefCell<Option<String>>,
    heard: Signal,
}

impl Listener for Started {
    fn hear(&self, run: &str, notice: Notice) -> LocalBoxFuture<'_, ()> {
        if matches!(notice, Notice::Started) && self.run.borrow().is_none() {
            *self.run.borrow_mut() = Some(run.to_string());
            self.heard.set();
        }
        Box::pin(std::future::ready(()))
    }
}

impl Connection {
    /// A call that becomes a task: its run is admitted as any call's, then goes on without
    /// the request, which is answered with the task once the run is reserved (durably). A
    /// call answered before any run starts (refused, a `once` repeat) is answered so.
    pub(super) async fn start_task(self: &Rc<Self>, call: &PendingCall) -> (Option<Value>, Option<String>) {
        let started = Rc::new(Started::default());
        let replied: Rc<RefCell<Option<CallReply>>> = Rc::default();
        let done = Signal::new();
        let listener: Rc<dyn Listener> = started.clone();
        let (runs, slots) = (Rc::clone(&self.runs), Rc::clone(&self.slots));
        let (name, arguments, kinds) = (call.tool.clone(), call.arguments.clone(), call.input.kinds.clone());
        let (principal, traceparent) = (self.principal.clone(), call.traceparent.clone());
        let (reply_slot, finished) = (Rc::clone(&replied), done.clone());
        self.env.spawn.spawn(Box::pin(async move {
            let tool = runs.catalog.callable(&name).expect("routing checked the tool exists");
            // The task's run is not the request's: nothing the request's end does cancels it.
            let control = CallControl::default();
            let caller = Caller {
                principal: principal.as_ref(),
                input_kinds: &kinds,
                retry: None,
                traceparent: traceparent.as_deref(),
            };
            let reply = crate::call::call_tool(&runs, &slots, tool, &arguments, &control, Some(listener), caller).await;
            *reply_slot.borrow_mut() = Some(reply);
            finished.set();
        }));
        let _ = select(Box::pin(started.heard.wait()), Box::pin(done.wait())).await;
        let run = started.run.borrow().clone();
        let Some(run) = run else {
            let reply = replied.borrow_mut().take().unwrap_or(CallReply::Silent);
            return self.answer_untasked(call, reply);
        };
        // The reserve is durable before the task is told: a task named is a run the ledger holds.
        if let Err(error) = self.runs.ledger.flush().await {
            self.env.log(&format!("task {run}: {error}"));
        }
        let now_ms = self.env.clock.now_ms();
        let created = crate::base::time::utc_timestamp(self.created_at_ms(&run).unwrap_or(now_ms));
        let now = crate::base::time::utc_timestamp(now_ms);
        let mut result = json!({
            "resultType": "task",
            "taskId": run,
            "status": "working",
            "createdAt": created,
            "lastUpdatedAt": now,
            "ttlMs": ttl_ms(&self.runs),
            "pollIntervalMs": POLL_INTERVAL_MS,
        });
        result["_meta"] = json!({super::META_SERVER_INFO: self.server_info()});
        (Some(jsonrpc::response(&call.id, result)), Some(run))
    }

    /// The answer to a task call that started no run, as a plain call's.
    fn answer_untasked(&self, call: &PendingCall, reply: CallReply) -> (Option<Value>, Option<String>) {
        match reply {
            CallReply::Result(result, run) => (Some((call.finish)(self, &call.id, result)), run),
            CallReply::InputRequired(result, run) => (Some(self.input_required(call, result, &run)), Some(run)),
            CallReply::Invalid(message) => {
                (Some(RpcError::new(Some(call.id.clone()), jsonrpc::INVALID_PARAMS, message).to_value()), None)
            }
            CallReply::Silent => (None, None),
        }
    }

    /// Answers a `tasks/*` request.
    pub(super) async fn serve_task(self: &Rc<Self>, request: TaskRequest) -> Value {
        // What a task is said to be is only what is durable, and what other instances of the
        // store appended is read first (one may have taken the task's run over and ended it).
        if let Err(error) = crate::call::status::read_up_to_date(&self.runs).await {
            self.env.log(&format!("tasks: {error}"));
            let text = "the server could not read its ledger durably";
            return RpcError::new(Some(request.id), jsonrpc::INTERNAL_ERROR, text).to_value();
        }
        let Some((tool, phase)) = self.task_run(&request.task) else {
            let text = format!("unknown task `{}`: no run of this server for this caller has that id", request.task);
            return RpcError::new(Some(request.id), jsonrpc::INVALID_PARAMS, text).to_value();
        };
        let outcome = match request.method {
            TaskMethod::Get => self.task_status(&request.task, &tool, &phase).await,
            TaskMethod::Update => {
                self.update_task(&request.task, &tool, request.responses.as_ref(), request.kinds).await
            }
            TaskMethod::Cancel => self.cancel_task(&request.task, &tool, &phase).await,
        };
        match outcome {
            Ok(result) => jsonrpc::response(&request.id, result),
            Err(Refused::Invalid(message)) => {
                RpcError::new(Some(request.id), jsonrpc::INVALID_PARAMS, message).to_value()
            }
            Err(Refused::Unreadable(problem)) => {
                self.env.log(&format!("tasks: {problem}"));
                let text = "the server could not read the task's records just now (the error is in its log); \
                            ask again";
                RpcError::new(Some(request.id), jsonrpc::INTERNAL_ERROR, text).to_value()
            }
        }
    }

    /// When the task's run was admitted: its reserve's time in the ledger, the same in every
    /// answer from its creation on (its journal's header comes later, and is not there yet).
    fn created_at_ms(&self, run: &str) -> Option<u64> {
        self.runs.ledger.state().run(run).map(|entry| entry.reserved_at_ms)
    }

    /// The tool and ledger phase of the run `task` names, if it is this caller's.
    fn task_run(&self, task: &str) -> Option<(String, RunPhase)> {
        let state = self.runs.ledger.state();
        let entry = state.run(task)?;
        let principal = self.principal.as_ref().map(|p| p.subject.as_str());
        (principal.is_none() || entry.principal.as_deref() == principal)
            .then(|| (entry.tool.clone(), entry.phase.clone()))
    }

    /// `tasks/get`: the task's status, with its result, its error or the input it awaits.
    async fn task_status(&self, run: &str, tool: &str, phase: &RunPhase) -> Result<Value, Refused> {
        // A journal that cannot be read now is no expired task (found at seed 1363, a store
        // refusing a connection): the caller is told to ask again.
        let journal = self.runs.read_journal_telling(tool, run).await.map_err(Refused::of_read)?;
        let headed = journal.as_ref().map(|journal| journal.header_at_ms);
        let created = self.created_at_ms(run).or(headed).unwrap_or(0);
        let mut status = match phase {
            RunPhase::Released { .. } => {
                failed("the run never started: the server stopped before it began; nothing was done")
            }
            RunPhase::Open => self.open_status(run, journal.as_ref()),
            RunPhase::Settled { .. } => match journal.as_ref().and_then(|journal| journal.end.as_ref()) {
                Some(end) => self.ended_status(run, tool, end),
                None => return Err(format!("task `{run}` has expired: its records are no longer kept").into()),
            },
        };
        let updated = journal.as_ref().and_then(|j| j.end.as_ref()).map_or(self.env.clock.now_ms(), |end| end.at_ms);
        status["resultType"] = json!("complete");
        status["taskId"] = json!(run);
        status["createdAt"] = json!(crate::base::time::utc_timestamp(created));
        status["lastUpdatedAt"] = json!(crate::base::time::utc_timestamp(updated.max(created)));
        status["ttlMs"] = ttl_ms(&self.runs);
        status["pollIntervalMs"] = json!(POLL_INTERVAL_MS);
        Ok(status)
    }

    /// An open run: awaiting input (the keys not yet answered), executing, or stopped for a person.
    fn open_status(&self, run: &str, journal: Option<&Journal>) -> Value {
        if self.runs.inputs.awaited(run).is_some() {
            let round = journal.and_then(|journal| journal.rounds.last()).filter(|round| round.answered.is_none());
            if let Some(round) = round {
                let given = self.task_answers.given.borrow().get(run).cloned().unwrap_or_default();
                let pending: Map<String, Value> = (round.sent.iter())
                    .filter(|key| !given.contains_key(*key))
                    .map(|key| (key.clone(), round.requests[key].clone()))
                    .collect();
                return json!({"status": "input_required", "inputRequests": pending});
            }
        }
        if self.runs.is_in_progress(run) {
            return json!({"status": "working"});
        }
        json!({"status": "working", "statusMessage":
            "an action may have happened and only an operator can tell: the run waits for a person (`warden mcp status` on the server says what to do)"})
    }

    /// A settled run: completed with its result (a tool error too), cancelled, or failed.
    fn ended_status(&self, run: &str, tool: &str, end: &crate::store::journal::EndRecord) -> Value {
        let content = self.catalog.tool(tool).is_some_and(|tool| tool.program.returns_content());
        let answer = crate::broker::scrub_value(&crate::call::answer::answer(run, end, content), &self.runs.secrets);
        match end.outcome {
            RunOutcome::Failed(FailureKind::Cancelled) => json!({"status": "cancelled"}),
            // The run could not finish its work: a protocol error, not a result.
            RunOutcome::Failed(FailureKind::Budget | FailureKind::Deadline | FailureKind::Internal) => {
                failed(answer["content"][0]["text"].as_str().unwrap_or("the run failed"))
            }
            _ => json!({"status": "completed", "result": crate::call::answer::bounded(answer, run)}),
        }
    }

    /// `tasks/update`: keeps the answers to keys the run's round asked (others are ignored);
    /// once every key is answered, the run goes on with them. Every answer is checked before
    /// it is acknowledged: an acknowledged answer is one the run will be given.
    async fn update_task(
        self: &Rc<Self>,
        run: &str,
        tool: &str,
        responses: Option<&Value>,
        kinds: Vec<String>,
    ) -> Result<Value, Refused> {
        let not_waiting = format!("task `{run}` is not waiting for input (tasks/get tells what it is doing)");
        let awaited = self.runs.inputs.awaited(run).ok_or(not_waiting.clone())?;
        if self.task_answers.submitted.borrow().contains(&(run.to_string(), awaited.round)) {
            return Err(Refused::Invalid(format!(
                "the answers to task `{run}`'s questions were all given already; it goes on with them"
            )));
        }
        let journal = self.runs.read_journal_telling(tool, run).await.map_err(Refused::of_read)?;
        let journal = journal.ok_or("the task's journal is gone".to_string())?;
        let round = journal.rounds.last().filter(|round| round.answered.is_none()).ok_or(not_waiting)?;
        let responses = responses.and_then(Value::as_object).cloned().unwrap_or_default();
        let mut given = self.task_answers.given.borrow().get(run).cloned().unwrap_or_default();
        for key in round.sent.iter().filter(|key| responses.contains_key(*key)) {
            let method = round.requests[key]["method"].as_str().unwrap_or_default();
            crate::program::ask::check_answer(method, &responses[key])
                .map_err(|problem| format!("inputResponses[\"{key}\"]: {problem}"))?;
            given.insert(key.clone(), responses[key].clone());
        }
        let answers = Value::Object(given);
        answers_fit(&answers, &self.runs.secrets)?;
        let Value::Object(given) = answers else { unreachable!("built as an object") };
        self.task_answers.submitted.borrow_mut().retain(|(run, round)| self.runs.inputs.awaits(run, *round));
        if !round.sent.iter().all(|key| given.contains_key(key)) {
            self.keep_answers(run, given);
            return Ok(json!({"resultType": "complete"}));
        }
        let inputs = self
            .runs
            .read_inputs(tool, run)
            .await
            .map_err(Refused::Unreadable)?
            .ok_or("the task's arguments are no longer kept".to_string())?;
        self.task_answers.submitted.borrow_mut().insert((run.to_string(), awaited.round));
        self.task_answers.given.borrow_mut().remove(run);
        self.continue_task(run, tool, (awaited, inputs, kinds), Value::Object(given));
        Ok(json!({"resultType": "complete"}))
    }

    /// Keeps a round's answers so far, within one entry per run awaiting input.
    fn keep_answers(&self, run: &str, given: Map<String, Value>) {
        let mut kept = self.task_answers.given.borrow_mut();
        kept.retain(|run, _| self.runs.inputs.awaited(run).is_some());
        if kept.len() < crate::limits::AWAITING_RUNS_MAX {
            kept.insert(run.to_string(), given);
        }
    }

    /// Goes on with a task's run: its round answered, as a client's retry would with the
    /// state the server seals for it now, in a task of its own.
    fn continue_task(
        self: &Rc<Self>,
        run: &str,
        tool: &str,
        (awaited, inputs, kinds): (crate::run::input::Awaited, Map<String, Value>, Vec<String>),
        answers: Value,
    ) {
        let round = awaited.round;
        let claims = crate::run::input::Claims {
            run: run.to_string(),
            round,
            tool: tool.to_string(),
            principal: awaited.principal.clone(),
            expires_at_ms: awaited.expires_at_ms,
            request: crate::run::input::request_digest(tool, &inputs),
        };
        let retry = Retry { request_state: json!(self.runs.inputs.seal(&claims)), input_responses: Some(answers) };
        let (runs, slots, principal) = (Rc::clone(&self.runs), Rc::clone(&self.slots), self.principal.clone());
        let answered = Rc::clone(&self.task_answers);
        let (tool, run) = (tool.to_string(), run.to_string());
        self.env.spawn.spawn(Box::pin(async move {
            let Some(tool) = runs.catalog.callable(&tool) else { return };
            let control = CallControl::default();
            let caller =
                Caller { principal: principal.as_ref(), input_kinds: &kinds, retry: Some(&retry), traceparent: None };
            let reply = crate::call::call_tool(&runs, &slots, tool, &inputs, &control, None, caller).await;
            // Not taken (the tool's runs all busy, say): the round waits for its answers again.
            if runs.inputs.awaits(&run, round) {
                answered.submitted.borrow_mut().remove(&(run.clone(), round));
                let why = match &reply {
                    CallReply::Invalid(problem) => problem.clone(),
                    CallReply::Result(result, _) => result["content"][0]["text"].as_str().unwrap_or("").to_string(),
                    _ => String::new(),
                };
                runs.env.log(&format!(
                    "task {run}: its answers could not be given to its run now ({why}); it waits for them again"
                ));
            }
        }));
    }

    /// `tasks/cancel`: a run awaiting input ends now; an executing one at its next point
    /// between actions; an ended one stays as it ended.
    async fn cancel_task(&self, run: &str, tool: &str, phase: &RunPhase) -> Result<Value, Refused> {
        let ack = json!({"resultType": "complete"});
        if !matches!(phase, RunPhase::Open) {
            return Ok(ack);
        }
        if let Some(awaited) = self.runs.inputs.awaited(run) {
            // Taken by an answer meanwhile, the run executes: it is cancelled as such, below.
            if self.runs.inputs.take(run, awaited.round).is_some() {
                self.task_answers.given.borrow_mut().remove(run);
                cancel_awaiting(&self.runs, tool, run).await;
                // Acknowledged only once its end is durable: a write that failed stops the
                // server, and the run awaits its input again after the restart.
                return match self.runs.ledger.state().run(run).map(|entry| &entry.phase) {
                    Some(RunPhase::Open) => Err(Refused::Invalid(format!(
                        "task `{run}` is not known to be cancelled: its end could not be recorded durably and \
                         the server stops; after its restart ask tasks/get, and send tasks/cancel again if it still \
                         awaits input"
                    ))),
                    _ => Ok(ack),
                };
            }
        }
        if !self.runs.request_cancel(run) {
            return Err(Refused::Invalid(format!(
                "task `{run}` cannot be cancelled now: its run is not executing (it is being taken up with its \
                 answers: ask tasks/get and cancel again; or it waits for a person: an action may have happened, and \
                 only an operator can tell)"
            )));
        }
        self.until_ended(run).await?;
        Ok(ack)
    }

    /// Waits until run `run`, asked to cancel, is no longer executing, and says whether it
    /// ended. The acknowledgement of a cancel says the run has ended, durably: acknowledged
    /// earlier, a crash before the run's next point between actions would resume it and forget
    /// the cancel. An action in flight is waited for (each has a timeout), up to a bound.
    async fn until_ended(&self, run: &str) -> Result<(), String> {
        let mut waited_ms = 0;
        while self.runs.is_in_progress(run) {
            if waited_ms >= CANCEL_WAIT_MS_MAX {
                return Err(format!(
                    "task `{run}` is still inside an action after {} s: it ends at its next point between actions; \
                     ask tasks/get, or send tasks/cancel again",
                    CANCEL_WAIT_MS_MAX / 1000
                ));
            }
            self.runs.env.clock.sleep(CANCEL_POLL_MS).await;
            waited_ms += CANCEL_POLL_MS;
        }
        match self.runs.ledger.state().run(run).map(|entry| &entry.phase) {
            Some(RunPhase::Open) => Err(format!(
                "task `{run}` did not end: its run stopped inside an action (it waits for a person, or for the \
                 server's next start); ask tasks/get"
            )),
            _ => Ok(()),
        }
    }
}

/// Ends a run whose round its client cancelled. Its round is taken already: a run that
/// cannot be ended now stops the server, and awaits its round again after the restart.
async fn cancel_awaiting(runs: &Runs, tool: &str, run: &str) {
    let Some(config) = runs.catalog.tool(tool) else {
        return runs.stop(&crate::run::store::Fatal::bug(format!("task {run}: its tool `{tool}` is not served")));
    };
    let inputs = match runs.read_inputs(tool, run).await {
        Ok(inputs) => inputs.unwrap_or_default(),
        Err(problem) => return runs.stop(&crate::run::store::Fatal::storage(format!("task {run}: {problem}"))),
    };
    runs.log_run(tool, run, "its client cancelled it while it waited for input; it ends").await;
    if let Err(fatal) = runs.execute_to_end(config, run, &inputs, crate::run::driver::Entry::Cancelled, &[]).await {
        runs.stop(&fatal);
    }
}

/// The answers a round may be given: within `INPUT_RESPONSES_BYTES_MAX` and the depth limit,
/// and holding no value the server keeps secret (the program would see what its journal holds
/// scrubbed: no replay could give it the same).
fn answers_fit(answers: &Value, secrets: &[String]) -> Result<(), String> {
    let bytes = serde_json::to_vec(answers).map_or(usize::MAX, |bytes| bytes.len());
    if bytes > crate::limits::INPUT_RESPONSES_BYTES_MAX {
        return Err(format!(
            "the answers take {bytes} bytes; the limit is {}",
            crate::limits::INPUT_RESPONSES_BYTES_MAX
        ));
    }
    if crate::base::json::depth(answers) > crate::limits::VALUE_DEPTH_MAX {
        return Err(format!("the answers nest deeper than {} levels", crate::limits::VALUE_DEPTH_MAX));
    }
    if crate::broker::scrub_value(answers, secrets) != *answers {
        return Err("the answers hold a value this server keeps secret (a credential it uses)".to_string());
    }
    Ok(())
}

/// A failed task: the error its run ended with, as a protocol error.
fn failed(message: &str) -> Value {
    json!({"status": "failed", "error": {"code": jsonrpc::INTERNAL_ERROR, "message": message}})
}

/// How long a task's result is kept: the server's `keep` (null: forever).
fn ttl_ms(runs: &Runs) -> Value {
    match runs.catalog.manifest.server.keep {
        Keep::Days(days) => json!(days.saturating_mul(24 * 60 * 60 * 1000)),
        Keep::Forever => Value::Null,
    }
}
