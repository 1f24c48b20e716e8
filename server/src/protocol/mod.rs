//! The stdio protocol: framing, JSON-RPC classification and the two era handlers.
//!
//! Which era serves a request follows from the request (seed 000 section 3): one carrying
//! `_meta["io.modelcontextprotocol/protocolVersion"]` is served as 2026-07-28; once a
//! client has sent `initialize`, one without it is served as 2025-11-25; before that, one
//! without it is refused with -32602. Each era has its own handler (`legacy.rs`,
//! `modern.rs`); they share the catalog listing and the call pipeline, never message code.

mod asking;
pub mod exchange;
pub mod framing;
pub mod http;
pub mod jsonrpc;
mod legacy;
mod listener;
pub mod metrics;
mod modern;
pub mod oauth;
mod tasks;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::{Map, Value};

use crate::base::sync::{select, Either, Signal, WaitGroup};
use crate::call::{self, CallControl, CallReply, Slots};
use crate::catalog::Catalog;
use crate::env::{Env, LocalBoxFuture};
use crate::manifest::RUN_STATUS_TOOL;
use crate::run::runs::Runs;
use framing::{Frame, LineSplitter, READ_CHUNK_BYTES};
use jsonrpc::{Incoming, Notification, Request, RequestId, RpcError};

pub const MODERN_VERSION: &str = "2026-07-28";
pub const LEGACY_VERSION: &str = "2025-11-25";
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// How long clients may cache the tool list and discovery: the list never changes while
/// the server runs.
pub const LIST_TTL_MS: u64 = 3_600_000;

/// Where a connection's messages go: the stdio stream, or one HTTP exchange's answer.
pub trait Outlet {
    /// Writes one whole message line (newline included). An error means the client is gone.
    fn write_line(&self, line: Vec<u8>) -> LocalBoxFuture<'static, std::io::Result<()>>;
}

struct StdioOutlet(Env);

impl Outlet for StdioOutlet {
    fn write_line(&self, line: Vec<u8>) -> LocalBoxFuture<'static, std::io::Result<()>> {
        self.0.stdio.write_line(line)
    }
}

/// What every connection of one server shares: the run slots (server-wide limits) and the
/// answers built once at start.
pub struct Shared {
    slots: Rc<Slots>,
    statics: Rc<StaticResults>,
    task_answers: Rc<tasks::PartialAnswers>,
}

impl Shared {
    pub fn new(runs: &Runs) -> Rc<Shared> {
        Rc::new(Shared {
            slots: Rc::new(Slots::default()),
            statics: Rc::new(StaticResults::new(&runs.catalog, &runs.secrets)),
            task_answers: Rc::default(),
        })
    }
}

/// One client connection: over stdio, the whole session; over HTTP, one exchange. The only
/// state kept between requests is whether a legacy `initialize` happened (and its log
/// level), and the calls in progress (for cancellation).
pub struct Connection {
    env: Env,
    runs: Rc<Runs>,
    catalog: Rc<Catalog>,
    slots: Rc<Slots>,
    outlet: Rc<dyn Outlet>,
    /// Who the requests are from (an HTTP exchange's authenticated principal; none over stdio).
    principal: Option<crate::call::Principal>,
    legacy_initialized: Cell<bool>,
    /// The level a 2025-11-25 client set with `logging/setLevel` (no log messages before).
    legacy_log_level: Cell<Option<usize>>,
    /// Calls in progress by request id (as JSON text), for `notifications/cancelled`.
    calls: RefCell<BTreeMap<String, Rc<CallControl>>>,
    tasks: WaitGroup,
    client_gone: Signal,
    /// Results that never change while the server runs, serialised once (scrubbed).
    statics: Rc<StaticResults>,
    /// The answers tasks' rounds have had so far (`tasks/update`), shared by every connection.
    task_answers: Rc<tasks::PartialAnswers>,
    /// Whether requests to the client can be sent and answered (a 2025-11-25 client is asked
    /// for a run's input over stdio, or on an HTTP session's live stream).
    can_ask: Cell<bool>,
    /// The input kinds the 2025-11-25 client declared at `initialize` (when it can be asked).
    legacy_kinds: RefCell<Vec<String>>,
    /// Requests sent to the client, by id (as JSON text), awaiting their responses.
    asked_client: RefCell<BTreeMap<String, Rc<asking::Awaited>>>,
    next_request: Cell<u64>,
    /// What the ids of requests to the client begin with: unique within a session.
    request_prefix: RefCell<String>,
    /// Set when the connection reads no more: nothing will answer a request sent to the client.
    reading_ended: Signal,
    /// An HTTP request's `traceparent` header: the trace its calls continue (a call's own
    /// `_meta.traceparent` comes first).
    pub traceparent: RefCell<Option<String>>,
}

