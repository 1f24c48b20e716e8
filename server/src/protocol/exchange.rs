//! One HTTP exchange's messages (a call's notifications, requests to the client, its answer):
//! kept in order and bounded, then answered whole (`application/json`, or an event stream
//! written at the end) or streamed live as they are written. A live stream in a 2025-11-25
//! session gives each event an id, so a client whose connection broke can ask for the rest
//! with `Last-Event-ID` while the exchange is kept (`Replay`).
//!
//! The run never waits on the stream: a message is kept when it is written, and a client
//! that reads slowly only falls behind (the oldest messages of an exchange past its bounds
//! are dropped, never its answer).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};

use serde_json::Value;

use super::jsonrpc;
use super::{Connection, Outlet};
use crate::base::sync::{select, Either, Notify};
use crate::env::{BodySource, Clock, LocalBoxFuture, MoreBody, OutboundAnswer};
use crate::limits::LINE_BYTES_MAX;

/// Messages one exchange keeps (a call's notifications, then its answer); past this the
/// oldest are dropped.
pub const EXCHANGE_MESSAGES_MAX: usize = 256;
/// Bytes one exchange keeps: room for a whole answer beside its notifications.
pub const EXCHANGE_BYTES_MAX: usize = 2 * LINE_BYTES_MAX;
/// A stream with nothing to say for this long says so in an SSE comment, so a proxy between
/// the client and the server does not take a long call for a dead connection.
pub const KEEP_ALIVE_MS: u64 = 15_000;
/// A stream's client that takes none of its bytes for this long is cut off.
pub const STREAM_WRITE_MS: u64 = 30_000;
/// How long an ended stream of a session is kept for a resumption.
pub const REPLAY_WINDOW_MS: u64 = 5 * 60 * 1000;
/// Bytes the ended streams kept for resumptions may hold in all; past it the oldest go first.
pub const REPLAY_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Ended streams kept for resumptions in all, whatever their size.
pub const REPLAY_STREAMS_MAX: usize = 1_024;

/// Readers one stream may have at once: the latest, and one before it still writing to a
/// client that stopped reading (it ends at its next chunk, or at `STREAM_WRITE_MS`).
pub const STREAM_READERS_MAX: usize = 2;
/// Readers a session's streams may have at once that a resumption replaced and that still
/// write (each holds a connection), in all: each stream's latest reader is not counted, so a
/// session with many calls in flight is never refused for them.
pub const SESSION_REPLACED_READERS_MAX: usize = 4;

const KEEP_ALIVE_COMMENT: &[u8] = b": keep-alive\n\n";

/// One exchange's messages, in order, each with its sequence number.
pub(super) struct Exchange {
    clock: Rc<dyn Clock>,
    /// The stream's number in the front, when its events carry ids (a 2025-11-25 session).
    stream: Option<u64>,
    lines: RefCell<VecDeque<(u64, Vec<u8>)>>,
    next_seq: Cell<u64>,
    bytes: Cell<usize>,
    ended: Cell<bool>,
    ended_at_ms: Cell<u64>,
    changed: Notify,
    /// The latest follower's number: a stream has one reader at a time, so a resumption
    /// ends the reader before it (a client cannot hold many connections on one stream).
    follower: Cell<u64>,
    /// Followers not yet dropped: the latest, and any before it still writing (stalled).
    readers: Cell<usize>,
    /// Set when the session ended (DELETE): its readers end at once.
    closed: Cell<bool>,
}

impl Outlet for Exchange {
    fn write_line(&self, mut line: Vec<u8>) -> LocalBoxFuture<'static, std::io::Result<()>> {
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        let seq = self.next_seq.get();
        self.next_seq.set(seq + 1);
        self.bytes.set(self.bytes.get() + line.len());
        let mut lines = self.lines.borrow_mut();
        lines.push_back((seq, line));
        while lines.len() > 1 && (lines.len() > EXCHANGE_MESSAGES_MAX || self.bytes.get() > EXCHANGE_BYTES_MAX) {
            let (_, dropped) = lines.pop_front().expect("more than one line");
            self.bytes.set(self.bytes.get() - dropped.len());
        }
        drop(lines);
        self.changed.notify_all();
        Box::pin(std::future::ready(Ok(())))
    }
}

/// Why an exchange's answer turns into a live stream before its call ends.
pub(super) enum StreamStart {
    /// A message other than the answer is written: it goes out now.
    Message,
    /// Nothing was written for `KEEP_ALIVE_MS`.
    Quiet,
}

