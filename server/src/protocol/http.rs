//! Warden as a remote server: MCP's Streamable HTTP on one endpoint, `/mcp`, in both eras,
//! over the same call pipeline, journals, ledger and recovery as stdio (seed 004).
//!
//! Each POST carries one JSON-RPC message and is served by a `Connection` of its own whose
//! messages are kept by its `Exchange`: the answer alone as `application/json`, or, when the
//! client accepts a stream, a call's notifications live as they happen and then its answer
//! (`exchange.rs`). In a 2025-11-25 session a stream's events carry ids, a GET with
//! `Last-Event-ID` resumes a broken one, and the session's client is asked for a run's input
//! on its call's stream (its responses arrive as POSTs of their own).
//! A 2026-07-28 request is self-contained, and its `Mcp-Method` and `Mcp-Name` headers must
//! match its body. A 2025-11-25 client opens a session with `initialize` and names it in
//! `Mcp-Session-Id` afterwards. A client that closes its connection before the answer
//! cancels the request's calls (a run already begun goes on, as after a cancellation), except
//! once a session's stream began: that client can resume it, and cancels with
//! `notifications/cancelled`.
//!
//! Before anything else: the endpoint's path, the Host and Origin headers (on loopback, DNS
//! rebinding protection), then the bearer token when one is configured. Listening beyond
//! loopback without a token is refused at start.

use core::net::SocketAddr;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::{Rc, Weak};

use serde_json::{json, Value};

use crate::base::sync::{select, Either};
use crate::call::Principal;
use crate::env::{Env, InboundRequest, ListenLimits, LocalBoxFuture, OutboundAnswer};
use crate::limits::LINE_BYTES_MAX;
use crate::protocol::exchange::{self, CancelOnDrop, Exchange, Replay, Reply, StreamStart};
use crate::protocol::framing::Frame;
use crate::protocol::jsonrpc::{self, Incoming, Notification};
use crate::protocol::metrics::METRICS_PATH;
use crate::protocol::oauth::OAuthConfig;
use crate::protocol::{Connection, LegacySession, Shared, META_PROTOCOL_VERSION};
use crate::run::runs::Runs;

/// The one MCP endpoint.
pub const ENDPOINT: &str = "/mcp";
/// Connections open at once; past it, the oldest connection that has sent no request is
/// closed for the new one (or the new one, when every connection has sent one).
pub const CONNECTIONS_MAX: usize = 256;
/// Connections one peer address keeps open at once: one client cannot take every place.
pub const CONNECTIONS_PER_PEER_MAX: usize = 64;
/// Once its headers passed, a body must keep arriving: a wait longer than this for its next
/// bytes ends the request (a slow client slows only itself).
pub const BODY_CHUNK_WAIT_MS: u64 = 5_000;
/// A client must send a request's headers within this time, and its body within
/// `BODY_READ_MS` of them.
pub const HEADER_READ_MS: u64 = 10_000;
pub const BODY_READ_MS: u64 = 30_000;
/// A request's line and headers together (an access token is at most 8 KiB of them).
pub const HEAD_BYTES_MAX: usize = 64 * 1024;
/// What bodies being read may take of memory, in maximal (4 MiB) bodies: bytes are counted
/// as they arrive, so a client that withholds its body holds only what it sent, and a request
/// that finds the budget spent is answered 503 at once rather than queued.
pub const BODIES_READ_AT_ONCE: usize = 16;
/// Sessions one principal keeps; a new one past this ends that principal's least recently used.
pub const SESSIONS_PER_PRINCIPAL_MAX: usize = 64;
/// 2025-11-25 sessions kept; a new one past this ends the least recently used.
pub const SESSIONS_MAX: usize = 1_024;
/// The shortest bearer token accepted: a shorter one is guessable, and is scrubbed from
/// outputs unreliably.
pub const TOKEN_BYTES_MIN: usize = 16;

/// How `warden serve-http` was asked to listen.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    pub listen: SocketAddr,
    /// The environment variable holding the bearer token every request must carry.
    pub bearer_token_env: Option<String>,
    /// OAuth 2.1: requests carry access tokens (JWTs) of this issuer for this audience.
    pub oauth: Option<OAuthOptions>,
    /// A loopback address to serve `/metrics` on, without authentication.
    pub metrics_listen: Option<SocketAddr>,
}

/// Where access tokens come from and whom they are for.
#[derive(Clone, Debug)]
pub struct OAuthOptions {
    pub issuer: String,
    /// This server's resource URL (ending in /mcp): the tokens' audience.
    pub audience: String,
    /// The issuer's public keys (a JWKS file, or a URL fetched at start and hourly).
    pub keys: crate::protocol::oauth::KeySource,
}

/// How requests are authenticated.
pub enum Auth {
    /// Loopback only: whoever can reach the port.
    None,
    /// One static token: one trusted client, no principal (as over stdio).
    Bearer(String),
    /// Access tokens: each request's principal is the token's subject.
    #[allow(clippy::enum_variant_names)] // the protocol's own name, not "Auth" repeated
    OAuth(Rc<OAuthConfig>),
}

/// How `options` asks requests to be authenticated: the OAuth issuer's keys are fetched, the
/// bearer token read from its variable.
pub async fn authentication(env: &Env, options: &HttpOptions) -> Result<Auth, String> {
    Ok(match (&options.oauth, &options.bearer_token_env) {
        (Some(_), Some(_)) => return Err("--bearer-token-env and --oauth-*: choose one way to authenticate".into()),
        (Some(oauth), None) => Auth::OAuth(OAuthConfig::load(env, &oauth.issuer, &oauth.audience, &oauth.keys).await?),
        (None, _) => match bearer_token(env, options)? {
            Some(token) => Auth::Bearer(token),
            None => Auth::None,
        },
    })
}

impl Auth {
    /// What the server must scrub from every output: a static token.
    pub fn secrets(&self) -> Vec<String> {
        match self {
            Auth::Bearer(token) => vec![token.clone()],
            _ => Vec::new(),
        }
    }
}

