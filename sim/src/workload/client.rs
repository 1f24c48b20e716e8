//! The client model: a connection that speaks both eras, sends the workload's calls, records
//! every answer and the runs its progress notifications named, and resends after restarts.

use std::collections::{BTreeMap, BTreeSet};

use rand_chacha::ChaCha8Rng;
use rand_core::RngCore;
use serde_json::{json, Value};

use warden_faults::WorldFile;

use crate::env::world::Instance;
use crate::report::Report;
use crate::report::Violation;
use crate::workload::generate::call_arguments;

#[derive(Default)]
pub struct Client {
    pub next_id: i64,
    /// id -> the call message, for calls not yet answered.
    pub unanswered: BTreeMap<i64, Value>,
    pub answers: BTreeMap<i64, Value>,
    /// id -> run ids its progress notifications named, in order (since it was last sent).
    pub runs: BTreeMap<i64, Vec<String>>,
    /// id -> every run its progress named, over its resends too.
    pub runs_ever: BTreeMap<i64, BTreeSet<String>>,
    /// (id, tool) of every call sent.
    pub tools: BTreeMap<i64, String>,
    pub trace: Vec<u8>,
    /// Tools whose unanswered calls are sent again after a restart (those with `once`).
    pub resend: BTreeSet<String>,
    /// The world's tool (by index) that takes most calls, in some seeds.
    pub hot_tool: Option<usize>,
    /// Connections opened so far: a call is answered by the server it was sent to only if
    /// no new connection came between.
    pub connections: u64,
    /// id -> (connection, virtual time) of each call when it was sent.
    pub sent: BTreeMap<i64, (u64, u64)>,
    /// The `deadline` of each tool that has one and no `once` (each of its calls is a fresh
    /// run, so a refusal measures this call's time alone).
    pub deadlines: BTreeMap<String, u64>,
    /// The `deadline` of every tool that has one: a run waiting for input ends at it, so a
    /// retry after it is refused whatever its round's own wait (seed 448503).
    pub run_deadlines: BTreeMap<String, u64>,
    /// Calls answered `input_required`, not retried yet: (the call as sent, its result).
    pub asked: Vec<(Value, Value)>,
    /// Retries sent with a `requestState`, by id: what a refusal of each may be.
    pub retries: BTreeMap<i64, Retried>,
    /// Rounds the client left unanswered on purpose (their runs must end at their expiry).
    pub abandoned: u32,
    /// What became of the retries of each (run, round).
    pub rounds: BTreeMap<(String, u64), RoundRetries>,
    /// id -> the run an answer names (`_meta["dev.warden/run"]`): a `once` repeat's is the
    /// earlier run's.
    pub answered_by: BTreeMap<i64, String>,
    /// id -> the arguments each call was sent with (a retry's are its call's).
    pub arguments: BTreeMap<i64, Value>,
    /// id -> the latest stamp of the durable ledger when each call of a tool with `once` was
    /// first sent: the time its admission decides at is no earlier.
    pub sent_floor: BTreeMap<i64, u64>,
    /// The answers to the calls the server had to refuse (`refusable.rs`), by id.
    pub refusable_answers: BTreeMap<String, Value>,
    /// Events of retries sent, for the report at the next read.
    pub pending_events: Vec<(u64, String, String)>,
    /// Tools whose manifest entry lets a call become a task.
    pub task_tools: BTreeSet<String>,
    /// Tools that run only as a task (`task: "required"`), and the client capabilities each
    /// tool `requires`: a client that knows the tool declares them.
    pub task_required: BTreeSet<String>,
    pub requires: BTreeMap<String, Vec<String>>,
    /// Whether principals differ by id parity (an OAuth world): a task is read as the other
    /// principal now and then, which must not find it.
    pub principals: bool,
    /// Calls answered with a task, followed to its end, by call id.
    pub tasks: BTreeMap<i64, Followed>,
    /// Requests about tasks sent, by id: the call whose task they ask about, as whom, and what.
    pub task_requests: BTreeMap<i64, TaskRequest>,
    /// Answers to tasks' rounds, to send with the next requests about tasks.
    pub task_updates: Vec<(i64, Value)>,
    /// An operator's world: its prompts' messages are the operator's, not known here.
    pub own_world: bool,
    /// In an operator's world, the answers to the reads beside the workload, by method
    /// (`resources/read`, `prompts/get`): they count in the tools' outcomes.
    pub read_answers: Vec<(&'static str, Value)>,
    /// A client of an instance beside the first (`peers.rs`): it offers no elicitation and
    /// asks for no task, since a retry or a task's poll reaching an instance that no longer
    /// owns the run is refused, not forwarded (a known gap).
    pub plain: bool,
}

/// A task the client follows.
#[derive(Clone, Debug, Default)]
pub struct Followed {
    pub task: String,
    /// The end it was told (completed, failed, cancelled).
    pub ended: Option<String>,
    /// Unknown to the server after it was created (its run released, or retention took it).
    pub lost: bool,
    /// The client asked to cancel it.
    pub cancelled: bool,
    /// The server acknowledged the cancel: the run has ended, so every status asked after it
    /// is an end.
    pub cancel_acknowledged: bool,
}

/// A `tasks/*` request the client sent.
#[derive(Clone, Copy, Debug)]
pub struct TaskRequest {
    /// The call whose task it asks about.
    pub call: i64,
    /// Sent as that call's principal, or as the other one.
    pub own: bool,
    /// A `tasks/cancel` (its answer is an acknowledgement, not a status).
    pub cancel: bool,
    /// Sent after the task's cancel was acknowledged.
    pub after_cancel_acknowledged: bool,
}

/// The tasks extension's id.
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// A retry of a call that asked for input, as the client sent it.
#[derive(Clone, Debug)]
pub struct Retried {
    /// The connection it was sent on.
    pub connection: u64,
    /// The (run, round) its state names.
    pub round: (String, u64),
    /// When the call that asked was sent (virtual ms): a round's wait ends after
    /// `INPUT_WAIT_MS`, by the server's monotonic clock.
    pub asked_at: u64,
    /// Its state was altered by the client (a claim changed, the seal kept): never served.
    pub tampered: bool,
    /// Another instance owned the run when it was sent (the store says so): refused by
    /// design, however long its answer takes to be read (seed 440829).
    pub owned_elsewhere_when_sent: bool,
}

/// What became of the retries of one input round.
#[derive(Clone, Debug, Default)]
pub struct RoundRetries {
    /// The retries sent.
    pub sent: Vec<i64>,
    /// The retry served, if one was.
    pub served: Option<i64>,
    /// Retries refused with no excuse.
    pub refused: Vec<i64>,
    /// Some refusal gave another reason than the round being taken already.
    pub refused_otherwise: bool,
}

/// `state` with its claims changed and its seal kept: naming `other` (another run's round
/// of the same tool), else (`seed` picks) an unknown run or the next round.
fn tampered(state: &Value, other: Option<(String, u64)>, seed: u64) -> String {
    use base64::Engine;
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let text = state.as_str().unwrap_or_default();
    let Some((payload, seal)) = text.split_once('.') else { return format!("{text}x") };
    let Some(mut claims) = engine.decode(payload).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()) else {
        return format!("{text}x");
    };
    match (other, seed % 2) {
        (Some((run, round)), _) => {
            claims["run"] = json!(run);
            claims["round"] = json!(round);
        }
        (None, 0) => claims["run"] = json!(format!("{:032x}", seed)),
        (None, _) => claims["round"] = json!(claims["round"].as_u64().unwrap_or(0) + 1),
    }
    format!("{}.{seal}", engine.encode(serde_json::to_vec(&claims).expect("JSON")))
}