/// What a 2025-11-25 client's session holds between its requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LegacySession {
    pub initialized: bool,
    /// The level `logging/setLevel` set (none: no log messages).
    pub log_level: Option<usize>,
    /// The input kinds the client declared at `initialize` (when it can be asked).
    pub kinds: asking::Kinds,
}

/// The serialised results that are the same for every request of their kind: the manifest
/// cannot change while the server runs, so they are built once per era at start and each
/// answer only writes its id around them.
pub(crate) struct StaticResults {
    pub legacy_tools_list: Rc<[u8]>,
    pub modern_tools_list: Rc<[u8]>,
    pub modern_discover: Rc<[u8]>,
}

impl StaticResults {
    fn new(catalog: &Catalog, secrets: &[String]) -> StaticResults {
        let mut tools = catalog.list();
        tools.push(crate::call::status::describe());
        let info = server_info(catalog);
        let bytes = |result: Value| -> Rc<[u8]> {
            let result = crate::broker::scrub_value(&result, secrets);
            serde_json::to_vec(&result).expect("JSON values serialise").into()
        };
        StaticResults {
            legacy_tools_list: bytes(legacy::tools_list(Value::Array(tools.clone()))),
            modern_tools_list: bytes(modern::tools_list(&info, Value::Array(tools))),
            modern_discover: bytes(modern::discover(&info, modern_capabilities(catalog))),
        }
    }
}

impl Connection {
    /// The stdio connection: the server's only one.
    pub fn new(runs: Rc<Runs>) -> Rc<Connection> {
        let shared = Shared::new(&runs);
        let outlet = Rc::new(StdioOutlet(runs.env.clone()));
        let connection = Connection::with_outlet(runs, &shared, outlet, LegacySession::default(), None);
        connection.can_ask.set(true);
        connection
    }

    /// A connection writing to `outlet`, sharing the server's slots and static answers, in
    /// the legacy session state given (an HTTP session's).
    pub fn with_outlet(
        runs: Rc<Runs>,
        shared: &Shared,
        outlet: Rc<dyn Outlet>,
        session: LegacySession,
        principal: Option<crate::call::Principal>,
    ) -> Rc<Connection> {
        Rc::new(Connection {
            env: runs.env.clone(),
            catalog: Rc::clone(&runs.catalog),
            statics: Rc::clone(&shared.statics),
            task_answers: Rc::clone(&shared.task_answers),
            runs,
            slots: Rc::clone(&shared.slots),
            outlet,
            principal,
            legacy_initialized: Cell::new(session.initialized),
            legacy_log_level: Cell::new(session.log_level),
            calls: RefCell::new(BTreeMap::new()),
            tasks: WaitGroup::new(),
            client_gone: Signal::new(),
            can_ask: Cell::new(false),
            legacy_kinds: RefCell::new(session.kinds.names()),
            asked_client: RefCell::new(BTreeMap::new()),
            next_request: Cell::new(0),
            request_prefix: RefCell::new("warden-input-".to_string()),
            reading_ended: Signal::new(),
            traceparent: RefCell::new(None),
        })
    }