/// Serves an opened server's tools over Streamable HTTP until listening fails or a durable
/// write fails.
pub async fn serve(env: &Env, runs: &Rc<Runs>, auth: Auth, options: &HttpOptions) -> Result<(), String> {
    if !matches!(auth, Auth::OAuth(_)) {
        warn_of_unchecked_scopes(env, runs);
    }
    let front = Rc::new(Front {
        env: env.clone(),
        shared: Shared::new(runs),
        runs: Rc::clone(runs),
        loopback: options.listen.ip().is_loopback(),
        auth,
        sessions: RefCell::new(BTreeMap::new()),
        uses: Cell::new(0),
        sessions_ended: Cell::new(0),
        exchanges: crate::base::sync::WaitGroup::new(),
        next_stream: Cell::new(0),
        replay: Replay::default(),
        refused_connections: Cell::new((0, None)),
    });
    let handler: crate::env::InboundHandler = Rc::new(Served(Rc::clone(&front)));
    let limits = ListenLimits {
        body_bytes_max: LINE_BYTES_MAX,
        connections_max: CONNECTIONS_MAX,
        connections_per_peer_max: CONNECTIONS_PER_PEER_MAX,
        body_chunk_wait_ms: BODY_CHUNK_WAIT_MS,
        header_read_ms: HEADER_READ_MS,
        body_read_ms: BODY_READ_MS,
        head_bytes_max: HEAD_BYTES_MAX,
        bodies_read_at_once: BODIES_READ_AT_ONCE,
        body_write_ms: exchange::STREAM_WRITE_MS,
    };
    let log_env = env.clone();
    let ready = Box::new(move |bound: SocketAddr| log_env.log(&format!("listening on http://{bound}{ENDPOINT}")));
    let stop_listening = crate::base::sync::Signal::new();
    let mut served = env.http.serve(options.listen, limits, handler, ready, Box::pin(stop_listening.wait()));
    // Registered before the first request is served: a signal from then on drains.
    let mut shutdown = env.process.shutdown_signal(1);
    let stopped = Box::pin(select(front.runs.fatal.wait(), &mut shutdown));
    let drained = match select(&mut served, stopped).await {
        Either::Left(listened) => {
            return listened.map_err(|error| format!("listening on {} failed: {error}", options.listen))
        }
        Either::Right(Either::Left(())) => return Err(fatal_message(runs)),
        // Listening goes on while runs drain: new requests are answered 503.
        Either::Right(Either::Right(())) => {
            let drain = crate::run::drain::drain_unless_signalled_again(env, runs, &front.exchanges);
            match select(&mut served, Box::pin(drain)).await {
                Either::Left(listened) => {
                    return listened.map_err(|error| format!("listening on {} failed: {error}", options.listen))
                }
                Either::Right(drained) => drained,
            }
        }
    };
    stop_listening.set();
    if drained.is_ok() {
        // Every call is answered: what is left is writing the answers out and closing.
        let _ = select(served, env.clock.sleep(LISTENER_CLOSE_MS)).await;
    }
    if runs.fatal_message().is_some() {
        return Err(fatal_message(runs));
    }
    drained?;
    crate::run::drain::deliver_before_exit(env, runs).await?;
    env.log("exiting: drained after a shutdown signal");
    Ok(())
}

/// Scopes are checked against OAuth principals only: without OAuth, say so.
fn warn_of_unchecked_scopes(env: &Env, runs: &Runs) {
    let scoped: Vec<&str> = (runs.catalog.tools.iter())
        .filter(|tool| !tool.config.scopes.is_empty())
        .map(|tool| tool.config.name.as_str())
        .collect();
    if !scoped.is_empty() {
        env.log(&format!(
            "{} have scopes, which only OAuth principals are checked against: without --oauth-* whoever reaches \
             this server may call them",
            scoped.join(", ")
        ));
    }
}

fn fatal_message(runs: &Runs) -> String {
    runs.fatal_message().unwrap_or_else(|| "a durable write failed".to_string())
}

/// Whether a request asks for something new: a POST of a JSON-RPC request. A notification
/// (a cancellation), a client's response or a DELETE ending a session is still taken while the
/// server drains.
fn starts_something(request: &InboundRequest) -> bool {
    if request.method != "POST" {
        return false;
    }
    let message: Option<Value> = serde_json::from_slice(&request.body).ok();
    message.is_none_or(|message| message.get("id").is_some() && message.get("method").is_some())
}

/// The liveness probe's path, and the readiness probe's.
const HEALTH_PATH: &str = "/healthz";
const READY_PATH: &str = "/readyz";
/// What a request refused while the server stops says to wait, in seconds (`Retry-After`).
const STOPPING_RETRY_AFTER_S: u64 = 5;
/// After a drain, how long the listener has to write the last answers and close.
const LISTENER_CLOSE_MS: u64 = 5_000;

/// The token from its environment variable; none configured is allowed on loopback only.
fn bearer_token(env: &Env, options: &HttpOptions) -> Result<Option<String>, String> {
    let Some(name) = &options.bearer_token_env else {
        if !options.listen.ip().is_loopback() {
            return Err(format!(
                "--listen {}: listening beyond loopback needs authentication (--bearer-token-env NAME, or --oauth-*)",
                options.listen
            ));
        }
        return Ok(None);
    };
    match env.process.var(name) {
        None => Err(format!("--bearer-token-env: the environment variable {name} is not set")),
        Some(token) if token.len() < TOKEN_BYTES_MIN => Err(format!(
            "--bearer-token-env: the environment variable {name} holds {} bytes; a token must have at least {TOKEN_BYTES_MIN}",
            token.len()
        )),
        Some(token) if token.len() > crate::protocol::oauth::TOKEN_BYTES_MAX => Err(format!(
            "--bearer-token-env: the environment variable {name} holds {} bytes; a token has at most {}",
            token.len(),
            crate::protocol::oauth::TOKEN_BYTES_MAX
        )),
        Some(token) if !token.bytes().all(|b| b.is_ascii_graphic()) => {
            Err(format!("--bearer-token-env: the environment variable {name} holds a space or a control character"))
        }
        Some(token) => Ok(Some(token)),
    }
}