/// The (run, round) a `requestState` names: its claims are base64url JSON before the seal
/// (readable, not forgeable).
fn round_of(state: &Value) -> Option<(String, u64)> {
    use base64::Engine;
    let payload = state.as_str()?.split_once('.')?.0;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    Some((claims["run"].as_str()?.to_string(), claims["round"].as_u64()?))
}

impl Client {
    /// A new connection: the client opens a 2025-11-25 session too, so each call can use
    /// either era on the same connection. Every other session declares elicitation, so its
    /// calls' runs ask it through server requests (`answer_session_request`).
    pub fn connect(&mut self, instance: &Instance) {
        self.connections += 1;
        let elicits = self.connections % 2 == 1 && !self.plain;
        let capabilities = if elicits { json!({"elicitation": {}}) } else { json!({}) };
        instance.send(&json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "sim-client", "version": "1"}}}));
        instance.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    pub fn call(&mut self, tool: &str, arguments: Value, legacy: bool) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        // Two 2026-07-28 calls in three come from a client that can answer elicitations.
        let mut capabilities = if id % 3 == 0 || self.plain { json!({}) } else { json!({"elicitation": {}}) };
        // A tool that needs what only a 2026-07-28 request declares is called in that era, with
        // it declared (a client that knows the tool's `requires` and `task`).
        let requires = self.requires.get(tool).cloned().unwrap_or_default();
        let task_required = self.task_required.contains(tool);
        let legacy = legacy && requires.is_empty() && !task_required;
        for capability in requires {
            capabilities[capability] = json!({});
        }
        // One 2026-07-28 call in four of a tool that allows it asks for a task.
        if !legacy && (task_required || (id % 4 == 1 && self.task_tools.contains(tool))) {
            capabilities["extensions"] = json!({TASKS_EXTENSION: {}});
        }
        let meta = if legacy {
            json!({"progressToken": id})
        } else {
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": capabilities, "progressToken": id})
        };
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments, "_meta": meta}});
        self.unanswered.insert(id, message.clone());
        self.tools.insert(id, tool.to_string());
        self.arguments.insert(id, message["params"]["arguments"].clone());
        message
    }

    /// After a restart the client sends again what was not answered, for tools with `once`
    /// (the same logical operation); a call to a tool without it would be a new run, so
    /// the client gives it up (its run, if it started, is still followed to its end).
    pub fn resend_after_restart(&mut self, instance: &Instance) {
        let (tools, resend) = (&self.tools, &self.resend);
        self.unanswered.retain(|id, _| tools.get(id).is_some_and(|tool| resend.contains(tool)));
        for (id, message) in &self.unanswered {
            // A retry sent on this very connection is still in progress: not sent twice.
            if self.retries.get(id).is_some_and(|retried| retried.connection == self.connections) {
                continue;
            }
            // A resent call starts afresh: a run named before the crash does not answer it.
            self.runs.remove(id);
            instance.send(message);
        }
    }

    /// Records call `id` as sent now, on the current connection.
    pub fn sent_now(&mut self, id: i64, now: u64) {
        self.sent.insert(id, (self.connections, now));
    }

    /// A deadline measures time that passed (seed 000 section 3): a call refused on its
    /// deadline by the server it was sent to must have waited at least that long, whatever
    /// the wall clock did meanwhile. `now` is when the answer was read, no earlier than when
    /// it was written, so a refusal found early here was early.
    fn deadline_kept(&self, id: i64, result: &Value, now: u64, report: &mut Report) {
        let text = result["content"][0]["text"].as_str().unwrap_or("");
        if !(text.contains("deadline (") && text.contains("passed before action")) {
            return;
        }
        let deadline = self.tools.get(&id).and_then(|tool| self.deadlines.get(tool));
        let Some((&deadline, &(connection, sent_at))) = deadline.zip(self.sent.get(&id)) else { return };
        let elapsed = now.saturating_sub(sent_at);
        if connection == self.connections && elapsed <= deadline {
            report.violations.push(Violation {
                invariant: 1,
                message: format!(
                    "call {id} was refused on its tool's deadline of {deadline} ms after {elapsed} ms (a wall-clock \
                     step is not time passing)"
                ),
            });
        }
    }

    /// Reads the server's output; returns stream violations (invariant 8).
    pub fn read(&mut self, instance: &Instance, report: &mut Report, now: u64) {
        report.events.append(&mut self.pending_events);
        for line in instance.pipe.take_output() {
            self.trace.extend_from_slice(&line);
            let Some(message) = stream_message(&line, report) else { continue };
            if message["method"] == json!("notifications/progress") {
                self.progress(&message, report, now);
                continue;
            }
            if message.get("method").is_some() && message.get("id").is_some() {
                self.answer_session_request(instance, &message, report, now);
                continue;
            }
            if !self.own_world {
                prompt_answered_by_its_program(&message, report);
            } else if let Some(method) = message["id"].as_str().and_then(read_method) {
                self.read_answers.push((method, message.clone()));
            }
            let refusable = message["id"].as_str().filter(|id| id.starts_with(crate::workload::refusable::ID_PREFIX));
            if let Some(id) = refusable.filter(|_| message.get("result").is_some() || message.get("error").is_some()) {
                self.refusable_answers.insert(id.to_string(), message.clone());
            }
            if let Some(id) = message.get("id").and_then(Value::as_i64) {
                self.answered(instance, id, &message, report, now);
            }
        }
    }

    /// A request from the server to a 2025-11-25 session's client (a run asking for input):
    /// answered as a user would, mostly going ahead, sometimes declining, refusing it with an
    /// error, or leaving it (the run's round then expires). Drawn from the requests and calls
    /// so far, so the workload's own draws stay as they were.
    fn answer_session_request(&mut self, instance: &Instance, message: &Value, report: &mut Report, now: u64) {
        report.inputs.session_asked += 1;
        let id = message["id"].clone();
        let method = message["method"].as_str().unwrap_or("");
        let mixed = (report.inputs.session_asked << 32) ^ self.next_id as u64 ^ (self.connections << 16);
        let draw = mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60;
        let response = match (method, draw) {
            ("elicitation/create", 0) => None,
            ("elicitation/create", 1 | 2) => Some(json!({"jsonrpc": "2.0", "id": id, "result": {"action": "decline"}})),
            ("elicitation/create", 3) => Some(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -1, "message": "the user closed the dialog"}}),
            ),
            ("elicitation/create", _) => {
                Some(json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept", "content": {"go": true}}}))
            }
            _ => Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "not offered"}})),
        };
        let Some(response) = response else {
            report.events.push((now, "client".into(), format!("left the server's {method} unanswered")));
            return;
        };
        report.inputs.session_answered += 1;
        let how = response["result"]["action"].as_str().unwrap_or("an error");
        report.events.push((now, "client".into(), format!("answered the server's {method}: {how}")));
        instance.send(&response);
    }

    /// A progress notification: the first of a call's names the run it started (the others
    /// tell its actions' progress).
    fn progress(&mut self, message: &Value, report: &mut Report, now: u64) {
        let id = message["params"]["progressToken"].as_i64().unwrap_or(-1);
        let text = message["params"]["message"].as_str().unwrap_or("");
        let Some(run) = text.strip_prefix("run ").and_then(|r| r.strip_suffix(" started")) else { return };
        let run = run.to_string();
        report.events.push((now, format!("call {id}"), format!("run {} started", &run[..8.min(run.len())])));
        self.runs_ever.entry(id).or_default().insert(run.clone());
        self.runs.entry(id).or_default().push(run);
    }

    /// The answer to call `id` (a workload call, or a retry of one that asked for input).
    fn answered(&mut self, instance: &Instance, id: i64, message: &Value, report: &mut Report, now: u64) {
        if let Some(run) = message["result"]["_meta"][warden::call::answer::META_RUN]["run"].as_str() {
            self.answered_by.insert(id, run.to_string());
        }
        if let Some(request) = self.task_requests.remove(&id) {
            self.task_heard(request, message, report, now);
            return;
        }
        if message["result"]["resultType"] == json!("task") {
            if self.unanswered.remove(&id).is_some() {
                report.answered += 1;
                let task = message["result"]["taskId"].as_str().unwrap_or_default().to_string();
                report.events.push((
                    now,
                    format!("call {id}"),
                    format!("answered: task {}", &task[..8.min(task.len())]),
                ));
                self.tasks.insert(id, Followed { task, ..Followed::default() });
            }
            return;
        }
        // The same id sent twice on one connection (a resend of a retry in progress):
        // the first one's answer is still to come.
        if message["error"]["message"] == json!("a request with this id is still in progress") {
            return;
        }
        let lost = message["error"]["message"].as_str().is_some_and(|m| m.starts_with(crate::env::http::STREAM_LOST));
        if lost && self.unanswered.remove(&id).is_some() {
            // Given up, as a user of a real SDK would be told (a retry's round stays the
            // run's): its run, if any, is still followed to its end.
            self.retries.remove(&id);
            self.abandoned += 1;
            report.events.push((now, format!("call {id}"), "given up: its stream could not be resumed".into()));
            return;
        }
        if let Some(retried) = self.retries.remove(&id) {
            let elsewhere = retried.owned_elsewhere_when_sent || instance.another_owns(&retried.round.0);
            self.retry_answered(id, (retried, elsewhere), message, report, now);
            return;
        }
        if message["result"]["resultType"] == json!("input_required") {
            if let Some(call) = self.unanswered.remove(&id) {
                report.answered += 1;
                report.events.push((now, format!("call {id}"), "answered: asked for input".into()));
                report.inputs.asked += 1;
                self.asked.push((call, message["result"].clone()));
            }
            return;
        }
        let needs = self.tools.get(&id).map(|tool| (self.requires.get(tool), self.task_required.contains(tool)));
        let justified = (self.unanswered.get(&id).zip(needs))
            .is_some_and(|(sent, needs)| refused_for_what_it_did_not_declare(sent, message, needs));
        if message.get("error").is_some() && self.tools.contains_key(&id) && !justified {
            report
                .violations
                .push(Violation { invariant: 8, message: format!("a tool call got a protocol error: {message}") });
        }
        if self.unanswered.remove(&id).is_some() {
            report.answered += 1;
            let text = message["result"]["content"][0]["text"].as_str().unwrap_or("");
            report.events.push((now, format!("call {id}"), format!("answered: {text}")));
            self.deadline_kept(id, &message["result"], now, report);
            self.answers.insert(id, message["result"].clone());
        }
    }
}

