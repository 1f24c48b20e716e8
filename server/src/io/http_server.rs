//! The real HTTP listener: hyper's HTTP/1.1 server on the current-thread runtime. It bounds
//! connections (in all and per peer, closing idle ones for new ones), header time, body size
//! and the rate a body arrives, and hands each request whole to the handler (`crate::protocol::http`,
//! which knows MCP); nothing here knows MCP.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::task::AbortHandle;

use crate::env::{HttpServe, InboundHandler, InboundRequest, ListenLimits, LocalBoxFuture, MoreBody, OutboundAnswer};

/// An answer's body: whole, or streamed as its source gives it.
type Body = UnsyncBoxBody<Bytes, std::io::Error>;

pub struct RealHttp;

impl HttpServe for RealHttp {
    fn serve(
        &self,
        address: SocketAddr,
        limits: ListenLimits,
        handler: InboundHandler,
        ready: Box<dyn FnOnce(SocketAddr)>,
        mut stop: LocalBoxFuture<'static, ()>,
    ) -> LocalBoxFuture<'static, std::io::Result<()>> {
        Box::pin(async move {
            let graceful = hyper_util::server::graceful::GracefulShutdown::new();
            let listener = tokio::net::TcpListener::bind(address).await?;
            let connections_max = connections_within_descriptors(limits.connections_max);
            ready(listener.local_addr()?);
            let table = Rc::new(RefCell::new(Connections::new(connections_max, limits.connections_per_peer_max)));
            let bodies = Rc::new(BodyBudget::new(limits));
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = &mut stop => break,
                };
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    // Out of descriptors, or a connection reset before it was taken: the
                    // listener goes on after a pause rather than spinning.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Full: an idle connection (no request in flight) makes room, the one served
                // longest ago first.
                let admitted = table.borrow_mut().admit(peer.ip());
                let Some((id, evicted)) = admitted else {
                    drop(stream);
                    handler.connection_refused(peer.ip());
                    continue;
                };
                if let Some(evicted) = evicted {
                    evicted.abort();
                }
                let activity = Rc::new(Activity::default());
                let left = Left { table: Rc::clone(&table), id };
                let connection = (stream, peer.ip(), left, Rc::clone(&activity));
                let task = serve_connection(connection, (Rc::clone(&handler), Rc::clone(&bodies)), limits, &graceful);
                table.borrow_mut().started(id, task.abort_handle(), activity);
            }
            // Stopping: no new connection; each request in flight is answered and written,
            // then its connection closes (idle ones at once).
            drop(listener);
            graceful.shutdown().await;
            Ok(())
        })
    }
}

/// Serves one accepted connection in a task of its own (watched, so a stop lets its request
/// in flight finish): each request answered by the handler within the limits.
fn serve_connection(
    (stream, peer, left, seen): (tokio::net::TcpStream, IpAddr, Left, Rc<Activity>),
    (handler, bodies): (InboundHandler, Rc<BodyBudget>),
    limits: ListenLimits,
    graceful: &hyper_util::server::graceful::GracefulShutdown,
) -> tokio::task::JoinHandle<()> {
    let watcher = graceful.watcher();
    // Set when a streamed answer's client stopped reading: the connection is closed under it.
    let cut = Rc::new(tokio::sync::Notify::new());
    tokio::task::spawn_local(async move {
        let _left = left;
        let cut_off = Rc::clone(&cut);
        let service = service_fn(move |request| {
            let (handler, bodies, seen) = (Rc::clone(&handler), Rc::clone(&bodies), Rc::clone(&seen));
            let cut = Rc::clone(&cut);
            async move {
                seen.in_flight.set(seen.in_flight.get() + 1);
                let answered = answer(handler, (bodies, peer, cut, Rc::clone(&seen)), request, limits).await;
                seen.in_flight.set(seen.in_flight.get() - 1);
                // Only an answered request earns the connection its place: one
                // refused (unauthenticated, malformed) leaves it as idle as before.
                if answered.as_ref().is_ok_and(|response| response.status().as_u16() < 400) {
                    seen.served_at.set(Instant::now());
                }
                answered
            }
        });
        let served = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_millis(limits.header_read_ms))
            .max_buf_size(limits.head_bytes_max)
            // A client that half-closes after its request still gets the answer.
            .half_close(true)
            .serve_connection(TokioIo::new(stream), service);
        // A connection's failure (a reset, a malformed request) ends it alone; a client that
        // stopped reading a stream has its connection dropped, unanswered requests and all.
        tokio::select! {
            _ = watcher.watch(served) => {}
            () = cut_off.notified() => {}
        }
    })
}

