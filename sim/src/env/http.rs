//! The simulated Streamable HTTP transport: in an HTTP world the server runs `serve-http`
//! (the same `http.rs` front, sessions, screening and collected answers as in production),
//! and a bridge turns each message the client model sends into a request through that front,
//! as a real client would: the headers a 2026-07-28 request needs, the session a 2025-11-25
//! `initialize` opened, the bearer token, a cancellation as a connection closed before the
//! answer (and in a session, as `notifications/cancelled` too: a session's live stream can be
//! resumed, so closing it does not cancel). The answers (a JSON body, or the events of a
//! stream, taken as the server writes them) come back to the client model as lines through
//! the protocol stream's own path, so the oracle checks each one and every checker reads
//! them as it reads stdio.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value;
use warden::base::sync::{select, Either, Signal, WaitGroup};
use warden::env::{HttpServe, InboundHandler, InboundRequest, ListenLimits, LocalBoxFuture, OutboundAnswer, Spawn};
use warden::protocol::framing::{Frame, LineSplitter, READ_CHUNK_BYTES};

use crate::env::stdio::{Pipe, SimStdio};

/// Where the simulated server listens (nothing listens on it: requests arrive by the bridge).
pub const ADDRESS: &str = "127.0.0.1:8931";

/// The listener half of the seam: hands the front's handler to the bridge, and ends when
/// the bridge is done (the client closed its side and every exchange ended).
pub struct SimHttp {
    pub handler: Rc<RefCell<Option<InboundHandler>>>,
    pub listening: Signal,
    pub done: Signal,
}

impl HttpServe for SimHttp {
    fn serve(
        &self,
        address: core::net::SocketAddr,
        _limits: ListenLimits,
        handler: InboundHandler,
        ready: Box<dyn FnOnce(core::net::SocketAddr)>,
        stop: LocalBoxFuture<'static, ()>,
    ) -> LocalBoxFuture<'static, std::io::Result<()>> {
        *self.handler.borrow_mut() = Some(handler);
        ready(address);
        self.listening.set();
        let done = self.done.wait();
        // The handler holds the server's state, whose Env holds this listener: it is let go
        // when the listening ends or its task is dropped (a crash), or the instance's whole
        // world would outlive it through that cycle.
        let registered = HandlerSlot(Rc::clone(&self.handler));
        Box::pin(async move {
            let _registered = registered;
            warden::base::sync::select(done, stop).await;
            Ok(())
        })
    }
}

/// Empties the handler's slot when dropped.
struct HandlerSlot(Rc<RefCell<Option<InboundHandler>>>);

impl Drop for HandlerSlot {
    fn drop(&mut self) {
        let handler = self.0.borrow_mut().take();
        drop(handler);
    }
}

/// The client side: reads what the client model sends and makes each message a request.
pub struct Bridge {
    pub pipe: Rc<Pipe>,
    pub crashed: Rc<Cell<bool>>,
    /// The protocol stream's oracle: each answer line delivered is checked as stdio's are.
    pub stdio: SimStdio,
    pub handler: Rc<RefCell<Option<InboundHandler>>>,
    pub listening: Signal,
    pub done: Signal,
    pub spawn: crate::env::executor::SimSpawn,
    /// The 2025-11-25 session `initialize` opened.
    session: RefCell<Option<String>>,
    /// Exchanges in progress by request id (JSON text): set to close the connection.
    closers: RefCell<BTreeMap<String, Signal>>,
    exchanges: WaitGroup,
    /// In an OAuth world: the principal each call was sent as, by id (the checker's record).
    principals: Option<Rc<RefCell<BTreeMap<i64, &'static str>>>>,
    stream_cut: Rc<StreamCut>,
    clock: crate::env::clock::SimClockHandle,
    /// Per tool, the arguments its manifest mirrors in `Mcp-Param-*` headers (`headers`):
    /// a 2026-07-28 call sends each, as a client that read the tool's schema does.
    pub param_headers: RefCell<BTreeMap<String, Vec<(String, String)>>>,
}