/// The HTTP front of one server.
struct Front {
    env: Env,
    runs: Rc<Runs>,
    shared: Rc<Shared>,
    /// Listening on loopback: Host and Origin must name loopback.
    loopback: bool,
    auth: Auth,
    sessions: RefCell<BTreeMap<String, Session>>,
    /// Counts session uses, to find the least recently used.
    uses: Cell<u64>,
    /// Sessions ended to make room for new ones.
    sessions_ended: Cell<u64>,
    /// Requests being answered: a drain waits for none left.
    exchanges: crate::base::sync::WaitGroup,
    /// The number of the next session stream (its events' ids begin with it).
    next_stream: Cell<u64>,
    /// Sessions' ended streams, kept for a while for resumptions.
    replay: Replay,
    /// Connections the listener closed at once (its table full) since the last line that said
    /// so, and when that line was written: a flood is told once in `REFUSED_CONNECTIONS_LOG_MS`.
    refused_connections: Cell<(u64, Option<u64>)>,
}

/// At most one line in this long tells of connections closed at once, a full table.
const REFUSED_CONNECTIONS_LOG_MS: u64 = 10_000;

/// A 2025-11-25 session: its state, and the exchanges in progress (for a cancellation sent
/// in another exchange).
struct Session {
    state: LegacySession,
    /// The principal that opened it: no other may use it.
    subject: Option<String>,
    last_use: u64,
    exchanges: Vec<Weak<Connection>>,
    /// Its streams in progress or kept for a resumption.
    streams: Vec<Weak<Exchange>>,
}

/// The listener's view of the front: a request is screened from its headers before its body
/// is read, then answered.
struct Served(Rc<Front>);

impl crate::env::InboundService for Served {
    fn screen(&self, head: &InboundRequest) -> Option<OutboundAnswer> {
        let refused = self.0.screen(head).err();
        if let Some(answer) = &refused {
            self.0.answered(head, answer);
        }
        refused
    }

    fn answer(&self, request: InboundRequest) -> LocalBoxFuture<'static, OutboundAnswer> {
        let front = Rc::clone(&self.0);
        Box::pin(async move {
            let head = InboundRequest {
                method: request.method.clone(),
                path: request.path.clone(),
                query: None,
                headers: Vec::new(),
                body: Vec::new(),
                peer: request.peer,
            };
            let answer = Rc::clone(&front).answer(request).await;
            front.answered(&head, &answer);
            front.runs.metrics.http_sessions.set(front.sessions.borrow().len() as i64);
            answer
        })
    }

    fn refused(&self, head: &InboundRequest, answer: &OutboundAnswer) {
        self.0.answered(head, answer);
    }

    fn connection_refused(&self, peer: core::net::IpAddr) {
        let front = &self.0;
        let (unlogged, logged_at) = front.refused_connections.get();
        let now = front.env.clock.monotonic_ms();
        if logged_at.is_some_and(|at| now.saturating_sub(at) < REFUSED_CONNECTIONS_LOG_MS) {
            front.refused_connections.set((unlogged + 1, logged_at));
            return;
        }
        let more = match unlogged {
            0 => String::new(),
            n => format!(" (and {n} more since the last such line)"),
        };
        let line = format!(
            "a connection from {peer} was closed at once: every place of the connection table is held by a \
             connection with a request in flight, or this address holds its share{more}"
        );
        front.env.log_at(crate::env::Level::Warn, &line, &[]);
        front.refused_connections.set((0, Some(now)));
    }
}

impl Front {
    /// Counts an answered request by status, and logs a refusal with its reason (a 503 while
    /// stopping is logged where it is decided).
    fn answered(&self, head: &InboundRequest, answer: &OutboundAnswer) {
        self.runs.metrics.count_http(answer.status);
        if answer.status < 400 || answer.status == 503 {
            return;
        }
        let reason: String = String::from_utf8_lossy(&answer.body).chars().take(300).collect();
        let reason = crate::broker::scrub(reason.trim(), &self.runs.secrets);
        // Scrubbed before it is cut: a secret the cut would split is still found whole.
        let path = crate::broker::scrub_decoded(&head.path, &self.runs.secrets);
        let path: String = path.chars().take(200).collect();
        let status = answer.status.to_string();
        let from = head.peer.map(|peer| format!(" from {peer}")).unwrap_or_default();
        let line = format!("HTTP {status} to {} {path}{from}: {reason}", head.method);
        self.env.log_at(crate::env::Level::Info, &line, &[("status", &status)]);
    }

    /// Everything decided from the request line and headers: the Host and Origin, the
    /// metadata document, the path, the credentials, the method. `Ok` carries the principal.
    fn screen(&self, request: &InboundRequest) -> Result<Option<Principal>, OutboundAnswer> {
        // The listener's buffer bounds a head arriving in pieces; one read can bring more.
        let head: usize =
            request.path.len() + request.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum::<usize>();
        if head > HEAD_BYTES_MAX {
            return Err(plain(431, &format!("the request's headers are over {HEAD_BYTES_MAX} bytes")));
        }
        self.check_host_and_origin(request)?;
        if let Some(health) = self.health(request) {
            return Err(health);
        }
        if let Some(metadata) = self.resource_metadata(request) {
            return Err(metadata);
        }
        if request.path == METRICS_PATH && matches!(self.auth, Auth::OAuth(_)) {
            // The metrics name every principal with a quota of its own: no principal may read
            // them. The operator's scrape goes to --metrics-listen on loopback.
            return Err(plain(404, "not found: with OAuth, metrics are served on --metrics-listen only"));
        }
        if request.path != ENDPOINT && request.path != METRICS_PATH {
            return Err(plain(404, &format!("not found: the MCP endpoint is {ENDPOINT}")));
        }
        let principal = self.authenticate(request)?;
        if request.path == METRICS_PATH && request.method != "GET" {
            let mut answer = plain(405, "metrics take GET");
            answer.headers.push(("allow".into(), "GET".into()));
            return Err(answer);
        }
        if request.path == METRICS_PATH {
            return Ok(principal);
        }
        if !matches!(request.method.as_str(), "POST" | "DELETE" | "GET") {
            let mut answer = plain(405, "this endpoint takes POST (GET to resume a stream, DELETE to end a session)");
            answer.headers.push(("allow".into(), "POST, GET, DELETE".into()));
            return Err(answer);
        }
        Ok(principal)
    }