/// Whether `error` is the -32021 refusal of a tool that needs a client capability or
/// extension (its `requires`, the tasks extension for `task: "required"`: `needs`) which
/// `sent` did not declare: the server's right answer, not a protocol error. Every capability
/// the refusal names must be one the tool needs, and one missing from the call. A
/// 2025-11-25 call declares at its session's `initialize`, which this check does not follow:
/// there, a refusal naming only what the tool needs is taken as given.
fn refused_for_what_it_did_not_declare(
    sent: &Value,
    error: &Value,
    (requires, task_required): (Option<&Vec<String>>, bool),
) -> bool {
    let named = error["error"]["data"]["requiredCapabilities"].as_object();
    if error["error"]["code"] != json!(-32021) || named.is_none_or(|named| named.is_empty()) {
        return false;
    }
    let meta = &sent["params"]["_meta"];
    let declared = &meta["io.modelcontextprotocol/clientCapabilities"];
    let modern = meta.get("io.modelcontextprotocol/protocolVersion").is_some();
    let needed = |capability: &str| requires.is_some_and(|requires| requires.iter().any(|r| r == capability));
    named.into_iter().flatten().all(|(name, wanted)| match name.as_str() {
        "extensions" => wanted.as_object().into_iter().flatten().all(|(extension, _)| {
            task_required
                && extension == TASKS_EXTENSION
                && !(modern && declared["extensions"].get(extension).is_some())
        }),
        capability => needed(capability) && !(modern && declared.get(capability).is_some()),
    })
}