impl Exchange {
    pub(super) fn new(clock: &Rc<dyn Clock>, stream: Option<u64>) -> Rc<Exchange> {
        Rc::new(Exchange {
            clock: Rc::clone(clock),
            stream,
            lines: RefCell::new(VecDeque::new()),
            next_seq: Cell::new(0),
            bytes: Cell::new(0),
            ended: Cell::new(false),
            ended_at_ms: Cell::new(0),
            changed: Notify::default(),
            follower: Cell::new(0),
            readers: Cell::new(0),
            closed: Cell::new(false),
        })
    }

    pub(super) fn stream(&self) -> Option<u64> {
        self.stream
    }

    /// Every message is written: the exchange's call ended (or it was cancelled).
    pub(super) fn end(&self) {
        self.ended.set(true);
        self.ended_at_ms.set(self.clock.monotonic_ms());
        self.changed.notify_all();
    }

    /// The session ended: every reader of this stream ends now.
    pub(super) fn close(&self) {
        self.closed.set(true);
        self.changed.notify_all();
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes.get()
    }

    /// Completes when the exchange should be streamed rather than answered at its end.
    pub(super) async fn stream_wanted(&self) -> StreamStart {
        let quiet_until = self.clock.monotonic_ms().saturating_add(KEEP_ALIVE_MS);
        loop {
            if self.lines.borrow().iter().any(|(_, line)| !is_response(line)) {
                return StreamStart::Message;
            }
            let left = quiet_until.saturating_sub(self.clock.monotonic_ms());
            if left == 0 {
                return StreamStart::Quiet;
            }
            let changed = Box::pin(self.changed.changed());
            if let Either::Right(()) = select(changed, self.clock.sleep(left)).await {
                return StreamStart::Quiet;
            }
        }
    }

    /// The HTTP status an error answer takes outside a session: 404 for a method not found,
    /// 400 for a request refused as malformed or unsupported, 500 for an internal error.
    pub(super) fn error_status(&self) -> Option<u16> {
        let lines = self.lines.borrow();
        let answer: Value = serde_json::from_slice(&lines.iter().rev().find(|(_, line)| is_response(line))?.1).ok()?;
        let code = answer.pointer("/error/code")?.as_i64()?;
        Some(match code {
            jsonrpc::METHOD_NOT_FOUND => 404,
            jsonrpc::INTERNAL_ERROR => 500,
            _ => 400,
        })
    }

    /// The exchange's answer once it ended. As JSON: the response alone (a client that takes
    /// no stream misses the notifications). As an SSE stream: every message, the response
    /// last. With no response (the request was cancelled): the notifications on a stream, or 202.
    pub(super) fn answer(&self, reply: Reply) -> OutboundAnswer {
        let lines = self.lines.borrow();
        let response = lines.iter().rev().find(|(_, line)| is_response(line));
        let stream = match reply {
            Reply::Stream => !lines.is_empty(),
            Reply::Either => lines.len() > 1 || (response.is_none() && !lines.is_empty()),
            Reply::Json => false,
        };
        match response {
            _ if stream => {
                drop(lines);
                stream_answer(self.events_from(0).0, None)
            }
            Some((_, response)) => super::http::json_bytes(200, response.clone()),
            None => super::http::accepted(),
        }
    }

    /// The answer of a live stream: the events so far, then the rest as they come. `guard`
    /// is dropped with the stream (a stateless exchange's calls are cancelled by it).
    pub(super) fn live(self: &Rc<Self>, start: StreamStart, guard: Option<Box<dyn std::any::Any>>) -> OutboundAnswer {
        let (mut body, next) = self.events_from(0);
        if body.is_empty() && matches!(start, StreamStart::Quiet) {
            body = KEEP_ALIVE_COMMENT.to_vec();
        }
        stream_answer(body, Some(self.follow(next, guard)))
    }

    /// The answer to a `Last-Event-ID` naming event `seq` of this stream: the events after
    /// it, then the rest as they come.
    pub(super) fn resumed(self: &Rc<Self>, seq: u64) -> OutboundAnswer {
        if self.readers.get() >= STREAM_READERS_MAX {
            return super::http::plain(
                429,
                &format!(
                    "this stream has {STREAM_READERS_MAX} readers still writing (a client that stopped reading); try \
                     again in a moment"
                ),
            );
        }
        let (body, next) = self.events_from(seq.saturating_add(1));
        let more = (!self.ended.get() || next < self.next_seq.get()).then(|| self.follow(next, None));
        stream_answer(body, more)
    }