    async fn answer(self: Rc<Self>, request: InboundRequest) -> OutboundAnswer {
        // Screened already; again for the principal (and a token that expired meanwhile).
        let principal = match self.screen(&request) {
            Ok(principal) => principal,
            Err(refused) => return refused,
        };
        if self.runs.is_draining() && starts_something(&request) {
            self.env.log(&format!("HTTP 503 to a {} request: the server is stopping", request.method));
            let mut answer =
                plain(503, "the server is stopping; nothing was run: send the request again once it is back");
            answer.headers.push(("retry-after".to_string(), STOPPING_RETRY_AFTER_S.to_string()));
            return answer;
        }
        if request.path == METRICS_PATH {
            return crate::protocol::metrics::scrape(&self.runs).await;
        }
        let _exchange = self.exchanges.enter();
        match request.method.as_str() {
            "POST" => self.post(request, principal).await,
            "GET" => self.resume(&request, principal.as_ref()),
            _ => self.end_session(&request, principal.as_ref()),
        }
    }

    /// Repeated routing and authorising headers are refused before any is read (where two
    /// readers pick different ones, a gateway could route or authorise another request than
    /// the one checked here), then DNS rebinding protection: on loopback, a request must name a loopback host, and a
    /// browser's Origin must be a loopback one. Beyond loopback, an Origin must match Host.
    fn check_host_and_origin(&self, request: &InboundRequest) -> Result<(), OutboundAnswer> {
        for name in SINGLE_HEADERS {
            if request.headers.iter().filter(|(sent, _)| sent == name).count() > 1 {
                return Err(plain(400, &format!("bad request: more than one {name} header; send it once")));
            }
        }
        let host = request.header("host").unwrap_or("");
        if self.loopback && !is_loopback_authority(host) {
            return Err(plain(403, "forbidden: the Host header does not name this loopback server"));
        }
        if let Some(origin) = request.header("origin") {
            let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
            let allowed = match authority {
                Some(authority) if self.loopback => is_loopback_authority(authority),
                Some(authority) => authority.eq_ignore_ascii_case(host),
                None => false,
            };
            if !allowed {
                return Err(plain(403, "forbidden: requests from this Origin are not accepted"));
            }
        }
        Ok(())
    }

    /// The request's principal: none without authentication or with the static token
    /// (compared in constant time), the token's subject with OAuth. A refusal never repeats
    /// what was sent.
    fn authenticate(&self, request: &InboundRequest) -> Result<Option<Principal>, OutboundAnswer> {
        let presented = request.header("authorization").and_then(|value| {
            let (scheme, token) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(token)
        });
        match &self.auth {
            Auth::None => Ok(None),
            Auth::Bearer(token) => {
                if presented.is_some_and(|presented| same_secret(presented.as_bytes(), token.as_bytes())) {
                    return Ok(None);
                }
                let mut answer = plain(401, "unauthorized: a valid bearer token is required");
                answer.headers.push(("www-authenticate".into(), "Bearer realm=\"warden\"".into()));
                Err(answer)
            }
            Auth::OAuth(oauth) => {
                let now_s = self.env.clock.now_ms() / 1000;
                let verified = match presented {
                    Some(token) => oauth.verify(token, now_s).map(Some),
                    None => Err("an access token is required".to_string()),
                };
                verified.map_err(|why| {
                    let mut challenge = format!("Bearer resource_metadata=\"{}\"", oauth.metadata_url());
                    if presented.is_some() {
                        challenge.push_str(", error=\"invalid_token\"");
                    }
                    let mut answer = plain(401, &format!("unauthorized: {why}"));
                    answer.headers.push(("www-authenticate".into(), challenge));
                    answer
                })
            }
        }
    }

    /// RFC 9728's protected resource metadata, public, when OAuth is configured.
    /// `/healthz` (the process answers) and `/readyz` (it takes calls: recovery is done, as
    /// the listener opens after it, no durable write failed, and it is not draining), for a
    /// supervisor's probes: unauthenticated, GET only, and they tell nothing else.
    fn health(&self, request: &InboundRequest) -> Option<OutboundAnswer> {
        let path = request.path.as_str();
        if path != HEALTH_PATH && path != READY_PATH {
            return None;
        }
        if request.method != "GET" {
            let mut answer = plain(405, "a health probe takes GET");
            answer.headers.push(("allow".to_string(), "GET".to_string()));
            return Some(answer);
        }
        let status = match () {
            _ if path == HEALTH_PATH => "alive",
            _ if self.runs.fatal.is_set() => "stopped: a durable write failed",
            _ if self.runs.is_draining() => "stopping",
            _ => "ready",
        };
        let code = if matches!(status, "alive" | "ready") { 200 } else { 503 };
        Some(json_answer(code, &json!({"status": status})))
    }

    fn resource_metadata(&self, request: &InboundRequest) -> Option<OutboundAnswer> {
        let Auth::OAuth(oauth) = &self.auth else { return None };
        let path = request.path.as_str();
        let wanted = path == "/.well-known/oauth-protected-resource"
            || path == format!("/.well-known/oauth-protected-resource{ENDPOINT}")
            || path == format!("/.well-known/oauth-protected-resource{}", oauth.audience_path());
        (wanted && request.method == "GET").then(|| json_answer(200, &oauth.metadata()))
    }

    async fn post(self: Rc<Self>, request: InboundRequest, principal: Option<Principal>) -> OutboundAnswer {
        let media_type = request.header("content-type").and_then(|t| t.split(';').next()).unwrap_or("").trim();
        if !media_type.eq_ignore_ascii_case("application/json") {
            return plain(415, "unsupported media type: the body must be application/json");
        }
        let accept = request.header("accept").unwrap_or("*/*");
        let reply = match (accepts(accept, "application/json"), accepts(accept, "text/event-stream")) {
            (true, true) => Reply::Either,
            (true, false) => Reply::Json,
            (false, true) => Reply::Stream,
            (false, false) => {
                return plain(406, "not acceptable: the client must accept application/json or text/event-stream")
            }
        };
        // The stdio classifier: the same limits (depth) and the same errors.
        match jsonrpc::classify(&Frame::Line(request.body.clone())) {
            Incoming::Invalid(error) => json_answer(400, &error.to_value()),
            // A response to a request the server sent on a session's stream.
            Incoming::Response { .. } | Incoming::Notification(_)
                if self.names_a_gone_session(&request, principal.as_ref()) =>
            {
                plain(404, "session not found: it ended or was never opened; send initialize again")
            }
            Incoming::Response { id, body } => {
                self.client_response(&request, &id, body, principal.as_ref());
                accepted()
            }
            Incoming::Notification(notification) => {
                self.notification(&request, notification, principal.as_ref());
                accepted()
            }
            Incoming::Request(call) => {
                let message: Value = serde_json::from_slice(&request.body).expect("classified as a request");
                self.request(&request, &message, &call.method, call.id, reply, principal).await
            }
        }
    }

