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
            ready(listener.local_addr()?);
            let open = Rc::new(Cell::new(0usize));
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
                if open.get() >= limits.connections_max {
                    drop(stream);
                    continue;
                }
                let counted = Counted::enter(&open);
                let handler = Rc::clone(&handler);
                tokio::task::spawn_local(async move {
                    let _counted = counted;
                    let service =
                        service_fn(move |request| answer(Rc::clone(&handler), request, limits.body_bytes_max));
                    let served = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(Duration::from_millis(limits.header_read_ms))
                        .serve_connection(TokioIo::new(stream), service);
                    // A connection's failure (a reset, a malformed request) ends it alone.
                    let _ = served.await;
                });
            }
        })
    }
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
    request: Request<Incoming>,
    body_bytes_max: usize,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, body_bytes_max).collect().await {
        Ok(collected) => collected.to_bytes().to_vec(),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            let text = format!("the request body is over the limit of {body_bytes_max} bytes");
            return Ok(respond(OutboundAnswer { status: 413, headers: vec![], body: text.into_bytes() }));
        }
        Err(_) => {
            let text = "the request body could not be read";
            return Ok(respond(OutboundAnswer { status: 400, headers: vec![], body: text.into() }));
        }
    };
    let inbound = InboundRequest {
        method: parts.method.as_str().to_string(),
        path: parts.uri.path().to_string(),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
            .collect(),
        body,
    };
    Ok(respond(handler(inbound).await))
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