/// A line of the server's output as a JSON-RPC message; a line that is not JSON, or not one
/// JSON-RPC message on a line of its own, breaks the stream (invariant 8).
fn stream_message(line: &[u8], report: &mut Report) -> Option<Value> {
    let message: Value = match serde_json::from_slice(line) {
        Ok(message) => message,
        Err(e) => {
            report.violations.push(Violation { invariant: 8, message: format!("a stdout line is not JSON: {e}") });
            return None;
        }
    };
    if message.get("jsonrpc") != Some(&json!("2.0"))
        || line.last() != Some(&b'\n')
        || line[..line.len() - 1].contains(&b'\n')
    {
        report.violations.push(Violation { invariant: 8, message: format!("not a JSON-RPC line: {message}") });
    }
    Some(message)
}

/// 8: a prompt is answered with the messages its program returned.
/// The method of a read sent beside the workload, from its id.
fn read_method(id: &str) -> Option<&'static str> {
    match id.split_once('-')?.0 {
        "read" => Some("resources/read"),
        "prompt" => Some("prompts/get"),
        _ => None,
    }
}

fn prompt_answered_by_its_program(message: &Value, report: &mut Report) {
    let prompt = message["id"].as_str().is_some_and(|id| id.starts_with("prompt-"));
    let said = message["result"]["messages"][0]["content"]["text"].as_str().unwrap_or("");
    if prompt && message.get("result").is_some() && !said.starts_with("Triage ticket ") {
        let message = format!("a prompt's answer is not its program's messages: {message}");
        report.violations.push(Violation { invariant: 8, message });
    }
}