    /// Whether a notification or a response names a session that is not (or not this
    /// principal's): it reaches nobody, and the client must hear so.
    fn names_a_gone_session(&self, request: &InboundRequest, principal: Option<&Principal>) -> bool {
        let Some(session_id) = request.header("mcp-session-id") else { return false };
        let subject = principal.map(|p| p.subject.as_str());
        self.sessions.borrow().get(session_id).is_none_or(|session| session.subject.as_deref() != subject)
    }

    /// A notification: a cancellation reaches the session's exchanges in progress; others
    /// are taken and dropped, never answered.
    fn notification(&self, request: &InboundRequest, notification: Notification, principal: Option<&Principal>) {
        if notification.method != "notifications/cancelled" {
            return;
        }
        let Some(session_id) = request.header("mcp-session-id") else { return };
        let sessions = self.sessions.borrow();
        let Some(session) = sessions.get(session_id) else { return };
        if session.subject.as_deref() != principal.map(|p| p.subject.as_str()) {
            return;
        }
        for exchange in session.exchanges.iter().filter_map(Weak::upgrade) {
            exchange.handle_notification(Notification {
                method: notification.method.clone(),
                params: notification.params.clone(),
            });
        }
    }

    async fn request(
        self: Rc<Self>,
        request: &InboundRequest,
        message: &Value,
        method: &str,
        id: Value,
        reply: Reply,
        principal: Option<Principal>,
    ) -> OutboundAnswer {
        if let Some(refused) = self.insufficient_scope(message, method, principal.as_ref()) {
            return refused;
        }
        let subject = principal.as_ref().map(|p| p.subject.clone());
        let modern = message
            .pointer("/params/_meta")
            .and_then(Value::as_object)
            .is_some_and(|m| m.contains_key(META_PROTOCOL_VERSION));
        let session_header = request.header("mcp-session-id");
        // Errors of a request outside a session carry HTTP statuses (2026-07-28 over HTTP); in
        // a 2025-11-25 session a 404 would mean the session is gone, so they stay 200 there.
        let stateless = modern || session_header.is_none();
        let (session_id, state) = match self.session_of(request, message, (method, &id), modern, subject.as_deref()) {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let state_before = state;
        // A session's call streamed live gets a stream number: its events carry ids, it can be
        // resumed, and its client can be asked for input on it.
        let live = reply != Reply::Json && STREAMED_METHODS.contains(&method);
        let stream = (live && session_id.is_some()).then(|| {
            let number = self.next_stream.get();
            self.next_stream.set(number + 1);
            number
        });
        let (exchange, connection) = self.open_exchange(request, (session_id.as_deref(), state), stream, principal);
        connection
            .allow_asking(method == "initialize" || stream.is_some(), format!("warden-input-{}-", stream.unwrap_or(0)));
        let body = serde_json::to_vec(message).expect("JSON values serialise");
        // A client that closes its connection first drops this future: its calls are
        // cancelled (what a run has begun goes on, as after notifications/cancelled).
        let mut on_close = CancelOnDrop { connection: Rc::clone(&connection), armed: true };
        let handled = Rc::clone(&connection);
        let mut handling: LocalBoxFuture<'static, ()> = Box::pin(async move { handled.handle_message(body).await });
        if live {
            let wanted = Box::pin(exchange.stream_wanted());
            if let Either::Right(start) = select(&mut handling, wanted).await {
                on_close.armed = stream.is_none();
                return self.stream_live(exchange, handling, start, on_close);
            }
        } else {
            (&mut handling).await;
        }
        on_close.armed = false;
        let state = connection.legacy_session();
        let extra_headers = match session_id {
            Some(session_id) => match self.keep_session(session_id, method, (state_before, state), subject) {
                Ok(headers) => headers,
                Err(refused) => return refused,
            },
            None => Vec::new(),
        };
        let mut answer = exchange.answer(reply);
        if stateless && answer.status == 200 {
            answer.status = exchange.error_status().unwrap_or(200);
        }
        answer.headers.extend(extra_headers);
        answer
    }

    /// The exchange of a request and the connection serving it, known to its session (for a
    /// cancellation, a client's response or a resumption sent in another request).
    fn open_exchange(
        &self,
        request: &InboundRequest,
        (session_id, state): (Option<&str>, LegacySession),
        stream: Option<u64>,
        principal: Option<Principal>,
    ) -> (Rc<Exchange>, Rc<Connection>) {
        let exchange = Exchange::new(&self.env.clock, stream);
        let connection =
            Connection::with_outlet(Rc::clone(&self.runs), &self.shared, exchange.clone(), state, principal);
        *connection.traceparent.borrow_mut() = request.header("traceparent").map(str::to_string);
        let mut sessions = self.sessions.borrow_mut();
        if let Some(session) = session_id.and_then(|id| sessions.get_mut(id)) {
            session.exchanges.retain(|exchange| exchange.strong_count() > 0);
            session.exchanges.push(Rc::downgrade(&connection));
            session.streams.retain(|stream| stream.strong_count() > 0);
            session.streams.push(Rc::downgrade(&exchange));
        }
        drop(sessions);
        (exchange, connection)
    }

    /// Answers with a live stream of the exchange's messages: the call goes on in a task of
    /// its own, and the stream follows it. `on_close` goes with the stream (armed, a client
    /// closing it cancels the calls; a session's client may resume it instead).
    fn stream_live(
        self: &Rc<Self>,
        exchange: Rc<Exchange>,
        handling: LocalBoxFuture<'static, ()>,
        start: StreamStart,
        on_close: CancelOnDrop,
    ) -> OutboundAnswer {
        let guard = self.exchanges.enter();
        let front = Rc::clone(self);
        let ended = Rc::clone(&exchange);
        self.env.spawn.spawn(Box::pin(async move {
            let _guard = guard;
            handling.await;
            ended.end();
            if ended.stream().is_some() {
                front.replay.keep(ended, front.env.clock.monotonic_ms());
            }
        }));
        exchange.live(start, Some(Box::new(on_close)))
    }

    /// A GET: the rest of a session's stream after the event `Last-Event-ID` names. This
    /// server sends nothing outside a request's stream, so a GET without one opens none.
    fn resume(&self, request: &InboundRequest, principal: Option<&Principal>) -> OutboundAnswer {
        let (Some(session_id), Some(last)) = (request.header("mcp-session-id"), request.header("last-event-id")) else {
            let mut answer = plain(
                405,
                "this server sends messages only on a request's own stream; GET resumes one, with Mcp-Session-Id and Last-Event-ID",
            );
            answer.headers.push(("allow".into(), "POST, GET, DELETE".into()));
            return answer;
        };
        if !accepts(request.header("accept").unwrap_or("*/*"), "text/event-stream") {
            return plain(406, "not acceptable: a resumed stream is text/event-stream");
        }
        self.replay.expire(self.env.clock.monotonic_ms());
        let sessions = self.sessions.borrow();
        let subject = principal.map(|p| p.subject.as_str());
        let Some(session) = sessions.get(session_id).filter(|s| s.subject.as_deref() == subject) else {
            return plain(404, "session not found: it ended or was never opened; send initialize again");
        };
        let Some((number, seq)) = exchange::parse_event_id(last) else {
            return plain(400, "bad request: Last-Event-ID is not an event id this server gave");
        };
        if let Some(refused) = exchange::session_readers_refusal(&session.streams) {
            return refused;
        }
        match exchange::find_stream(&session.streams, number) {
            Some(stream) => stream.resumed(seq),
            None => plain(
                410,
                &format!(
                    "the stream of event {last} is no longer kept (an ended stream is kept {} s): ask \
                     warden_run_status about its run, or call again",
                    exchange::REPLAY_WINDOW_MS / 1000
                ),
            ),
        }
    }

    /// A client's response to a request the server sent on one of the session's streams.
    fn client_response(
        &self,
        request: &InboundRequest,
        id: &Value,
        body: serde_json::Map<String, Value>,
        principal: Option<&Principal>,
    ) {
        let Some(session_id) = request.header("mcp-session-id") else { return };
        let sessions = self.sessions.borrow();
        let Some(session) = sessions.get(session_id) else { return };
        if session.subject.as_deref() != principal.map(|p| p.subject.as_str()) {
            return;
        }
        let waiting = session.exchanges.iter().filter_map(Weak::upgrade).find(|exchange| exchange.awaits(id));
        match waiting {
            Some(exchange) => exchange.response(id, body),
            None => self.env.log("dropped a response from the client to no request of this server's"),
        }
    }

    /// The session a request belongs to, and its state: none for a 2026-07-28 request (whose
    /// headers must match its body) or one outside any session, a new one for `initialize`;
    /// a refusal when the headers disagree or the session is gone.
    fn session_of(
        &self,
        request: &InboundRequest,
        message: &Value,
        (method, id): (&str, &Value),
        modern: bool,
        subject: Option<&str>,
    ) -> Result<(Option<String>, LegacySession), OutboundAnswer> {
        if modern {
            let mirrored =
                headers_match(request, message, method).and_then(|()| self.params_match(request, message, method));
            if let Err(mismatch) = mirrored {
                let error = jsonrpc::RpcError::new(Some(id.clone()), jsonrpc::HEADER_MISMATCH, mismatch);
                return Err(json_answer(400, &error.to_value()));
            }
            return Ok((None, LegacySession::default()));
        }
        if method == "initialize" {
            return Ok((Some(self.env.new_run_id()), LegacySession::default()));
        }
        match request.header("mcp-session-id") {
            // Served outside any session: the connection refuses it (-32602: send
            // initialize first, or use the per-request envelope), with its id.
            None => Ok((None, LegacySession::default())),
            Some(session_id) => match self.touch_session(session_id, subject) {
                Some(state) => Ok((Some(session_id.to_string()), state)),
                None => Err(plain(404, "session not found: it ended or was never opened; send initialize again")),
            },
        }
    }

    /// A 2026-07-28 call's `Mcp-Param-*` headers against the arguments its tool mirrors in them
    /// (SEP-2243): each present argument's header must carry its value (a `=?base64?...?=`
    /// value decoded, strictly), and no header may name an argument the call leaves out.
    fn params_match(&self, request: &InboundRequest, message: &Value, method: &str) -> Result<(), String> {
        if method != "tools/call" {
            return Ok(());
        }
        let name = message.pointer("/params/name").and_then(Value::as_str).unwrap_or("");
        let Some(tool) = self.runs.catalog.callable(name) else { return Ok(()) };
        for (argument, header) in &tool.config.headers {
            let value = message.pointer(&format!("/params/arguments/{argument}")).filter(|value| !value.is_null());
            let sent = request.header(&format!("mcp-param-{}", header.to_ascii_lowercase()));
            let expected = value.map(|value| match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            });
            let sent = match sent.map(decoded_param) {
                Some(Ok(sent)) => Some(sent),
                Some(Err(why)) => return Err(format!("the Mcp-Param-{header} header {why}")),
                None => None,
            };
            if sent != expected {
                return Err(format!("the Mcp-Param-{header} header does not match the argument `{argument}`"));
            }
        }
        Ok(())
    }