/// The `headers` of each tool of a manifest's JSON: tool -> (argument, header name).
pub fn param_headers(manifest: &[u8]) -> BTreeMap<String, Vec<(String, String)>> {
    let manifest: Value = serde_json::from_slice(manifest).unwrap_or(Value::Null);
    (manifest["tools"].as_array().into_iter().flatten())
        .filter_map(|tool| {
            let headers = tool["headers"].as_object()?;
            let pairs =
                headers.iter().filter_map(|(argument, name)| Some((argument.clone(), name.as_str()?.to_string())));
            Some((tool["name"].as_str()?.to_string(), pairs.collect()))
        })
        .collect()
}

/// An argument's value as its `Mcp-Param-*` header carries it: plain printable ASCII as it
/// is, anything else as `=?base64?...?=` (SEP-2243).
fn param_value(value: &Value) -> String {
    use base64::Engine;
    let text = match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let plain = text.bytes().all(|b| (0x21..0x7f).contains(&b)) && !text.starts_with("=?");
    match plain {
        true => text,
        false => format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(text.as_bytes())),
    }
}

/// How the bridge tells the client model a call's stream was lost and could not be resumed
/// (the transport error a real SDK gives): the client gives the call up.
pub const STREAM_LOST: &str = "the call's stream was cut and could not be resumed";

/// The live-stream fault (`Fault::StreamCut`), shared by every instance's bridge.
#[derive(Default)]
pub struct StreamCut {
    /// (events read before the cut, whether the client stops reading first): for the next
    /// live stream of a session.
    pub armed: Cell<Option<(u32, bool)>>,
    /// Streams cut so far (all instances): the fault fired.
    pub cuts: Cell<u64>,
    /// Resumptions answered with a stream.
    pub resumed: Cell<u64>,
}

/// The ids of one stream's events read so far: each must follow the one before (an event
/// lost on a resumption is a violation of the stream's invariant).
#[derive(Default)]
struct EventTrail {
    last: Option<(u64, u64)>,
    gaps: Vec<String>,
}

impl EventTrail {
    fn read(&mut self, id: &str) {
        let Some((stream, seq)) = id.split_once('-').and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?))) else {
            self.gaps.push(format!("an event id `{id}` this server never gives"));
            return;
        };
        if let Some((last_stream, last_seq)) = self.last {
            if (stream, seq) != (last_stream, last_seq + 1) {
                self.gaps.push(format!("event {stream}-{seq} came after {last_stream}-{last_seq}"));
            }
        }
        self.last = Some((stream, seq));
    }

    fn last_id(&self) -> Option<String> {
        self.last.map(|(stream, seq)| format!("{stream}-{seq}"))
    }
}

impl Bridge {
    pub fn new(
        pipe: Rc<Pipe>,
        crashed: Rc<Cell<bool>>,
        stdio: SimStdio,
        http: &SimHttp,
        spawn: crate::env::executor::SimSpawn,
        principals: Option<Rc<RefCell<BTreeMap<i64, &'static str>>>>,
        (stream_cut, clock): (Rc<StreamCut>, Rc<crate::env::clock::SimClock>),
    ) -> Rc<Bridge> {
        Rc::new(Bridge {
            pipe,
            crashed,
            stdio,
            handler: Rc::clone(&http.handler),
            listening: http.listening.clone(),
            done: http.done.clone(),
            spawn,
            session: RefCell::new(None),
            closers: RefCell::new(BTreeMap::new()),
            exchanges: WaitGroup::new(),
            principals,
            stream_cut,
            clock: crate::env::clock::SimClockHandle(clock),
            param_headers: RefCell::default(),
        })
    }