impl Client {
    /// A retry's answer. Of the retries of one round (a retry and its twin sent right
    /// behind with the same state, or the retries of states a `once` repeat was given for
    /// the same round) at most one is served; and not all are refused unless some refusal is
    /// excused (an expired state, a restart since it was sent, a busy tool) or one was lost.
    /// A retry that reached an instance while another owned its run (`elsewhere`: a
    /// takeover moved it) is excused when refused: a client must reach the run's owner.
    fn retry_answered(
        &mut self,
        id: i64,
        (retried, elsewhere): (Retried, bool),
        message: &Value,
        report: &mut Report,
        now: u64,
    ) {
        let Some(call) = self.unanswered.remove(&id) else { return };
        report.answered += 1;
        let refusal = message["error"]["message"].as_str().unwrap_or("").to_string();
        let text = message["result"]["content"][0]["text"].as_str().unwrap_or("");
        let asked_again = message["result"]["resultType"] == json!("input_required");
        // Busy (the tool, or the whole server with too many calls in progress: nothing was
        // run), or stopped by a failed write (the run resumes; its round may still be open).
        let busy = text.contains("retry with the same requestState")
            || text.contains("could not be recorded durably")
            || (text.starts_with("the server is busy") && text.contains("nothing was run"));
        let served = message.get("result").is_some() && !asked_again && !busy;
        let deadline = self.tools.get(&id).and_then(|tool| self.run_deadlines.get(tool)).copied();
        let wait =
            deadline.map_or(warden::limits::INPUT_WAIT_MS, |deadline| deadline.min(warden::limits::INPUT_WAIT_MS));
        let waited_out = now.saturating_sub(retried.asked_at) > wait;
        let excused =
            retried.connection != self.connections || refusal.contains("expired") || busy || waited_out || elsewhere;
        match (retried.tampered, served) {
            (true, _) => report.inputs.altered_refused += (!served && !asked_again) as u64,
            (false, true) => report.inputs.served += 1,
            (false, false) => report.inputs.refused += (!asked_again) as u64,
        }
        if retried.tampered {
            report.events.push((now, format!("call {id}"), format!("answered: an altered state refused: {refusal}")));
            if served || asked_again {
                let text = format!("call {id} was served with a requestState the client altered: {message}");
                report.violations.push(Violation { invariant: 3, message: text });
            }
            return;
        }
        let round = self.rounds.entry(retried.round.clone()).or_default();
        if served && round.served.is_some() {
            let first = round.served.unwrap_or_default();
            report.violations.push(Violation {
                invariant: 3,
                message: format!("calls {first} and {id} were both served by one input round {:?}", retried.round),
            });
        }
        match (served, excused || asked_again) {
            (true, _) => round.served = Some(id),
            (false, false) => {
                round.refused.push(id);
                round.refused_otherwise |= !refusal.contains("no longer waits for this input");
            }
            (false, true) => {}
        }
        if asked_again {
            report.inputs.asked += 1;
            report.events.push((now, format!("call {id}"), "answered: asked again for input".into()));
            self.asked.push((call, message["result"].clone()));
        } else if served {
            let text = message["result"]["content"][0]["text"].as_str().unwrap_or("");
            report.events.push((now, format!("call {id}"), format!("answered: {text}")));
            self.answers.insert(id, message["result"].clone());
        } else {
            report.events.push((now, format!("call {id}"), format!("answered: retry refused: {refusal}{text}")));
        }
    }