    fn follow(self: &Rc<Self>, from: u64, guard: Option<Box<dyn std::any::Any>>) -> MoreBody {
        let number = self.follower.get() + 1;
        self.follower.set(number);
        // The reader before this one, if any, ends at its next chunk.
        self.changed.notify_all();
        self.readers.set(self.readers.get() + 1);
        let follower = Follower { exchange: Rc::clone(self), number, cursor: Rc::new(Cell::new(from)), _guard: guard };
        MoreBody(Rc::new(follower))
    }

    /// The SSE events of the messages from sequence number `from` on (from the oldest kept,
    /// if that one was dropped), and the sequence number after them.
    fn events_from(&self, from: u64) -> (Vec<u8>, u64) {
        let lines = self.lines.borrow();
        let mut body = Vec::new();
        let mut next = from;
        for (seq, line) in lines.iter().filter(|(seq, _)| *seq >= from) {
            if let Some(stream) = self.stream {
                body.extend_from_slice(format!("id: {stream}-{seq}\n").as_bytes());
            }
            body.extend_from_slice(b"event: message\ndata: ");
            body.extend_from_slice(line);
            body.extend_from_slice(b"\n\n");
            next = seq + 1;
        }
        (body, next)
    }
}

/// Reads a live stream for the listener: the events not yet written, a keep-alive comment
/// after a quiet `KEEP_ALIVE_MS`, and the end once the exchange ended and all is written.
struct Follower {
    exchange: Rc<Exchange>,
    number: u64,
    cursor: Rc<Cell<u64>>,
    _guard: Option<Box<dyn std::any::Any>>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.exchange.readers.set(self.exchange.readers.get() - 1);
    }
}

impl BodySource for Follower {
    fn next(&self) -> LocalBoxFuture<'static, Option<Vec<u8>>> {
        let (exchange, cursor, number) = (Rc::clone(&self.exchange), Rc::clone(&self.cursor), self.number);
        Box::pin(async move {
            loop {
                if exchange.closed.get() || exchange.follower.get() != number {
                    return None;
                }
                let (events, next) = exchange.events_from(cursor.get());
                if !events.is_empty() {
                    cursor.set(next);
                    return Some(events);
                }
                if exchange.ended.get() {
                    return None;
                }
                let changed = Box::pin(exchange.changed.changed());
                if let Either::Right(()) = select(changed, exchange.clock.sleep(KEEP_ALIVE_MS)).await {
                    return Some(KEEP_ALIVE_COMMENT.to_vec());
                }
            }
        })
    }
}

fn stream_answer(body: Vec<u8>, more: Option<MoreBody>) -> OutboundAnswer {
    OutboundAnswer {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into()), ("cache-control".into(), "no-store".into())],
        body,
        more,
    }
}

/// The ended streams of sessions kept for resumptions: bounded in number, bytes and age, the
/// oldest dropped first. Sessions name their streams weakly, so a stream dropped here is gone.
#[derive(Default)]
pub(super) struct Replay {
    kept: RefCell<VecDeque<Rc<Exchange>>>,
    bytes: Cell<usize>,
}

impl Replay {
    pub(super) fn keep(&self, exchange: Rc<Exchange>, now_ms: u64) {
        self.bytes.set(self.bytes.get() + exchange.bytes());
        self.kept.borrow_mut().push_back(exchange);
        self.expire(now_ms);
    }

    /// Drops the streams past the window, and the oldest while over a bound.
    pub(super) fn expire(&self, now_ms: u64) {
        let mut kept = self.kept.borrow_mut();
        while let Some(oldest) = kept.front() {
            let expired = oldest.ended_at_ms.get().saturating_add(REPLAY_WINDOW_MS) <= now_ms;
            if !expired && kept.len() <= REPLAY_STREAMS_MAX && self.bytes.get() <= REPLAY_BYTES_MAX {
                break;
            }
            let oldest = kept.pop_front().expect("a front");
            self.bytes.set(self.bytes.get() - oldest.bytes());
        }
    }
}

/// A session's streams, named weakly: the exchange in progress holds its own, `Replay` an
/// ended one's.
pub(super) fn find_stream(streams: &[Weak<Exchange>], number: u64) -> Option<Rc<Exchange>> {
    streams.iter().filter_map(Weak::upgrade).find(|exchange| exchange.stream == Some(number))
}