    /// Runs until the client closes its side and every exchange has ended.
    pub async fn run(self: Rc<Self>) {
        // Recovery runs before the server listens; requests wait for it, as connections
        // to a port not yet open are retried.
        self.listening.wait().await;
        let mut splitter = LineSplitter::new();
        loop {
            let chunk = Pipe::read_chunk(&self.pipe, &self.crashed, READ_CHUNK_BYTES).await.unwrap_or_default();
            if chunk.is_empty() {
                break;
            }
            splitter.feed(&chunk);
            while let Some(frame) = splitter.next_frame() {
                let Frame::Line(line) = frame else { continue };
                Rc::clone(&self).message(line).await;
            }
        }
        self.exchanges.wait().await;
        self.done.set();
    }

    /// One message: `initialize` is answered before the next message is read (its session
    /// names the later ones); a cancellation closes its request's connection; every other
    /// message is a request of its own, in flight with the others.
    async fn message(self: Rc<Self>, line: Vec<u8>) {
        let message: Value = serde_json::from_slice(&line).unwrap_or(Value::Null);
        let method = message["method"].as_str().unwrap_or("").to_string();
        if method == "notifications/cancelled" {
            if self.session.borrow().is_some() {
                self.exchange(line, message.clone(), None).await;
            }
            let id = message["params"]["requestId"].to_string();
            if let Some(closer) = self.closers.borrow_mut().remove(&id) {
                closer.set();
            }
            return;
        }
        if method == "initialize" {
            self.exchange(line, message, None).await;
            return;
        }
        let closer = message.get("id").map(|id| {
            let closer = Signal::new();
            self.closers.borrow_mut().insert(id.to_string(), closer.clone());
            closer
        });
        let guard = self.exchanges.enter();
        let bridge = Rc::clone(&self);
        self.spawn.spawn(Box::pin(async move {
            let _guard = guard;
            bridge.exchange(line, message, closer).await;
        }));
    }