    /// After an exchange in a session: an `initialize` that succeeded opens it (its id goes
    /// back as a header); any other exchange writes back the state it changed.
    fn keep_session(
        &self,
        session_id: String,
        method: &str,
        (before, after): (LegacySession, LegacySession),
        subject: Option<String>,
    ) -> Result<Vec<(String, String)>, OutboundAnswer> {
        if method == "initialize" {
            if after.initialized {
                if !self.open_session(&session_id, after, subject) {
                    return Err(busy_sessions());
                }
                return Ok(vec![("mcp-session-id".to_string(), session_id)]);
            }
        } else if after != before {
            // Only an exchange that changed the session (`logging/setLevel`) writes it
            // back: a long call ending later must not undo a change made meanwhile.
            if let Some(session) = self.sessions.borrow_mut().get_mut(&session_id) {
                session.state = after;
            }
        }
        Ok(Vec::new())
    }

    /// A call or a read whose tool or resource needs scopes the principal's token lacks: 403
    /// with the scopes wanted, so the client can ask its authorization server for them
    /// (step-up). The call pipeline refuses it too, for any transport.
    fn insufficient_scope(
        &self,
        message: &Value,
        method: &str,
        principal: Option<&Principal>,
    ) -> Option<OutboundAnswer> {
        let principal = principal?;
        let catalog = &self.runs.catalog;
        let tool = match method {
            "tools/call" => catalog.callable(message.pointer("/params/name")?.as_str()?),
            "resources/read" => {
                crate::call::surface::find(catalog, message.pointer("/params/uri")?.as_str()?).map(|(tool, _)| tool)
            }
            _ => None,
        }?;
        let missing = principal.missing(&tool.config.scopes);
        if missing.is_empty() {
            return None;
        }
        let wanted = tool.config.scopes.join(" ");
        let mut answer = plain(403, &format!("forbidden: the token lacks the scope(s) {}", missing.join(" ")));
        answer
            .headers
            .push(("www-authenticate".into(), format!("Bearer error=\"insufficient_scope\", scope=\"{wanted}\"")));
        Some(answer)
    }