    /// The legacy session state now (after an HTTP exchange, for its session).
    pub fn legacy_session(&self) -> LegacySession {
        LegacySession {
            initialized: self.legacy_initialized.get(),
            log_level: self.legacy_log_level.get(),
            kinds: asking::Kinds::of(&self.legacy_kinds.borrow()),
        }
    }

    /// Whether this connection can send requests to its client and hear the answers (an HTTP
    /// exchange of a 2025-11-25 session whose answer is a live stream), naming its requests
    /// with `prefix` (unique within the session). A connection that cannot asks nothing.
    pub fn allow_asking(&self, can: bool, prefix: String) {
        self.can_ask.set(can);
        *self.request_prefix.borrow_mut() = prefix;
    }

    /// The input kinds this connection's calls may ask of a 2025-11-25 client: those it
    /// declared, when requests to it can be sent here (the session keeps them either way).
    pub(crate) fn askable_kinds(&self) -> Vec<String> {
        match self.can_ask.get() {
            true => self.legacy_kinds.borrow().clone(),
            false => Vec::new(),
        }
    }

    /// Handles one whole message (an HTTP body), then waits for the calls it started.
    pub async fn handle_message(self: &Rc<Self>, message: Vec<u8>) {
        self.handle_frame(Frame::Line(message)).await;
        self.tasks.wait().await;
    }

    /// A `notifications/cancelled` or other notification arriving from elsewhere (an HTTP
    /// session's other exchange).
    pub fn handle_notification(&self, notification: Notification) {
        self.notification(notification);
    }

    /// The client ended its session (an HTTP DELETE): its calls are cancelled, and nothing
    /// waits for its answers any more.
    pub fn client_left(&self) {
        self.cancel_all();
        self.client_gone.set();
    }

    /// Cancels every call in progress (the HTTP client closed its connection).
    pub fn cancel_all(&self) {
        for control in self.calls.borrow().values() {
            control.cancel();
        }
    }

    /// Reads and answers requests until stdin ends, the client is gone or a durable write
    /// failed. The calls in progress go on: the caller waits for them (`run::drain`).
    pub async fn serve(self: &Rc<Self>) {
        let mut splitter = LineSplitter::new();
        loop {
            let read = self.env.stdio.read(READ_CHUNK_BYTES);
            let stop = Box::pin(select(self.client_gone.wait(), self.runs.fatal.wait()));
            let chunk = match select(read, stop).await {
                Either::Right(Either::Left(())) => {
                    self.env.log("the client is gone (a write failed); no more requests are read");
                    break;
                }
                Either::Right(Either::Right(())) => {
                    self.env.log("a durable write failed; no more requests are read");
                    break;
                }
                Either::Left(Ok(chunk)) => chunk,
                Either::Left(Err(error)) => {
                    self.env.log(&format!("reading the protocol stream failed: {error}; stopping"));
                    break;
                }
            };
            if chunk.is_empty() {
                let partial = splitter.finish();
                if partial > 0 {
                    self.env.log(&format!("stdin closed in the middle of a line; its {partial} bytes were dropped"));
                }
                break;
            }
            splitter.feed(&chunk);
            while let Some(frame) = splitter.next_frame() {
                self.handle_frame(frame).await;
            }
        }
        self.reading_ended.set();
    }

    /// Completes when no call of this connection is in progress.
    pub fn calls_in_progress(&self) -> &WaitGroup {
        &self.tasks
    }

    async fn handle_frame(self: &Rc<Self>, frame: Frame) {
        match jsonrpc::classify(&frame) {
            Incoming::Invalid(error) => self.send(error.to_value()).await,
            Incoming::Response { id, body } => self.response(&id, body),
            Incoming::Notification(notification) => self.notification(notification),
            Incoming::Request(request) => self.request(request).await,
        }
    }