    /// One request through the front, and its answer's lines back to the client model.
    async fn exchange(&self, body: Vec<u8>, message: Value, closer: Option<Signal>) {
        let Some(handler) = self.handler.borrow().clone() else { return };
        let request = self.request(body, &message);
        let answer = match handler.screen(&request) {
            Some(refused) => refused,
            None => {
                let answering = handler.answer(request);
                match &closer {
                    Some(closer) => match select(answering, Box::pin(closer.wait())).await {
                        Either::Left(answer) => answer,
                        // The client closed the connection: the exchange is dropped.
                        Either::Right(()) => return,
                    },
                    None => answering.await,
                }
            }
        };
        // A call sent without the scope its tool asks for is refused by HTTP (403), before
        // JSON-RPC: the client model hears it as an error for that call, as a real client
        // surfaces it. Any other 403 is delivered as it came (and breaks the stream).
        let unscoped = message["id"].as_str().is_some_and(crate::names::is_sent_unscoped);
        if answer.status == 403 && unscoped {
            let said = String::from_utf8_lossy(&answer.body).into_owned();
            let error = serde_json::json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32600, "message": format!("HTTP 403: {said}")}});
            let mut line = serde_json::to_vec(&error).expect("JSON");
            line.push(b'\n');
            self.pipe.output.borrow_mut().push(line);
            return;
        }
        self.deliver(answer, closer, message.get("id")).await;
        if let Some(id) = message.get("id") {
            self.closers.borrow_mut().remove(&id.to_string());
        }
    }

    /// The request a real client sends for `message`.
    fn request(&self, body: Vec<u8>, message: &Value) -> InboundRequest {
        let mut headers = vec![
            ("host".to_string(), ADDRESS.to_string()),
            ("content-type".to_string(), "application/json".to_string()),
            ("accept".to_string(), "application/json, text/event-stream".to_string()),
        ];
        let modern = message.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion").is_some();
        let token = match &self.principals {
            None => crate::names::HTTP_TOKEN,
            Some(principals) => {
                let (principal, token) = principal_for(message, modern);
                if let Some(id) = message.get("id").and_then(Value::as_i64) {
                    principals.borrow_mut().insert(id, principal);
                }
                token
            }
        };
        headers.push(("authorization".to_string(), format!("Bearer {token}")));
        if modern {
            let method = message["method"].as_str().unwrap_or("");
            headers.push(("mcp-method".to_string(), method.to_string()));
            let name = match method {
                "resources/read" => message.pointer("/params/uri"),
                "tasks/get" | "tasks/update" | "tasks/cancel" => message.pointer("/params/taskId"),
                _ => message.pointer("/params/name"),
            };
            if let Some(name) = name.and_then(Value::as_str) {
                headers.push(("mcp-name".to_string(), name.to_string()));
            }
            if method == "tools/call" {
                let tool = message.pointer("/params/name").and_then(Value::as_str).unwrap_or("");
                for (argument, header) in self.param_headers.borrow().get(tool).into_iter().flatten() {
                    let value = message.pointer(&format!("/params/arguments/{argument}")).filter(|v| !v.is_null());
                    if let Some(value) = value {
                        headers.push((format!("mcp-param-{}", header.to_ascii_lowercase()), param_value(value)));
                    }
                }
            }
        } else if let Some(session) = self.session.borrow().clone() {
            headers.push(("mcp-session-id".to_string(), session));
        }
        InboundRequest { method: "POST".to_string(), path: "/mcp".to_string(), query: None, headers, body, peer: None }
    }

    /// The answer's messages, as lines on the protocol stream: a live stream's as they come,
    /// until it ends or the client closes the connection (`closer`). A session's stream cut
    /// by the fault is resumed with `Last-Event-ID`, and its events must follow on.
    async fn deliver(&self, mut answer: OutboundAnswer, closer: Option<Signal>, id: Option<&Value>) {
        let closed = closer.unwrap_or_default();
        let mut trail = EventTrail::default();
        loop {
            // Refused while the server drains: nothing was run, and the client hears nothing,
            // as when a crash takes its call (a real one waits `Retry-After` and sends it
            // again; here the client's resending after the restart does).
            if answer.status == 503 {
                return;
            }
            let header = |name: &str| answer.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
            if let Some(session) = header("mcp-session-id") {
                *self.session.borrow_mut() = Some(session);
            }
            let streamed = header("content-type").as_deref() == Some("text/event-stream");
            let more = answer.more.take();
            let lines = match streamed {
                true => self.events(&answer.body, &mut trail),
                false if answer.body.is_empty() => Vec::new(),
                false => vec![std::mem::take(&mut answer.body)],
            };
            let mut read = lines.len() as u32;
            if !self.hand_over(lines) {
                return;
            }
            let Some(more) = more else { return };
            let cut = self.stream_cut.armed.get().filter(|_| self.session.borrow().is_some());
            loop {
                if let Some((_, stalls)) = cut.filter(|(after, _)| read >= *after) {
                    // Only a stream whose events carry ids can be resumed.
                    if trail.last.is_some() {
                        self.stream_cut.armed.set(None);
                        self.stream_cut.cuts.set(self.stream_cut.cuts.get() + 1);
                        if stalls {
                            // Nothing is read until the listener's write timeout cuts it off.
                            warden::env::Clock::sleep(&self.clock, warden::protocol::exchange::STREAM_WRITE_MS).await;
                        }
                        drop(more);
                        break;
                    }
                }
                let chunk = match select(more.0.next(), Box::pin(closed.wait())).await {
                    Either::Left(Some(chunk)) => chunk,
                    // The stream ended, or the client closed it (the source is dropped).
                    Either::Left(None) | Either::Right(()) => {
                        self.report_gaps(&trail);
                        return;
                    }
                };
                let lines = self.events(&chunk, &mut trail);
                read += lines.len() as u32;
                if !self.hand_over(lines) {
                    return;
                }
            }
            answer = match self.resume(&trail).await {
                Some(answer) if answer.status == 200 => answer,
                // The stream is no longer kept (410: it ended longer ago than the replay
                // window) or its session is gone: a real SDK fails the request with a transport
                // error, and its user calls again or asks about the run (seed 36278).
                Some(refused) => return self.request_failed(id, refused.status, &refused.body),
                None => return,
            };
            self.stream_cut.resumed.set(self.stream_cut.resumed.get() + 1);
        }
    }

    /// The client model hears that its request failed below JSON-RPC (`STREAM_LOST`).
    fn request_failed(&self, id: Option<&Value>, status: u16, body: &[u8]) {
        let Some(id) = id else { return };
        let said = String::from_utf8_lossy(body);
        let message = format!("{STREAM_LOST} (HTTP {status}: {said})");
        let error = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": message}});
        let mut line = serde_json::to_vec(&error).expect("JSON");
        line.push(b'\n');
        self.pipe.output.borrow_mut().push(line);
    }

    /// Asks for the rest of a cut stream, after the last event read.
    async fn resume(&self, trail: &EventTrail) -> Option<OutboundAnswer> {
        let handler = self.handler.borrow().clone()?;
        let session = self.session.borrow().clone()?;
        let token = match &self.principals {
            None => crate::names::HTTP_TOKEN,
            Some(_) => crate::names::PRINCIPALS[0].1,
        };
        let headers = vec![
            ("host".to_string(), ADDRESS.to_string()),
            ("accept".to_string(), "text/event-stream".to_string()),
            ("authorization".to_string(), format!("Bearer {token}")),
            ("mcp-session-id".to_string(), session),
            ("last-event-id".to_string(), trail.last_id()?),
        ];
        let request = InboundRequest {
            method: "GET".to_string(),
            path: "/mcp".to_string(),
            query: None,
            headers,
            body: Vec::new(),
            peer: None,
        };
        if let Some(refused) = handler.screen(&request) {
            return Some(refused);
        }
        Some(handler.answer(request).await)
    }

    /// The messages of an event stream's chunk (whole events: the server writes no event in
    /// parts), their ids read on the stream's trail.
    fn events(&self, chunk: &[u8], trail: &mut EventTrail) -> Vec<Vec<u8>> {
        let text = String::from_utf8_lossy(chunk);
        let mut lines = Vec::new();
        for event in text.split("\n\n") {
            for line in event.lines() {
                if let Some(id) = line.strip_prefix("id: ") {
                    trail.read(id);
                }
                if let Some(data) = line.strip_prefix("data: ") {
                    lines.push(data.as_bytes().to_vec());
                }
            }
        }
        lines
    }

    /// An event lost or repeated on a stream breaks the stream's invariant (8).
    fn report_gaps(&self, trail: &EventTrail) {
        for gap in &trail.gaps {
            let message = format!("a live stream's events did not follow on: {gap}");
            self.stdio.oracle.violations.borrow_mut().push(crate::report::Violation { invariant: 8, message });
        }
    }

    /// Gives the client model each line, checked by the oracle; false once the client or
    /// the world is gone. Straight to the client model: a slow reader slows only its own
    /// connections here, and the server holds nothing for it but the exchange (invariant 10
    /// is stdio's).
    fn hand_over(&self, lines: Vec<Vec<u8>>) -> bool {
        for mut line in lines {
            if self.crashed.get() || self.pipe.broken.get() {
                return false;
            }
            line.push(b'\n');
            self.stdio.oracle.before_answer(&line);
            self.pipe.output.borrow_mut().push(line);
        }
        true
    }
}

/// The principal a message is sent as, and its token: a 2025-11-25 message as the session's
/// (the session `initialize` opened is the first principal's and no other may use it); a
/// 2026-07-28 call as the first principal for an even id, the second for an odd one, so a
/// resent call is the same principal's again; a call to refuse for its scopes as a principal
/// whose token grants none a tool asks for.
fn principal_for(message: &Value, modern: bool) -> (&'static str, &'static str) {
    let [first, second] = crate::names::PRINCIPALS;
    if message["id"].as_str().is_some_and(crate::names::is_sent_unscoped) {
        return crate::names::UNSCOPED_PRINCIPAL;
    }
    match message.get("id").and_then(Value::as_i64) {
        Some(id) if modern && id % 2 == 1 => second,
        _ => first,
    }
}