    /// The session's state, marked as just used; `None` for an unknown session, or one
    /// another principal opened (it is not theirs to use, nor to learn exists).
    fn touch_session(&self, session_id: &str, subject: Option<&str>) -> Option<LegacySession> {
        let use_number = self.uses.get() + 1;
        self.uses.set(use_number);
        let mut sessions = self.sessions.borrow_mut();
        let session = sessions.get_mut(session_id).filter(|session| session.subject.as_deref() == subject)?;
        session.last_use = use_number;
        Some(session.state)
    }

    /// Keeps a new session, ending the least recently used idle one (no exchange in
    /// progress) past `SESSIONS_MAX`, or past `SESSIONS_PER_PRINCIPAL_MAX` of an authenticated
    /// principal's own; false when every session in the way is busy (the new one is refused).
    fn open_session(&self, session_id: &str, state: LegacySession, subject: Option<String>) -> bool {
        let use_number = self.uses.get() + 1;
        self.uses.set(use_number);
        let mut sessions = self.sessions.borrow_mut();
        // A principal that opens too many ends its own oldest first; past the server's
        // limit, the least recently used of all ends. Without principals, the server's limit.
        let own = sessions.values().filter(|s| subject.is_some() && s.subject == subject).count();
        let from_whom = (own >= SESSIONS_PER_PRINCIPAL_MAX).then_some(&subject);
        if own >= SESSIONS_PER_PRINCIPAL_MAX || sessions.len() >= SESSIONS_MAX {
            let oldest = sessions
                .iter()
                .filter(|(_, s)| from_whom.is_none_or(|subject| &s.subject == subject))
                .filter(|(_, s)| s.exchanges.iter().all(|exchange| exchange.strong_count() == 0))
                .min_by_key(|(_, s)| s.last_use)
                .map(|(id, _)| id.clone());
            let Some(oldest) = oldest else { return false };
            sessions.remove(&oldest);
            let ended = self.sessions_ended.get() + 1;
            self.sessions_ended.set(ended);
            // Logged at the first and then every hundredth: a flood of sessions must not
            // flood the log.
            if ended % 100 == 1 {
                self.env.log(&format!(
                    "HTTP sessions at their limit ({SESSIONS_PER_PRINCIPAL_MAX} a principal, {SESSIONS_MAX} in all): \
                     {ended} ended so far, the least recently used idle one first"
                ));
            }
        }
        let session = Session { state, subject, last_use: use_number, exchanges: Vec::new(), streams: Vec::new() };
        sessions.insert(session_id.to_string(), session);
        true
    }

    fn end_session(&self, request: &InboundRequest, principal: Option<&Principal>) -> OutboundAnswer {
        let Some(session_id) = request.header("mcp-session-id") else {
            return plain(400, "bad request: DELETE ends a session named by Mcp-Session-Id");
        };
        let mut sessions = self.sessions.borrow_mut();
        let theirs =
            sessions.get(session_id).is_some_and(|s| s.subject.as_deref() == principal.map(|p| p.subject.as_str()));
        if !theirs {
            return plain(404, "session not found");
        }
        // Its calls are cancelled (what a run has begun goes on) and its streams end.
        let session = sessions.remove(session_id).expect("found above");
        drop(sessions);
        for connection in session.exchanges.iter().filter_map(Weak::upgrade) {
            connection.client_left();
        }
        for stream in session.streams.iter().filter_map(Weak::upgrade) {
            stream.close();
        }
        OutboundAnswer { status: 204, headers: vec![], body: vec![], more: None }
    }
}

/// A 2026-07-28 request's headers against its body (SEP-2243): `Mcp-Method` always; for a
/// call, a prompt or a read, `Mcp-Name` (the tool's or prompt's name, or the URI); and
/// `MCP-Protocol-Version`, when sent, the envelope's version.
fn headers_match(request: &InboundRequest, message: &Value, method: &str) -> Result<(), String> {
    let version = message.pointer("/params/_meta").and_then(|meta| meta.get(META_PROTOCOL_VERSION));
    if let Some(header) = request.header("mcp-protocol-version") {
        if version.and_then(Value::as_str) != Some(header) {
            return Err("the MCP-Protocol-Version header does not match the body's protocol version".into());
        }
    }
    match request.header("mcp-method") {
        Some(header) if header == method => {}
        Some(_) => return Err("the Mcp-Method header does not match the body's method".into()),
        None => return Err("a 2026-07-28 request over HTTP needs the Mcp-Method header".into()),
    }
    let named = match method {
        "tools/call" | "prompts/get" => message.pointer("/params/name"),
        "resources/read" => message.pointer("/params/uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => message.pointer("/params/taskId"),
        _ => return Ok(()),
    };
    let Some(named) = named.and_then(Value::as_str) else { return Ok(()) };
    match request.header("mcp-name") {
        Some(header) if header == named => Ok(()),
        Some(_) => Err("the Mcp-Name header does not match the body's name".into()),
        None => Err(format!("a 2026-07-28 {method} over HTTP needs the Mcp-Name header")),
    }
}

/// A `Mcp-Param-*` header's value: `=?base64?...?=` decoded (standard alphabet, padding
/// required, UTF-8), anything else as it is.
fn decoded_param(value: &str) -> Result<String, &'static str> {
    use base64::Engine;
    let Some(encoded) = value.strip_prefix("=?base64?").and_then(|rest| rest.strip_suffix("?=")) else {
        return Ok(value.to_string());
    };
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).map_err(|_| "is not valid Base64")?;
    String::from_utf8(bytes).map_err(|_| "does not decode to UTF-8 text")
}