/// The open connections: at most `max`, and `per_peer_max` from one address. When either
/// is reached, the idle connection (of that peer, for the per-peer bound: no request in
/// flight) served longest ago is closed for the new one, one that was never served (that sent
/// nothing, or was only refused) counting from when it was accepted: clients that hold
/// connections, served once or never, cannot lock the others out.
struct Connections {
    max: usize,
    per_peer_max: usize,
    next_id: u64,
    open: BTreeMap<u64, Open>,
}

struct Open {
    peer: IpAddr,
    /// Set once the task is spawned.
    abort: Option<AbortHandle>,
    activity: Rc<Activity>,
}

/// A streamed answer being written: its connection counts as in flight until the pump ends
/// (a live stream is no idle connection to close for a newcomer).
struct Streaming(Rc<Activity>);

impl Streaming {
    fn begin(activity: Rc<Activity>) -> Streaming {
        activity.in_flight.set(activity.in_flight.get() + 1);
        Streaming(activity)
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        self.0.in_flight.set(self.0.in_flight.get().saturating_sub(1));
        self.0.served_at.set(Instant::now());
    }
}

/// What a connection has done: a request in flight is never cut to make room, and among idle
/// ones the one served longest ago goes first (a refused request earns no time).
struct Activity {
    in_flight: Cell<u32>,
    /// When a request of its was last answered (not refused), else when it was accepted.
    served_at: Cell<Instant>,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity { in_flight: Cell::new(0), served_at: Cell::new(Instant::now()) }
    }
}

impl Activity {
    fn idle(&self) -> bool {
        self.in_flight.get() == 0
    }
}

impl Connections {
    fn new(max: usize, per_peer_max: usize) -> Connections {
        Connections { max: max.max(1), per_peer_max: per_peer_max.max(1), next_id: 0, open: BTreeMap::new() }
    }

    /// A place for a new connection from `peer`: its id and the connection closed to make
    /// room, if any; none when every connection in the way has sent a request.
    fn admit(&mut self, peer: IpAddr) -> Option<(u64, Option<AbortHandle>)> {
        let from_peer = self.open.values().filter(|open| open.peer == peer).count();
        let evicted = if from_peer >= self.per_peer_max {
            Some(self.oldest_idle(Some(peer))?)
        } else if self.open.len() >= self.max {
            Some(self.oldest_idle(None)?)
        } else {
            None
        };
        let abort = evicted.and_then(|id| self.open.remove(&id)).and_then(|open| open.abort);
        let id = self.next_id;
        self.next_id += 1;
        self.open.insert(id, Open { peer, abort: None, activity: Rc::default() });
        Some((id, abort))
    }

    /// The idle connection (of `peer`, if given) served longest ago: no request in flight.
    fn oldest_idle(&self, peer: Option<IpAddr>) -> Option<u64> {
        (self.open.iter())
            .filter(|(_, open)| open.activity.idle() && peer.is_none_or(|peer| open.peer == peer))
            .min_by_key(|(id, open)| (open.activity.served_at.get(), **id))
            .map(|(id, _)| *id)
    }

    fn started(&mut self, id: u64, abort: AbortHandle, activity: Rc<Activity>) {
        if let Some(open) = self.open.get_mut(&id) {
            open.abort = Some(abort);
            open.activity = activity;
        }
    }
}

/// Removes a connection from the table when its task ends (or is aborted).
struct Left {
    table: Rc<RefCell<Connections>>,
    id: u64,
}

impl Drop for Left {
    fn drop(&mut self) {
        // An aborted task is dropped while `admit` holds the table: that entry is gone then.
        if let Ok(mut table) = self.table.try_borrow_mut() {
            table.open.remove(&self.id);
        }
    }
}

