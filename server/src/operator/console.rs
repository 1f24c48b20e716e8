//! `warden console`: a read-only page over the runs the ledger and the journals hold (files or
//! the PostgreSQL store), beside a live server or without one. On top, the runs waiting for a
//! person, each with its action shown whole and the exact command that decides it; below, the
//! runs newest first, filtered by tool, state, age and text; and one run's page (its
//! arguments where kept, its actions on a time line, prints, answer, and who decided what).
//! Loopback only and unauthenticated, as the metrics listener: the same Host and Origin check
//! against DNS rebinding, GET only, and nothing on the page acts. The page renders with
//! `textContent` only, under a Content-Security-Policy that allows its own script alone.

use core::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;

use serde_json::{json, Value};

use crate::catalog::Catalog;
use crate::env::{Env, InboundRequest, ListenLimits, OutboundAnswer, PostgresTarget};
use crate::operator::runs::{Filter, LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX};

/// The port `warden console` listens on unless told otherwise.
pub const CONSOLE_PORT_DEFAULT: u16 = 8470;
/// The most bytes of a request's query the console reads (its filters' fields).
const QUERY_BYTES_MAX: usize = 1024;

const PAGE: &str = include_str!("console.html");
const SCRIPT: &str = include_str!("console.js");
const SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Checks a `--listen` address: loopback only, as the page is served without authentication.
pub fn check_listen(address: SocketAddr) -> Result<(), String> {
    match address.ip().is_loopback() {
        true => Ok(()),
        false => Err(format!(
            "--listen {address}: the console is served without authentication, so only on a loopback address \
             (127.0.0.1:{CONSOLE_PORT_DEFAULT}, say); reach it from elsewhere through an SSH tunnel"
        )),
    }
}

/// What the console reads from: the manifest, and its store.
pub struct Console {
    pub env: Env,
    pub catalog: Catalog,
    pub store: Option<PostgresTarget>,
    pub manifest_path: PathBuf,
}

/// Serves the console on `address` until `stop` resolves (a shutdown signal).
pub async fn serve(
    console: Console,
    address: SocketAddr,
    stop: crate::env::LocalBoxFuture<'static, ()>,
) -> Result<(), String> {
    check_listen(address)?;
    let limits = ListenLimits::bodiless(32);
    let env = console.env.clone();
    let shown = console.manifest_path.display().to_string();
    let log = env.clone();
    let ready = Box::new(move |bound: SocketAddr| {
        log.log(&format!("the console of {shown} on http://{bound}/ (read-only; SIGTERM or Ctrl-C stops it)"))
    });
    let handler: crate::env::InboundHandler = Rc::new(Served(Rc::new(console)));
    env.http
        .serve(address, limits, handler, ready, stop)
        .await
        .map_err(|error| format!("--listen {address}: {error}"))?;
    env.log("the console stopped");
    Ok(())
}

struct Served(Rc<Console>);

impl crate::env::InboundService for Served {
    fn screen(&self, head: &InboundRequest) -> Option<OutboundAnswer> {
        if !crate::protocol::http::names_a_loopback_listener(head) {
            return Some(plain(403, "forbidden: the Host or Origin does not name this loopback console"));
        }
        if head.method != "GET" {
            return Some(plain(405, "the console only reads: GET"));
        }
        if head.query.as_ref().is_some_and(|query| query.len() > QUERY_BYTES_MAX) {
            return Some(plain(414, &format!("the query is over {QUERY_BYTES_MAX} bytes")));
        }
        match head.path.as_str() {
            "/" | "/console.js" | "/api/runs" | "/api/run" => None,
            _ => Some(plain(404, "not found: the console is at /")),
        }
    }

    fn answer(&self, request: InboundRequest) -> crate::env::LocalBoxFuture<'static, OutboundAnswer> {
        let console = Rc::clone(&self.0);
        Box::pin(async move {
            let fields = query_fields(request.query.as_deref().unwrap_or(""));
            match request.path.as_str() {
                "/" => asset("text/html; charset=utf-8", PAGE),
                "/console.js" => asset("text/javascript; charset=utf-8", SCRIPT),
                "/api/runs" => as_json(runs(&console, &fields).await),
                _ => as_json(run(&console, &fields).await),
            }
        })
    }
}

/// `/api/runs`: the runs waiting for a person, and the runs the filters select.
async fn runs(console: &Console, fields: &[(String, String)]) -> Result<Value, String> {
    let field = |name: &str| fields.iter().find(|(key, value)| key == name && !value.is_empty()).map(|(_, v)| v);
    let limit = match field("limit") {
        Some(limit) => limit.parse::<usize>().map_err(|_| format!("limit: `{limit}` is not a number"))?,
        None => LIST_LIMIT_DEFAULT,
    };
    let filter = Filter::parse(
        field("tool").cloned(),
        field("state").map(String::as_str),
        field("since").map(String::as_str),
        field("text").cloned(),
        limit.min(LIST_LIMIT_MAX),
    )?;
    let store = console.store.clone();
    crate::operator::runs::console_view(&console.env, &console.catalog, store, &filter).await
}

/// `/api/run?id=<run>`: one run as `warden runs show --json` gives it.
async fn run(console: &Console, fields: &[(String, String)]) -> Result<Value, String> {
    let id = fields.iter().find(|(key, _)| key == "id").map(|(_, id)| id.as_str()).unwrap_or("");
    let store = console.store.clone();
    let text = crate::operator::runs::show(&console.env, &console.catalog, store, id, true).await?;
    serde_json::from_str(&text).map_err(|error| format!("the run's view does not read back: {error}"))
}

/// A query's fields, percent-decoded (`+` a space, as a form sends it).
fn query_fields(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes()).map(|(key, value)| (key.into_owned(), value.into_owned())).collect()
}

fn asset(media_type: &str, text: &str) -> OutboundAnswer {
    OutboundAnswer {
        status: 200,
        headers: vec![
            ("content-type".into(), media_type.into()),
            ("content-security-policy".into(), SECURITY_POLICY.into()),
            ("x-content-type-options".into(), "nosniff".into()),
            ("cache-control".into(), "no-store".into()),
        ],
        body: text.as_bytes().to_vec(),
        more: None,
    }
}

/// A view as JSON, or its refusal (a filter that does not parse, a run not found) as
/// `{"error": ...}` with 400.
fn as_json(view: Result<Value, String>) -> OutboundAnswer {
    let (status, body) = match view {
        Ok(view) => (200, view),
        Err(problem) => (400, json!({"error": problem})),
    };
    OutboundAnswer {
        status,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("x-content-type-options".into(), "nosniff".into()),
            ("cache-control".into(), "no-store".into()),
        ],
        body: serde_json::to_vec(&body).expect("JSON values serialise"),
        more: None,
    }
}

fn plain(status: u16, text: &str) -> OutboundAnswer {
    OutboundAnswer {
        status,
        headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())],
        body: format!("{text}\n").into_bytes(),
        more: None,
    }
}