/// The requests whose answer may be a live stream: the ones that start runs.
const STREAMED_METHODS: [&str; 3] = ["tools/call", "resources/read", "prompts/get"];

/// Headers a request may carry once: what routes it, authorises it or names its session.
const SINGLE_HEADERS: [&str; 8] = [
    "host",
    "origin",
    "authorization",
    "mcp-method",
    "mcp-name",
    "mcp-protocol-version",
    "mcp-session-id",
    "last-event-id",
];

/// `localhost`, `127.0.0.1` (any 127/8 address), `[::1]`, each alone or with `:port`, and
/// nothing else (no userinfo, no trailing text).
/// Whether a request to a loopback listener served without authentication (the metrics, the
/// console) names it: its Host a loopback one and a browser's Origin, if any, too; a page
/// elsewhere that rebinds its name to loopback is refused (DNS rebinding).
pub fn names_a_loopback_listener(head: &InboundRequest) -> bool {
    let origin = head.header("origin").map(|origin| origin.split_once("://").map_or("", |(_, rest)| rest));
    is_loopback_authority(head.header("host").unwrap_or("")) && origin.is_none_or(is_loopback_authority)
}

pub(super) fn is_loopback_authority(authority: &str) -> bool {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((inside, after)) => (format!("[{inside}]"), after),
            None => return false,
        },
        None => match authority.find(':') {
            Some(at) => (authority[..at].to_string(), &authority[at..]),
            None => (authority.to_string(), ""),
        },
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| (1..=5).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()));
    let host = host.to_ascii_lowercase();
    port_ok
        && (host == "localhost"
            || host == "[::1]"
            || host.parse::<core::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback()))
}

/// Equal secrets, compared without an early exit on the first differing byte.
fn same_secret(presented: &[u8], expected: &[u8]) -> bool {
    let mut difference = (presented.len() != expected.len()) as u8;
    for (index, byte) in expected.iter().enumerate() {
        difference |= byte ^ presented.get(index).copied().unwrap_or(0);
    }
    difference == 0
}

/// Whether an Accept header takes `wanted` (a `q=0` range refuses it).
fn accepts(accept: &str, wanted: &str) -> bool {
    let family = wanted.split('/').next().unwrap_or("");
    accept.split(',').any(|range| {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let refused = parts.any(|p| p.trim().strip_prefix("q=").is_some_and(|q| q.trim().parse::<f32>() == Ok(0.0)));
        !refused && (media == wanted || media == "*/*" || media == format!("{family}/*"))
    })
}

/// An `initialize` refused: every session is busy.
fn busy_sessions() -> OutboundAnswer {
    let mut answer =
        plain(503, "every session is in use (a call in progress in each); end one with DELETE or try again later");
    answer.headers.push(("retry-after".to_string(), STOPPING_RETRY_AFTER_S.to_string()));
    answer
}

pub(super) fn accepted() -> OutboundAnswer {
    OutboundAnswer { status: 202, headers: vec![], body: vec![], more: None }
}

pub(super) fn plain(status: u16, text: &str) -> OutboundAnswer {
    json_answer(status, &json!({"error": text}))
}

fn json_answer(status: u16, value: &Value) -> OutboundAnswer {
    json_bytes(status, serde_json::to_vec(value).expect("JSON values serialise"))
}

pub(super) fn json_bytes(status: u16, body: Vec<u8>) -> OutboundAnswer {
    OutboundAnswer { status, headers: vec![("content-type".into(), "application/json".into())], body, more: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_authorities_are_told_from_others() {
        for good in ["localhost", "localhost:8080", "127.0.0.1", "127.0.0.1:1", "[::1]", "[::1]:80", "LOCALHOST:9"] {
            assert!(is_loopback_authority(good), "{good}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:80",
            "localhost.evil.example",
            "10.0.0.1:80",
            "[::2]:80",
            "127.0.0.1.evil",
            "localhost:evil.com",
            "[::1]evil.com",
            "localhost:80@evil.com",
            "[::1",
            "127.0.0.1:80.evil.com",
            "localhost:123456",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
    }

    #[test]
    fn accept_headers_are_read_with_their_weights() {
        assert!(accepts("application/json, text/event-stream", "text/event-stream"));
        assert!(accepts("*/*", "application/json") && accepts("application/*", "application/json"));
        assert!(!accepts("application/json;q=0, text/event-stream", "application/json"));
        assert!(!accepts("text/html", "application/json"));
    }

    /// SEP-2243's encoding of a mirrored value: `=?base64?...?=` decoded strictly, anything
    /// else taken as it is.
    #[test]
    fn a_mirrored_header_is_decoded_strictly() {
        assert_eq!(decoded_param("=?base64?SGVsbG8=?="), Ok("Hello".to_string()));
        assert!(decoded_param("=?base64?SGVsbG8?=").is_err(), "padding is required");
        assert!(decoded_param("=?base64?SGVs!!!bG8=?=").is_err());
        assert!(decoded_param("=?base64?/w==?=").is_err(), "not UTF-8");
        assert_eq!(decoded_param("SGVsbG8="), Ok("SGVsbG8=".to_string()));
        assert_eq!(decoded_param("=?base64?SGVsbG8="), Ok("=?base64?SGVsbG8=".to_string()));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same_secret(b"0123456789abcde", b"0123456789abcdef"));
        assert!(!same_secret(b"0123456789abcdefX", b"0123456789abcdef"));
        assert!(!same_secret(b"", b"0123456789abcdef"));
    }
}