/// Connections allowed at once: at most `wanted`, and few enough that every one of them
/// (two descriptors at worst) leaves descriptors for journals, the ledger and workers. The
/// soft limit is raised to the hard one first.
fn connections_within_descriptors(wanted: usize) -> usize {
    // SAFETY: getrlimit/setrlimit only read and write the struct given.
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return wanted.min(64);
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = limit.rlim_max;
        }
    }
    const KEPT_FOR_THE_SERVER: u64 = 128;
    let room = (limit.rlim_cur.saturating_sub(KEPT_FOR_THE_SERVER) / 2) as usize;
    wanted.min(room.max(1))
}

async fn answer(
    handler: InboundHandler,
    (bodies, peer, cut, seen): (Rc<BodyBudget>, IpAddr, Rc<tokio::sync::Notify>, Rc<Activity>),
    request: Request<Incoming>,
    limits: ListenLimits,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = request.into_parts();
    let mut headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    // An absolute-form target names a host too: it is checked like a Host header (two of
    // them are refused by the front).
    if let Some(authority) = parts.uri.authority() {
        headers.push(("host".to_string(), authority.to_string()));
    }
    let mut inbound = InboundRequest {
        method: parts.method.as_str().to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers,
        body: vec![],
        peer: Some(peer),
    };
    if let Some(refused) = handler.screen(&inbound) {
        return Ok(respond(refused));
    }
    // The listener's own refusals are told to the handler, which logs them as its own.
    let refused_here = |answer: OutboundAnswer| {
        handler.refused(&inbound, &answer);
        Ok(respond(answer))
    };
    let declared = inbound.header("content-length").and_then(|length| length.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limits.body_bytes_max as u64) {
        let over = format!("the request body is over the limit of {} bytes", limits.body_bytes_max);
        return refused_here(refusal(413, &over));
    }
    let mut held = Held { budget: &bodies, peer, bytes: 0, permit: None };
    let read = read_body(body, &mut held, limits);
    let body = match tokio::time::timeout(Duration::from_millis(limits.body_read_ms), read).await {
        Ok(Ok(body)) => body,
        Ok(Err(refused)) => return refused_here(refused),
        Err(_) => return refused_here(refusal(408, "the request body did not arrive in time")),
    };
    inbound.body = body;
    // The body's bytes are held of the budget until the request is answered.
    let mut answered = handler.answer(inbound).await;
    drop(held);
    let more = answered.more.take();
    let mut response = respond(answered);
    if let Some(more) = more {
        let streaming = Streaming::begin(seen);
        *response.body_mut() =
            streamed(std::mem::take(response.body_mut()), more, (limits.body_write_ms, cut), streaming);
    }
    Ok(response)
}

/// A streamed body: what the answer holds, then each chunk of its source as it comes,
/// through a channel of one chunk, so a client that stops reading stops the pump within
/// `write_ms` and has its connection cut. The source is dropped when the pump ends.
fn streamed(
    first: Body,
    source: MoreBody,
    (write_ms, cut): (u64, Rc<tokio::sync::Notify>),
    streaming: Streaming,
) -> Body {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(1);
    tokio::task::spawn_local(async move {
        let _streaming = streaming;
        let first = first.collect().await.map(|whole| whole.to_bytes()).unwrap_or_default();
        let mut chunk = Some(first);
        loop {
            if let Some(bytes) = chunk.take().filter(|bytes| !bytes.is_empty()) {
                match tokio::time::timeout(Duration::from_millis(write_ms), sender.send(bytes)).await {
                    Ok(Ok(())) => {}
                    // The connection is gone: its body was dropped.
                    Ok(Err(_)) => return,
                    Err(_) => {
                        cut.notify_one();
                        return;
                    }
                }
            }
            let next = tokio::select! {
                next = source.0.next() => next,
                () = sender.closed() => return,
            };
            match next {
                Some(bytes) => chunk = Some(Bytes::from(bytes)),
                None => return,
            }
        }
    });
    let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let bytes = receiver.recv().await?;
        Some((Ok::<_, std::io::Error>(Frame::data(bytes)), receiver))
    });
    StreamBody::new(frames).boxed_unsync()
}