/// Whether a session whose streams are `streams` may resume one more: refused (429) while
/// `SESSION_REPLACED_READERS_MAX` readers that resumptions replaced still write.
pub(super) fn session_readers_refusal(streams: &[Weak<Exchange>]) -> Option<OutboundAnswer> {
    let replaced: usize =
        streams.iter().filter_map(Weak::upgrade).map(|exchange| exchange.readers.get().saturating_sub(1)).sum();
    (replaced >= SESSION_REPLACED_READERS_MAX).then(|| {
        super::http::plain(
            429,
            &format!(
                "this session's streams have {SESSION_REPLACED_READERS_MAX} replaced readers still writing (clients \
                 that stopped reading); try again in a moment"
            ),
        )
    })
}

/// A `Last-Event-ID` of this server's: the stream's number and the event's sequence number.
pub(super) fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (stream, seq) = id.trim().split_once('-')?;
    Some((stream.parse().ok()?, seq.parse().ok()?))
}

/// How the client takes answers (its Accept header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reply {
    Json,
    Stream,
    /// JSON for a lone response, a stream when there is more.
    Either,
}

/// A JSON-RPC response line (an answer with an id), not a notification.
fn is_response(line: &[u8]) -> bool {
    serde_json::from_slice::<Value>(line)
        .is_ok_and(|m| m.get("method").is_none() && (m.get("result").is_some() || m.get("error").is_some()))
}

/// Cancels an exchange's calls when dropped while armed (its client closed the connection
/// before the answer).
pub(super) struct CancelOnDrop {
    pub(super) connection: Rc<Connection>,
    pub(super) armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.connection.cancel_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange_of(lines: &[&str], stream: Option<u64>) -> Rc<Exchange> {
        let clock: Rc<dyn Clock> = Rc::new(Stopped);
        let exchange = Exchange::new(&clock, stream);
        for line in lines {
            // The line is kept when the call is made; the future only reports it.
            drop(exchange.write_line(line.as_bytes().to_vec()));
        }
        exchange
    }

    /// A clock that never moves: these tests wait for nothing.
    struct Stopped;

