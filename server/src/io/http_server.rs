//! The real HTTP listener: hyper's HTTP/1.1 server on the current-thread runtime. It bounds
//! connections, header time and body size, and hands each request whole to the handler
//! (`crate::http`, which knows MCP); nothing here knows MCP.

use std::cell::Cell;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::env::{HttpServe, InboundHandler, InboundRequest, ListenLimits, LocalBoxFuture, OutboundAnswer};

pub struct RealHttp;

impl HttpServe for RealHttp {
    fn serve(
        &self,
        address: SocketAddr,
        limits: ListenLimits,
        handler: InboundHandler,
        ready: Box<dyn FnOnce(SocketAddr)>,
    ) -> LocalBoxFuture<'static, std::io::Result<()>> {
        Box::pin(async move {
            let listener = tokio::net::TcpListener::bind(address).await?;
            let connections_max = connections_within_descriptors(limits.connections_max);
            ready(listener.local_addr()?);
            let open = Rc::new(Cell::new(0usize));
            let bodies = Rc::new(tokio::sync::Semaphore::new(limits.bodies_read_at_once));
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    // Out of descriptors, or a connection reset before it was taken: the
                    // listener goes on after a pause rather than spinning.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if open.get() >= connections_max {
                    drop(stream);
                    continue;
                }
                let counted = Counted::enter(&open);
                let (handler, bodies) = (Rc::clone(&handler), Rc::clone(&bodies));
                tokio::task::spawn_local(async move {
                    let _counted = counted;
                    let service =
                        service_fn(move |request| answer(Rc::clone(&handler), Rc::clone(&bodies), request, limits));
                    let served = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(Duration::from_millis(limits.header_read_ms))
                        .max_buf_size(limits.head_bytes_max)
                        // A client that half-closes after its request still gets the answer.
                        .half_close(true)
                        .serve_connection(TokioIo::new(stream), service);
                    // A connection's failure (a reset, a malformed request) ends it alone.
                    let _ = served.await;
                });
            }
        })
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

/// One open connection, counted until it ends.
struct Counted(Rc<Cell<usize>>);

impl Counted {
    fn enter(open: &Rc<Cell<usize>>) -> Counted {
        open.set(open.get() + 1);
        Counted(Rc::clone(open))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

async fn answer(
    handler: InboundHandler,
    bodies: Rc<tokio::sync::Semaphore>,
    request: Request<Incoming>,
    limits: ListenLimits,
) -> Result<Response<Full<Bytes>>, Infallible> {
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
        headers,
        body: vec![],
    };
    if let Some(refused) = handler.screen(&inbound) {
        return Ok(respond(refused));
    }
    let declared = inbound.header("content-length").and_then(|length| length.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limits.body_bytes_max as u64) {
        return Ok(respond(refusal(
            413,
            &format!("the request body is over the limit of {} bytes", limits.body_bytes_max),
        )));
    }
    // Bodies are read a few at a time, so the memory they take is bounded however many
    // clients send at once.
    let Ok(_reading) = bodies.acquire().await else {
        return Ok(respond(refusal(503, "the server is stopping")));
    };
    let read = Limited::new(body, limits.body_bytes_max).collect();
    let body = match tokio::time::timeout(Duration::from_millis(limits.body_read_ms), read).await {
        Ok(Ok(collected)) => collected.to_bytes().to_vec(),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => {
            return Ok(respond(refusal(
                413,
                &format!("the request body is over the limit of {} bytes", limits.body_bytes_max),
            )));
        }
        Ok(Err(_)) => return Ok(respond(refusal(400, "the request body could not be read"))),
        Err(_) => return Ok(respond(refusal(408, "the request body did not arrive in time"))),
    };
    drop(_reading);
    inbound.body = body;
    Ok(respond(handler.answer(inbound).await))
}

fn refusal(status: u16, text: &str) -> OutboundAnswer {
    OutboundAnswer {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: serde_json::to_vec(&serde_json::json!({"error": text})).expect("JSON values serialise"),
    }
}

fn respond(answer: OutboundAnswer) -> Response<Full<Bytes>> {
    let mut response = Response::builder().status(answer.status);
    for (name, value) in &answer.headers {
        response = response.header(name.as_str(), value.as_str());
    }
    response.body(Full::new(Bytes::from(answer.body))).unwrap_or_else(|_| {
        let mut broken = Response::new(Full::new(Bytes::from_static(b"an answer could not be built")));
        *broken.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        broken
    })
}