/// What request bodies take of memory: a budget of bytes shared by all, of which one peer
/// address may hold a quarter (one maximal body at least), taken as bytes arrive and never
/// waited for.
struct BodyBudget {
    bytes: Semaphore,
    per_peer_max: usize,
    per_peer: RefCell<BTreeMap<IpAddr, usize>>,
}

impl BodyBudget {
    fn new(limits: ListenLimits) -> BodyBudget {
        let total = limits.bodies_read_at_once.saturating_mul(limits.body_bytes_max).min(Semaphore::MAX_PERMITS);
        let per_peer_max = (total / 4).max(limits.body_bytes_max);
        BodyBudget { bytes: Semaphore::new(total), per_peer_max, per_peer: RefCell::new(BTreeMap::new()) }
    }
}

/// The bytes one request holds of the budget, given back when it is dropped.
struct Held<'a> {
    budget: &'a BodyBudget,
    peer: IpAddr,
    bytes: usize,
    permit: Option<SemaphorePermit<'a>>,
}

impl<'a> Held<'a> {
    /// `n` more bytes, or the refusal: this peer's share spent, or everyone's budget.
    fn take(&mut self, n: usize) -> Result<(), OutboundAnswer> {
        let budget = self.budget;
        let peers = budget.per_peer.borrow().get(&self.peer).copied().unwrap_or(0);
        if peers.saturating_add(n) > budget.per_peer_max {
            return Err(refusal(503, "this address is sending too many request bodies at once; try again shortly"));
        }
        let Ok(permit) = budget.bytes.try_acquire_many(u32::try_from(n).unwrap_or(u32::MAX)) else {
            return Err(refusal(503, "the server is reading too many request bodies at once; try again shortly"));
        };
        match &mut self.permit {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
        *budget.per_peer.borrow_mut().entry(self.peer).or_insert(0) += n;
        self.bytes += n;
        Ok(())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut per_peer = self.budget.per_peer.borrow_mut();
        if let Some(peers) = per_peer.get_mut(&self.peer) {
            *peers = peers.saturating_sub(self.bytes);
            if *peers == 0 {
                per_peer.remove(&self.peer);
            }
        }
    }
}

/// Reads a body as it arrives, each chunk within `body_chunk_wait_ms` of the last, taking
/// its bytes from the budget (`held`) only as they come, never waiting for it: a client that
/// withholds its body holds only what it sent, and nobody queues behind it.
async fn read_body(mut body: Incoming, held: &mut Held<'_>, limits: ListenLimits) -> Result<Vec<u8>, OutboundAnswer> {
    let too_long = || refusal(413, &format!("the request body is over the limit of {} bytes", limits.body_bytes_max));
    let mut read = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_millis(limits.body_chunk_wait_ms), body.frame());
        let frame = match next.await {
            Ok(Some(Ok(frame))) => frame,
            Ok(None) => return Ok(read),
            Ok(Some(Err(_))) => return Err(refusal(400, "the request body could not be read")),
            Err(_) => {
                let waited = limits.body_chunk_wait_ms;
                return Err(refusal(408, &format!("the request body stopped arriving (no bytes for {waited} ms)")));
            }
        };
        let Ok(chunk) = frame.into_data() else { continue };
        if read.len().saturating_add(chunk.len()) > limits.body_bytes_max {
            return Err(too_long());
        }
        held.take(chunk.len())?;
        read.extend_from_slice(&chunk);
    }
}

fn refusal(status: u16, text: &str) -> OutboundAnswer {
    OutboundAnswer {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: serde_json::to_vec(&serde_json::json!({"error": text})).expect("JSON values serialise"),
        more: None,
    }
}

fn respond(answer: OutboundAnswer) -> Response<Body> {
    let whole = |bytes: Bytes| Full::new(bytes).map_err(|never| match never {}).boxed_unsync();
    let mut response = Response::builder().status(answer.status);
    for (name, value) in &answer.headers {
        response = response.header(name.as_str(), value.as_str());
    }
    response.body(whole(Bytes::from(answer.body))).unwrap_or_else(|_| {
        let mut broken = Response::new(whole(Bytes::from_static(b"an answer could not be built")));
        *broken.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        broken
    })
}