    impl Clock for Stopped {
        fn now_ms(&self) -> u64 {
            0
        }
        fn monotonic_ms(&self) -> u64 {
            0
        }
        fn sleep(&self, _ms: u64) -> LocalBoxFuture<'static, ()> {
            Box::pin(std::future::pending())
        }
    }

    const NOTE: &str = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
    const RESPONSE: &str = r#"{"jsonrpc":"2.0","id":7,"result":{}}"#;

    /// The answer is the response, never a notification; a cancelled request (no response)
    /// gets its notifications on a stream, or 202.
    #[test]
    fn an_exchange_answers_with_its_response_alone() {
        let both = exchange_of(&[NOTE, RESPONSE], None);
        assert_eq!(both.answer(Reply::Json).body, RESPONSE.as_bytes());
        assert_eq!(both.answer(Reply::Either).status, 200);
        assert!(String::from_utf8(both.answer(Reply::Either).body).unwrap().starts_with("event: message"));
        let cancelled = exchange_of(&[NOTE], None);
        assert_eq!(cancelled.answer(Reply::Json).status, 202);
        assert!(cancelled.answer(Reply::Json).body.is_empty());
        assert!(String::from_utf8(cancelled.answer(Reply::Either).body).unwrap().contains("notifications/message"));
        assert_eq!(exchange_of(&[RESPONSE], None).answer(Reply::Either).body, RESPONSE.as_bytes());
        assert_eq!(exchange_of(&[], None).answer(Reply::Stream).status, 202);
    }

    /// A session's stream names each event, and a resumption after one gives the rest.
    #[test]
    fn a_session_stream_resumes_after_the_event_named() {
        let exchange = exchange_of(&[NOTE, NOTE, RESPONSE], Some(4));
        let whole = String::from_utf8(exchange.events_from(0).0).unwrap();
        assert_eq!(whole.matches("id: 4-").count(), 3, "{whole}");
        assert_eq!(parse_event_id("4-1"), Some((4, 1)));
        exchange.end();
        let rest = String::from_utf8(exchange.resumed(1).body).unwrap();
        assert!(rest.starts_with("id: 4-2\n") && rest.contains(r#""id":7"#) && !rest.contains("4-1"), "{rest}");
        assert!(exchange.resumed(2).more.is_none() && exchange.resumed(2).body.is_empty());
        assert_eq!(parse_event_id("4"), None);
        assert_eq!(parse_event_id("x-1"), None);
    }

    /// Readers a client stopped reading are not ended until their next chunk: resumptions of
    /// one stream, and of a session's streams, are bounded while they last (each such reader
    /// holds a connection), and a reader ended makes room again.
    #[test]
    fn resumptions_are_bounded_while_their_readers_still_write() {
        let stream = exchange_of(&[NOTE], Some(1));
        let mut held: Vec<MoreBody> = (0..STREAM_READERS_MAX).map(|_| stream.resumed(0).more.unwrap()).collect();
        assert_eq!(stream.resumed(0).status, 429, "a third reader while two still write");
        held.pop();
        assert_eq!(stream.resumed(0).status, 200, "a reader ended makes room");
        // A session with many calls in flight, each stream read once, is never refused.
        let session: Vec<Rc<Exchange>> = (0..64).map(|n| exchange_of(&[NOTE], Some(n))).collect();
        let weak: Vec<Weak<Exchange>> = session.iter().map(Rc::downgrade).collect();
        let mut readers: Vec<MoreBody> = session.iter().map(|exchange| exchange.resumed(0).more.unwrap()).collect();
        assert!(session_readers_refusal(&weak).is_none(), "one reader a stream");
        for (n, exchange) in session.iter().take(SESSION_REPLACED_READERS_MAX).enumerate() {
            assert!(session_readers_refusal(&weak).is_none(), "replaced reader {n} of the session");
            readers.push(exchange.resumed(0).more.unwrap());
        }
        assert_eq!(session_readers_refusal(&weak).map(|answer| answer.status), Some(429));
        drop(readers);
        assert!(session_readers_refusal(&weak).is_none());
    }

    /// Ended streams are kept for resumptions within their window, their count and their
    /// bytes, the oldest dropped first; a session names them weakly, so a dropped one is gone.
    #[test]
    fn ended_streams_are_kept_within_their_bounds() {
        let replay = Replay::default();
        let kept = exchange_of(&[NOTE, RESPONSE], Some(1));
        kept.end();
        let weak = Rc::downgrade(&kept);
        replay.keep(kept, 0);
        assert!(find_stream(std::slice::from_ref(&weak), 1).is_some());
        replay.expire(REPLAY_WINDOW_MS - 1);
        assert!(weak.upgrade().is_some(), "kept within its window");
        replay.expire(REPLAY_WINDOW_MS);
        assert!(weak.upgrade().is_none() && find_stream(&[weak], 1).is_none(), "dropped at the window's end");
        for number in 0..REPLAY_STREAMS_MAX as u64 + 5 {
            let stream = exchange_of(&[RESPONSE], Some(number));
            stream.end();
            replay.keep(stream, 0);
        }
        assert_eq!(replay.kept.borrow().len(), REPLAY_STREAMS_MAX);
        assert_eq!(replay.kept.borrow().front().unwrap().stream(), Some(5), "the oldest went first");
        let huge = vec![b'x'; LINE_BYTES_MAX];
        for number in 0..(REPLAY_BYTES_MAX / LINE_BYTES_MAX) as u64 + 3 {
            let stream = exchange_of(&[], Some(10_000 + number));
            drop(stream.write_line(huge.clone()));
            stream.end();
            replay.keep(stream, 0);
        }
        assert!(replay.bytes.get() <= REPLAY_BYTES_MAX, "{} bytes kept", replay.bytes.get());
    }

    /// An exchange keeps at most its bounds, dropping the oldest, never the last message.
    #[test]
    fn an_exchange_keeps_its_bounds() {
        let exchange = exchange_of(&[], None);
        for _ in 0..EXCHANGE_MESSAGES_MAX + 10 {
            drop(exchange.write_line(NOTE.as_bytes().to_vec()));
        }
        assert_eq!(exchange.lines.borrow().len(), EXCHANGE_MESSAGES_MAX);
        assert_eq!(exchange.lines.borrow().front().unwrap().0, 10);
        let huge = vec![b'x'; LINE_BYTES_MAX];
        for _ in 0..3 {
            drop(exchange.write_line(huge.clone()));
        }
        assert!(exchange.bytes() <= EXCHANGE_BYTES_MAX);
        assert_eq!(exchange.lines.borrow().back().unwrap().1.len(), LINE_BYTES_MAX);
    }
}
