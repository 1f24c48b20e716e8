//! `/metrics` for Prometheus: on `serve-http`'s own listener (behind its authentication), or
//! on a listener of its own (`--metrics-listen`, loopback only, for `mcp` too).

use core::net::SocketAddr;
use std::rc::Rc;

use crate::env::{Env, InboundRequest, ListenLimits, OutboundAnswer};
use crate::run::runs::Runs;

/// The path metrics are served at.
pub const METRICS_PATH: &str = "/metrics";
/// The media type of the exposition (`prometheus-client` writes OpenMetrics text).
const METRICS_MEDIA_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The answer to a scrape: every metric as it is now.
pub async fn scrape(runs: &Runs) -> OutboundAnswer {
    let text = crate::run::metrics::exposition(runs).await;
    OutboundAnswer {
        status: 200,
        headers: vec![("content-type".into(), METRICS_MEDIA_TYPE.into())],
        body: text.into_bytes(),
        more: None,
    }
}

/// Checks a `--metrics-listen` address: loopback only, as it is served without authentication.
pub fn check_listen(address: SocketAddr) -> Result<(), String> {
    match address.ip().is_loopback() {
        true => Ok(()),
        false => Err(format!(
            "--metrics-listen {address}: metrics are served without authentication, so only on a loopback \
             address (127.0.0.1:9464, say); beyond this machine, scrape serve-http's own /metrics"
        )),
    }
}

/// Serves `/metrics` on `address` in the background until the process exits. A listener that
/// fails is logged; the server goes on serving its tools.
pub fn spawn_listener(env: &Env, runs: &Rc<Runs>, address: SocketAddr) {
    let limits = ListenLimits::bodiless(16);
    let handler: crate::env::InboundHandler = Rc::new(MetricsOnly(Rc::clone(runs)));
    let log = env.clone();
    let ready = Box::new(move |bound: SocketAddr| log.log(&format!("metrics on http://{bound}{METRICS_PATH}")));
    let listening = env.http.serve(address, limits, handler, ready, Box::pin(std::future::pending()));
    let log = env.clone();
    env.spawn.spawn(Box::pin(async move {
        if let Err(error) = listening.await {
            log.log(&format!("--metrics-listen {address}: listening failed ({error}); metrics are not served"));
        }
    }));
}

/// The metrics listener's one route.
struct MetricsOnly(Rc<Runs>);

impl crate::env::InboundService for MetricsOnly {
    fn screen(&self, head: &InboundRequest) -> Option<OutboundAnswer> {
        let refused = |status: u16, text: &str| OutboundAnswer {
            status,
            headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())],
            body: format!("{text}\n").into_bytes(),
            more: None,
        };
        // DNS rebinding protection, as the MCP endpoint's: the listener is on loopback only, so
        // a request must name a loopback host, and a browser's Origin must be a loopback one.
        if !super::http::names_a_loopback_listener(head) {
            return Some(refused(403, "forbidden: the Host or Origin does not name this loopback listener"));
        }
        match (head.path.as_str(), head.method.as_str()) {
            (METRICS_PATH, "GET") => None,
            (METRICS_PATH, _) => Some(refused(405, "metrics take GET")),
            _ => Some(refused(404, "not found: this listener serves /metrics only")),
        }
    }

    fn answer(&self, _request: InboundRequest) -> crate::env::LocalBoxFuture<'static, OutboundAnswer> {
        let runs = Rc::clone(&self.0);
        Box::pin(async move { scrape(&runs).await })
    }
}