    /// Rounds whose every retry was refused with no excuse: one of them should have been
    /// served. (A retry lost in a crash, never answered, excuses its round; so does a round
    /// every retry of which was told it was taken already, when its run's journal shows it
    /// answered another way, by a 2025-11-25 session's client asked the same round through a
    /// server request: `answered(tool, run, round)`; and a round of a run the client itself
    /// cancelled as a task.)
    pub fn rounds_refused(&self, answered: &dyn Fn(&str, &str, u64) -> bool) -> Vec<String> {
        let tool_of = |round: &RoundRetries| round.sent.first().and_then(|id| self.tools.get(id)).cloned();
        // A run this client cancelled as a task ends without its round (seed 361091).
        let cancelled = |run: &str| self.tasks.values().any(|followed| followed.task == run && followed.cancelled);
        (self.rounds.iter())
            .filter(|(_, round)| round.served.is_none() && !round.sent.is_empty())
            .filter(|((run, _), _)| !cancelled(run))
            .filter(|((run, number), round)| {
                round.refused_otherwise || !tool_of(round).is_some_and(|tool| answered(&tool, run, *number))
            })
            .filter(|(_, round)| round.sent.iter().all(|id| round.refused.contains(id)))
            .map(|((run, number), round)| format!("run {run} round {number}: retries {:?}", round.refused))
            .collect()
    }

    /// Answers the calls that asked for input, as a client's user would: mostly going ahead,
    /// sometimes declining, leaving it (the round expires), retrying without the answer (it
    /// is asked again), or using a state a second time (refused).
    pub fn answer_asked(&mut self, instance: &Instance, rng: &mut ChaCha8Rng, now: u64) {
        // The rounds asked now, by tool: an altered state names another of them when it can
        // (answering another caller's question is what the seal is for).
        let asked: Vec<(String, Value)> = (self.asked.iter())
            .map(|(call, result)| {
                (call["params"]["name"].as_str().unwrap_or("").to_string(), result["requestState"].clone())
            })
            .collect();
        for (call, result) in std::mem::take(&mut self.asked) {
            let answer = match rng.next_u64() % 10 {
                0 => {
                    self.abandoned += 1;
                    continue;
                }
                1 => Some(json!({"action": "decline"})),
                2 => None,
                _ => Some(json!({"action": "accept", "content": {"go": true}})),
            };
            let mut retry = call.clone();
            retry["params"]["requestState"] = result["requestState"].clone();
            if let Some(answer) = answer {
                retry["params"]["inputResponses"] = json!({crate::workload::generate::ASK_KEY: answer});
            }
            if rng.next_u64() % 4 == 0 {
                // A client that alters a state (another run, the next round), seal kept.
                let mut altered = retry.clone();
                let state = &retry["params"]["requestState"];
                let tool = call["params"]["name"].as_str().unwrap_or("");
                let other = (asked.iter())
                    .filter(|(of, other)| of == tool && round_of(other).map(|r| r.0) != round_of(state).map(|r| r.0))
                    .find_map(|(_, other)| round_of(other));
                altered["params"]["requestState"] = json!(tampered(state, other, rng.next_u64()));
                self.send_retry(instance, &call, altered, now, true);
            }
            self.send_retry(instance, &call, retry.clone(), now, false);
            if rng.next_u64() % 5 == 0 {
                // The same state again, right behind: only one of the two may take the round.
                self.send_retry(instance, &call, retry, now, false);
            }
        }
    }

    /// The earliest a round of `run` may have been asked, as this client can tell: when the
    /// call that told it was sent, or an earlier call that named the run or was the same call
    /// (a round learned through a later `once` repeat may have been asked for the first call,
    /// whose answer never told it, and its wait counts from then: seed 381306).
    fn round_asked_no_earlier_than(&self, told: i64, run: &str) -> Option<u64> {
        let named = (self.runs_ever.iter()).filter(|(_, runs)| runs.contains(run)).map(|(id, _)| *id);
        let same_call = |id: &i64| {
            self.tools.get(id) == self.tools.get(&told) && self.arguments.get(id) == self.arguments.get(&told)
        };
        let repeated = self.tools.keys().copied().filter(same_call);
        (std::iter::once(told).chain(named).chain(repeated))
            .filter_map(|id| self.sent.get(&id).map(|(_, at)| *at))
            .min()
    }