    fn notification(&self, notification: Notification) {
        if notification.method != "notifications/cancelled" {
            return; // Notifications the server does not use are ignored, never answered.
        }
        let Some(id) = notification.params.as_ref().and_then(|p| p.get("requestId")) else {
            return;
        };
        if let Some(control) = self.calls.borrow().get(&id.to_string()) {
            control.cancel();
        }
    }

    async fn request(self: &Rc<Self>, request: Request) {
        let request_meta_traceparent = (request.params.as_ref())
            .and_then(|params| params.get("_meta"))
            .and_then(|meta| meta.get("traceparent"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let modern = request
            .params
            .as_ref()
            .and_then(|params| params.get("_meta"))
            .and_then(Value::as_object)
            .is_some_and(|meta| meta.contains_key(META_PROTOCOL_VERSION));
        let routed = if modern { modern::route(self, request) } else { legacy::route(self, request) };
        match routed {
            Routed::Reply(reply) => self.send(reply).await,
            Routed::Task(task) => {
                let reply = self.serve_task(task).await;
                self.send(reply).await
            }
            Routed::Static { id, result } => self.send_static(&id, &result).await,
            Routed::Call(call) => {
                let traceparent = traceparent_of(&request_meta_traceparent, self.traceparent.borrow().as_deref());
                self.start_call(PendingCall { traceparent, ..call }).await
            }
        }
    }

    /// Runs a call as its own task, so a long run never holds up other requests. A call
    /// counts as in progress until its answer is written, and a refusal (a duplicate id, a
    /// busy server) is written before the next request is read: a client that floods the
    /// server without reading its answers slows it down instead of making it hold ever more.
    async fn start_call(self: &Rc<Self>, call: PendingCall) {
        let key = call.id.to_string();
        if self.calls.borrow().contains_key(&key) {
            let error =
                RpcError::new(Some(call.id), jsonrpc::INVALID_REQUEST, "a request with this id is still in progress");
            self.send(error.to_value()).await;
            return;
        }
        if self.calls.borrow().len() >= call::calls_in_progress_max(self.catalog.manifest.server.max_concurrent_runs) {
            let text = "the server is busy: too many calls are in progress; nothing was run, try again later";
            let busy = match call.job {
                CallJob::Tool => (call.finish)(self, &call.id, crate::call::answer::error_result(text.to_string())),
                _ => RpcError::new(Some(call.id), jsonrpc::INTERNAL_ERROR, text).to_value(),
            };
            self.send(busy).await;
            return;
        }
        let control = Rc::new(CallControl::default());
        self.calls.borrow_mut().insert(key.clone(), Rc::clone(&control));
        let guard = self.tasks.enter();
        let connection = Rc::clone(self);
        self.env.spawn.spawn(Box::pin(async move {
            let _guard = guard;
            let listening =
                listener::CallListener::wanted(&connection, call.progress.clone(), call.log_level, &control);
            let (listener, outbox) = listening.unzip();
            let (message, run) = connection.carry_out(&call, &control, listener, outbox.as_deref()).await;
            // The call's notifications go out before its answer.
            if let Some(outbox) = outbox {
                outbox.drained().await;
            }
            // Nothing is sent for a call cancelled meanwhile (an answer decided before a wait).
            let message = message.filter(|_| !control.is_cancelled());
            if let Some(message) = message {
                connection.send(message).await;
                if let Some(run) = run {
                    connection.env.reached(crate::env::Point::Answered, &run);
                }
            }
            connection.calls.borrow_mut().remove(&key);
        }));
    }

    /// A call's answer (none when it was cancelled), and the run it answers for.
    async fn carry_out(
        self: &Rc<Self>,
        call: &PendingCall,
        control: &CallControl,
        listener: Option<Rc<dyn crate::run::notice::Listener>>,
        outbox: Option<&listener::Outbox>,
    ) -> (Option<Value>, Option<String>) {
        let failed =
            |message: String| RpcError::new(Some(call.id.clone()), jsonrpc::INVALID_PARAMS, message).to_value();
        match &call.job {
            CallJob::Tool if call.task => self.start_task(call).await,
            CallJob::Tool if call.tool == RUN_STATUS_TOOL => {
                let result =
                    crate::call::status::run_status(&self.runs, &call.arguments, self.principal.as_ref()).await;
                (Some((call.finish)(self, &call.id, result)), None)
            }
            CallJob::Tool => {
                let tool = self.catalog.callable(&call.tool).expect("routing checked the tool exists");
                let mut reply = self.run_tool(tool, call, control, listener.clone()).await;
                if let CallReply::InputRequired(result, _) = &reply {
                    if call.input.finish.is_none() && !call.input.kinds.is_empty() {
                        reply = self.ask_client(call, result.clone(), control, (listener, outbox)).await;
                    }
                }
                match reply {
                    CallReply::Result(result, run) => (Some((call.finish)(self, &call.id, result)), run),
                    CallReply::InputRequired(result, run) => (Some(self.input_required(call, result, &run)), Some(run)),
                    CallReply::Invalid(message) => (Some(failed(message)), None),
                    CallReply::Silent => (None, None),
                }
            }
            CallJob::Read { uri } => {
                let span = tracing::info_span!(target: "warden", "resources/read", otel.kind = "server",
                    rpc.system = "jsonrpc", rpc.method = "resources/read", uri = %uri,
                    principal = self.principal.as_ref().map(|p| p.subject.as_str()));
                let reading = self.read_resource(call, uri, control, listener);
                traced(span, call, reading).await
            }
            CallJob::Prompt => {
                let span = tracing::info_span!(target: "warden", "prompts/get", otel.kind = "server",
                    rpc.system = "jsonrpc", rpc.method = "prompts/get", prompt = %call.tool,
                    principal = self.principal.as_ref().map(|p| p.subject.as_str()));
                traced(span, call, self.get_prompt(call, control)).await
            }
        }
    }

    /// A `resources/read` of a program's resource: its run's answer as the resource's contents.
    async fn read_resource(
        self: &Rc<Self>,
        call: &PendingCall,
        uri: &str,
        control: &CallControl,
        listener: Option<Rc<dyn crate::run::notice::Listener>>,
    ) -> (Option<Value>, Option<String>) {
        let failed =
            |message: String| RpcError::new(Some(call.id.clone()), jsonrpc::INVALID_PARAMS, message).to_value();
        let tool = self.catalog.tool(&call.tool).expect("routing found the resource");
        let spec = tool.resource.as_ref().expect("a resource's tool");
        match self.run_tool(tool, call, control, listener).await {
            CallReply::Result(answer, run) => match crate::call::surface::contents(spec, uri, &answer) {
                Ok(contents) => (Some((call.finish)(self, &call.id, contents)), run),
                Err(text) => (Some(failed(format!("reading {uri} failed: {text}"))), run),
            },
            CallReply::InputRequired(result, run) => (Some(self.input_required(call, result, &run)), Some(run)),
            CallReply::Invalid(message) => (Some(failed(message)), None),
            CallReply::Silent => (None, None),
        }
    }

    /// A `prompts/get`: the prompt rendered, holding a server slot like a run.
    async fn get_prompt(self: &Rc<Self>, call: &PendingCall, control: &CallControl) -> (Option<Value>, Option<String>) {
        let prompt = self.catalog.prompt(&call.tool).expect("routing found the prompt");
        // An execution holds a server slot like a run (prompts share the name space
        // `prompt:<name>`, which no tool can take).
        let server_max = self.catalog.manifest.server.max_concurrent_runs;
        let Some(_slot) = self.slots.take_named(&format!("prompt:{}", call.tool), server_max, server_max) else {
            let busy = "the server is busy: its maximum of runs is in progress; try again later";
            return (Some(RpcError::new(Some(call.id.clone()), jsonrpc::INTERNAL_ERROR, busy).to_value()), None);
        };
        let message = match crate::call::surface::get_prompt(&self.env, prompt, &call.arguments).await {
            Ok(result) => (call.finish)(self, &call.id, result),
            Err(text) => {
                RpcError::new(Some(call.id.clone()), jsonrpc::INVALID_PARAMS, format!("prompt `{}`: {text}", call.tool))
                    .to_value()
            }
        };
        (Some(message).filter(|_| !control.is_cancelled()), None)
    }

    /// A tool call or a resource read through the call pipeline, as this connection's principal.
    async fn run_tool(
        &self,
        tool: &crate::catalog::Tool,
        call: &PendingCall,
        control: &CallControl,
        listener: Option<Rc<dyn crate::run::notice::Listener>>,
    ) -> CallReply {
        let caller = call::Caller {
            principal: self.principal.as_ref(),
            input_kinds: &call.input.kinds,
            retry: call.input.retry.as_ref(),
            traceparent: call.traceparent.as_deref(),
        };
        call::call_tool(&self.runs, &self.slots, tool, &call.arguments, control, listener, caller).await
    }

    /// The answer to a call whose run asks for input: the era's `input_required` result, or
    /// for an era without one (a 2025-11-25 client repeating a `once` call whose run waits
    /// for another client's input) a tool error saying so.
    fn input_required(&self, call: &PendingCall, result: Value, run: &str) -> Value {
        match call.input.finish {
            Some(finish) => finish(self, &call.id, result),
            None => {
                let text = format!(
                    "run {run} waits for input its client must give with a 2026-07-28 retry; nothing more was run"
                );
                (call.finish)(self, &call.id, crate::call::answer::error_result(text))
            }
        }
    }

    /// Writes one message as one line. A failed write means the client is gone.
    async fn send(&self, message: Value) {
        if self.client_gone.is_set() {
            return;
        }
        // The last boundary before the client: no secret in any form a reader decodes.
        let message = crate::broker::scrub_value(&message, &self.runs.secrets);
        let line = serde_json::to_vec(&message).expect("JSON values serialise");
        self.write_line(line).await;
    }

    /// Writes the response to `id` whose result is `result`, serialised (and scrubbed) at
    /// start: only the id is serialised now.
    async fn send_static(&self, id: &RequestId, result: &[u8]) {
        if self.client_gone.is_set() {
            return;
        }
        let id = serde_json::to_vec(&crate::broker::scrub_value(id, &self.runs.secrets)).expect("ids serialise");
        let mut line = Vec::with_capacity(result.len() + id.len() + 40);
        line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        line.extend_from_slice(&id);
        line.extend_from_slice(b",\"result\":");
        line.extend_from_slice(result);
        line.push(b'}');
        self.write_line(line).await;
    }

    async fn write_line(&self, mut line: Vec<u8>) {
        assert!(!line.contains(&b'\n'), "a serialised message never holds a raw newline");
        line.push(b'\n');
        if let Err(error) = self.outlet.write_line(line).await {
            self.env.log(&format!("writing to the client failed: {error}"));
            self.client_gone.set();
        }
    }

    fn server_info(&self) -> Value {
        server_info(&self.catalog)
    }
}

/// What the server offers, in both eras: resources and prompts only when the manifest has
/// some (a method whose capability is not advertised is -32601).
fn capabilities(catalog: &Catalog) -> Value {
    let mut capabilities = serde_json::json!({"tools": {"listChanged": false}, "logging": {}});
    if catalog.resources().next().is_some() {
        capabilities["resources"] = serde_json::json!({"subscribe": false, "listChanged": false});
    }
    if !catalog.prompts.is_empty() {
        capabilities["prompts"] = serde_json::json!({"listChanged": false});
    }
    if crate::call::surface::completes(catalog) {
        capabilities["completions"] = serde_json::json!({});
    }
    capabilities
}

/// The capabilities `server/discover` names: the era's own, and the tasks extension when a
/// tool supports tasks.
fn modern_capabilities(catalog: &Catalog) -> Value {
    let mut capabilities = capabilities(catalog);
    let tasks = catalog.tools.iter().any(|tool| tool.config.task != crate::manifest::TaskSupport::Forbidden);
    if tasks {
        capabilities["extensions"] = serde_json::json!({tasks::TASKS_EXTENSION: {}});
    }
    capabilities
}

fn server_info(catalog: &Catalog) -> Value {
    serde_json::json!({"name": catalog.manifest.server.name, "version": crate::VERSION})
}

/// A `tools/call` routed to a known tool, with the era's way of wrapping its result.
pub(crate) struct PendingCall {
    id: RequestId,
    tool: String,
    arguments: Map<String, Value>,
    progress: Option<Value>,
    /// The least severe level of `notice::LOG_LEVELS` the client wants as log messages.
    log_level: Option<usize>,
    finish: fn(&Connection, &RequestId, Value) -> Value,
    job: CallJob,
    input: InputTurn,
    /// The caller's W3C trace context (`_meta.traceparent`, or an HTTP request's header).
    traceparent: Option<String>,
    /// The call becomes a task (2026-07-28, a tool that supports them, the extension declared).
    task: bool,
}

/// What a call brings for input requests (2026-07-28 only): the kinds its client declared,
/// a retry's state and answers, and how the era answers `input_required`.
#[derive(Default)]
pub(crate) struct InputTurn {
    kinds: Vec<String>,
    retry: Option<call::Retry>,
    finish: Option<fn(&Connection, &RequestId, Value) -> Value>,
}

impl InputTurn {
    fn new(
        kinds: Vec<String>,
        retry: Option<call::Retry>,
        finish: Option<fn(&Connection, &RequestId, Value) -> Value>,
    ) -> InputTurn {
        InputTurn { kinds, retry, finish }
    }
}

/// What a routed call does: a tool call, a resource read (`tool` names the resource), or
/// getting a prompt (`tool` names the prompt).
pub(crate) enum CallJob {
    Tool,
    Read { uri: String },
    Prompt,
}

/// Routes `resources/read`: the resource the URI names and the read's arguments, or the
/// era's not-found error.
fn read_call(
    connection: &Connection,
    request: &Request,
    not_found: i64,
    finish: fn(&Connection, &RequestId, Value) -> Value,
) -> Result<PendingCall, RpcError> {
    let id = request.id.clone();
    let uri = request.params.as_ref().and_then(|p| p.get("uri")).and_then(Value::as_str);
    let Some(uri) = uri else {
        return Err(RpcError::new(Some(id), jsonrpc::INVALID_PARAMS, "resources/read needs a string `uri`"));
    };
    let Some((tool, arguments)) = crate::call::surface::find(&connection.catalog, uri) else {
        return Err(RpcError::new(Some(id), not_found, "Resource not found").with_data(serde_json::json!({"uri": uri})));
    };
    let job = CallJob::Read { uri: uri.to_string() };
    let input = InputTurn::default();
    Ok(PendingCall {
        id,
        tool: tool.config.name.clone(),
        arguments,
        progress: None,
        log_level: None,
        finish,
        job,
        input,
        traceparent: None,
        task: false,
    })
}

/// `completion/complete`, in either era: -32602 for a reference to nothing.
fn completion(connection: &Connection, request: &Request) -> Result<Value, RpcError> {
    let params = Value::Object(request.params.clone().unwrap_or_default());
    crate::call::surface::complete(&connection.catalog, &params)
        .map_err(|message| RpcError::new(Some(request.id.clone()), jsonrpc::INVALID_PARAMS, message))
}

/// Routes `prompts/get`: a known prompt and its string arguments.
fn prompt_call(
    connection: &Connection,
    request: &Request,
    finish: fn(&Connection, &RequestId, Value) -> Value,
) -> Result<PendingCall, RpcError> {
    let id = request.id.clone();
    let invalid = |message: String| RpcError::new(Some(request.id.clone()), jsonrpc::INVALID_PARAMS, message);
    let params = request.params.as_ref();
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Err(invalid("prompts/get needs a string `name`".to_string()));
    };
    if connection.catalog.prompt(name).is_none() {
        return Err(invalid(format!("Unknown prompt: {name}")));
    }
    let arguments = match params.and_then(|p| p.get("arguments")) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) => arguments.clone(),
        Some(_) => return Err(invalid("`arguments` must be an object of strings".to_string())),
    };
    Ok(PendingCall {
        id,
        tool: name.to_string(),
        arguments,
        progress: None,
        log_level: None,
        finish,
        job: CallJob::Prompt,
        input: InputTurn::default(),
        traceparent: None,
        task: false,
    })
}