    /// Sends a retry under a new id of the call's parity (so an OAuth world's bridge sends it
    /// as the same principal).
    fn send_retry(
        &mut self,
        instance: &Instance,
        call: &Value,
        mut retry: Value,
        now: u64,
        tampered: bool,
    ) -> Option<i64> {
        let original = call["id"].as_i64()?;
        let round = round_of(&retry["params"]["requestState"])?;
        let mut id = self.next_id;
        if id.rem_euclid(2) != original.rem_euclid(2) {
            id += 1;
        }
        self.next_id = id + 1;
        retry["id"] = json!(id);
        retry["params"]["_meta"]["progressToken"] = json!(id);
        let tool = call["params"]["name"].as_str().unwrap_or_default().to_string();
        self.tools.insert(id, tool);
        self.arguments.insert(id, retry["params"]["arguments"].clone());
        self.unanswered.insert(id, retry.clone());
        self.rounds.entry(round.clone()).or_default().sent.push(id);
        let asked_at = self.round_asked_no_earlier_than(original, &round.0).unwrap_or(now);
        let owned_elsewhere_when_sent = instance.another_owns(&round.0);
        self.retries
            .insert(id, Retried { connection: self.connections, round, asked_at, tampered, owned_elsewhere_when_sent });
        self.sent_now(id, now);
        let tool = call["params"]["name"].as_str().unwrap_or_default();
        self.pending_events.push((now, format!("call {id}"), format!("sent {tool}")));
        instance.send(&retry);
        Some(id)
    }
}

impl Client {
    /// Asks about every task not ended yet: its status (in an OAuth world, now and then as
    /// the other principal too, who must not find it), and cancels one in eight once.
    pub fn follow_tasks(&mut self, instance: &Instance, rng: &mut ChaCha8Rng) {
        for (call, params) in std::mem::take(&mut self.task_updates) {
            self.task_request(instance, call, true, "tasks/update", params);
        }
        let open: Vec<(i64, String, bool)> = (self.tasks.iter())
            .filter(|(_, followed)| followed.ended.is_none() && !followed.lost)
            .map(|(call, followed)| (*call, followed.task.clone(), followed.cancelled))
            .collect();
        for (call, task, cancelled) in open {
            if !cancelled && rng.next_u64() % 8 == 0 {
                self.tasks.get_mut(&call).expect("followed").cancelled = true;
                self.task_request(instance, call, true, "tasks/cancel", json!({"taskId": task}));
            }
            self.task_request(instance, call, true, "tasks/get", json!({"taskId": task}));
            if self.principals && rng.next_u64() % 6 == 0 {
                self.task_request(instance, call, false, "tasks/get", json!({"taskId": task}));
            }
        }
    }

    /// Whether a task is still to end: the liveness phase follows them all to their end.
    pub fn tasks_open(&self) -> Vec<String> {
        (self.tasks.values()).filter(|f| f.ended.is_none() && !f.lost).map(|f| f.task.clone()).collect()
    }