pub(crate) enum Routed {
    Reply(Value),
    /// A response whose result is one of the `StaticResults`.
    Static {
        id: RequestId,
        result: Rc<[u8]>,
    },
    Call(PendingCall),
    /// `tasks/get`, `tasks/update`, `tasks/cancel`.
    Task(tasks::TaskRequest),
}

/// -32021 for a call whose tool requires client capabilities the client did not declare
/// (`kinds`), naming them.
fn refuse_undeclared(id: &RequestId, tool: &crate::catalog::Tool, kinds: &[String]) -> Result<(), RpcError> {
    let missing: Vec<&String> = tool.config.requires.iter().filter(|kind| !kinds.contains(kind)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let required: Map<String, Value> = missing.iter().map(|kind| (kind.to_string(), serde_json::json!({}))).collect();
    let names: Vec<&str> = missing.iter().map(|kind| kind.as_str()).collect();
    let what = format!(
        "`{}` needs the client capability {}, which the request did not declare; nothing was run",
        tool.config.name,
        names.join(", ")
    );
    Err(tasks::missing_capability(id, Value::Object(required), &what))
}

/// Reads `tools/call` params shared by both eras: a string `name` naming a known tool and
/// an optional object `arguments`.
fn call_params(
    connection: &Connection,
    request: &Request,
) -> Result<(String, Map<String, Value>, Option<Value>), RpcError> {
    let invalid = |message: String| RpcError::new(Some(request.id.clone()), jsonrpc::INVALID_PARAMS, message);
    let params = request.params.as_ref().ok_or_else(|| invalid("tools/call needs params".to_string()))?;
    let name = match params.get("name") {
        Some(Value::String(name)) => name.clone(),
        _ => return Err(invalid("tools/call needs a string `name`".to_string())),
    };
    if connection.catalog.callable(&name).is_none() && name != RUN_STATUS_TOOL {
        return Err(invalid(format!("Unknown tool: {name}")));
    }
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) => arguments.clone(),
        Some(_) => return Err(invalid("`arguments` must be an object".to_string())),
    };
    let progress = params
        .get("_meta")
        .and_then(|meta| meta.get("progressToken"))
        .filter(|token| token.is_string() || token.is_i64() || token.is_u64())
        .cloned();
    Ok((name, arguments, progress))
}

/// Carries out `work` inside `span`, a request's own span, continuing the caller's trace (a
/// program's run inside it opens its spans as the request's children).
async fn traced<T>(span: tracing::Span, call: &PendingCall, work: impl std::future::Future<Output = T>) -> T {
    if let Some(traceparent) = call.traceparent.as_deref() {
        crate::io::trace::continue_trace(&span, traceparent);
    }
    tracing::Instrument::instrument(work, span).await
}

/// The trace a call continues: its own `_meta.traceparent`, else its HTTP request's header.
fn traceparent_of(from_meta: &Option<String>, from_header: Option<&str>) -> Option<String> {
    from_meta.clone().or_else(|| from_header.map(str::to_string))
}