    /// Sends a `tasks/*` request about call `call`'s task, as its principal (`own`) or the
    /// other one: an id of the call's parity, or of the other parity.
    fn task_request(&mut self, instance: &Instance, call: i64, own: bool, method: &str, mut params: Value) {
        let mut id = self.next_id;
        if (id.rem_euclid(2) == call.rem_euclid(2)) != own {
            id += 1;
        }
        self.next_id = id + 1;
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "extensions": {TASKS_EXTENSION: {}}}});
        let after_cancel_acknowledged = self.tasks.get(&call).is_some_and(|followed| followed.cancel_acknowledged);
        let cancel = method == "tasks/cancel";
        self.task_requests.insert(id, TaskRequest { call, own, cancel, after_cancel_acknowledged });
        instance.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }

    /// What the server said about call `call`'s task: its end is held to (it never changes),
    /// a round it awaits is answered, another principal learns nothing of it.
    fn task_heard(&mut self, request: TaskRequest, message: &Value, report: &mut Report, now: u64) {
        let TaskRequest { call, own, .. } = request;
        let Some(followed) = self.tasks.get(&call).cloned() else { return };
        if request.cancel {
            if own && message.get("result").is_some() {
                self.tasks.get_mut(&call).expect("followed").cancel_acknowledged = true;
            }
            return;
        }
        let status = message["result"]["status"].as_str().map(str::to_string);
        if !own {
            if message.get("result").is_some_and(|result| result.get("taskId").is_some()) {
                let text = format!("another principal read the task {} of call {call}: {message}", followed.task);
                report.violations.push(Violation { invariant: 9, message: text });
            }
            return;
        }
        // Unknown, or expired: not another refusal (a cancel of a run waiting for a person).
        let text = message["error"]["message"].as_str().unwrap_or("");
        if message["error"]["code"] == json!(-32602)
            && (text.starts_with("unknown task") || text.contains("has expired"))
        {
            self.tasks.get_mut(&call).expect("followed").lost = true;
            return;
        }
        let Some(status) = status else { return };
        if request.after_cancel_acknowledged && !matches!(status.as_str(), "completed" | "failed" | "cancelled") {
            let text = format!("task {} of call {call} was {status} after its cancel was acknowledged", followed.task);
            report.violations.push(Violation { invariant: 3, message: text });
        }
        if let Some(ended) = &followed.ended {
            if *ended != status {
                let text = format!("task {} of call {call} was {ended}, then {status}", followed.task);
                report.violations.push(Violation { invariant: 3, message: text });
            }
            return;
        }
        match status.as_str() {
            "input_required" => {
                let keys: Vec<String> = (message["result"]["inputRequests"].as_object())
                    .map(|requests| requests.keys().cloned().collect())
                    .unwrap_or_default();
                let answers: serde_json::Map<String, Value> =
                    keys.into_iter().map(|key| (key, json!({"action": "accept", "content": {"go": true}}))).collect();
                let params = json!({"taskId": followed.task, "inputResponses": answers});
                self.task_updates.push((call, params));
            }
            "completed" | "failed" | "cancelled" => {
                report.events.push((now, format!("call {call}"), format!("task {status}")));
                self.tasks.get_mut(&call).expect("followed").ended = Some(status.clone());
                if status == "completed" {
                    self.answered_by.insert(call, followed.task.clone());
                    self.answers.insert(call, message["result"]["result"].clone());
                }
            }
            _ => {}
        }
    }
}

/// The workload's call number `index` in a generated world: a tool drawn from the world's
/// (or named by the scenario), with arguments its template draws.
pub fn generated_call(
    rng: &mut ChaCha8Rng,
    client: &mut Client,
    index: u32,
    world: &WorldFile,
    tools: Option<&Vec<String>>,
) -> Value {
    let legacy = rng.next_u64() % 3 == 0;
    let named = tools.filter(|t| !t.is_empty()).map(|t| t[index as usize % t.len()].as_str());
    let count = world.tools.len().max(1);
    let mut drawn = rng.next_u64() as usize % count;
    // In some seeds one tool takes most calls, so its limits (slots, quota, `once`) are
    // contended rather than each tool being called now and then.
    if let Some(hot) = client.hot_tool.filter(|_| rng.next_u64() % 10 < 7) {
        drawn = hot % count;
    }
    let shape = named.and_then(|name| world.tools.iter().find(|t| t.name == name)).or(world.tools.get(drawn));
    match shape {
        Some(shape) => {
            let arguments = call_arguments(shape, rng, index);
            client.call(&shape.name, arguments, legacy)
        }
        None => client.call("none", json!({}), legacy),
    }
}

/// The workload's call number `index` in the fixed world: a tool drawn from the mix (or
/// named by the scenario), with arguments that sometimes repeat an earlier `once` key.
pub fn workload_call(rng: &mut ChaCha8Rng, client: &mut Client, index: u32, tools: Option<&Vec<String>>) -> Value {
    let legacy = rng.next_u64() % 3 == 0;
    let mut pick = rng.next_u64() % 100;
    if let Some(tools) = tools.filter(|t| !t.is_empty()) {
        pick = match tools[index as usize % tools.len()].as_str() {
            "echo" => 0,
            "refund" => 20,
            "note" => 50,
            "note_safe" => 65,
            _ => 80,
        };
    }
    match pick {
        0..=19 => {
            let text = if index > 0 && rng.next_u64() % 4 == 0 {
                format!("e{}", rng.next_u64() % index as u64)
            } else {
                format!("e{index}")
            };
            client.call("echo", json!({"text": text}), legacy)
        }
        20..=49 => {
            let order = format!("pi_{}", 2000 + rng.next_u64() % 20);
            let cents = 100 + rng.next_u64() % 5400;
            client.call("refund", json!({"order": order, "amount": {"amount": format!("{}.{:02}", cents / 100, cents % 100), "currency": "USD"}}), legacy)
        }
        50..=64 => client.call("note", json!({"text": format!("n{index}")}), legacy),
        65..=79 => client.call("note_safe", json!({"text": format!("s{index}")}), legacy),
        _ => client.call("close", json!({"ticket": 1 + rng.next_u64() % 20}), legacy),
    }
}
