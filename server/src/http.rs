//! Warden as a remote server: MCP's Streamable HTTP on one endpoint, `/mcp`, in both eras,
//! over the same call pipeline, journals, ledger and recovery as stdio (seed 004).
//!
//! Each POST carries one JSON-RPC message and is served by a `Connection` of its own whose
//! messages are collected for the answer: the answer alone as `application/json`, or a
//! call's notifications and then its answer as an SSE stream when the client accepts one.
//! A 2026-07-28 request is self-contained, and its `Mcp-Method` and `Mcp-Name` headers must
//! match its body. A 2025-11-25 client opens a session with `initialize` and names it in
//! `Mcp-Session-Id` afterwards. A client that closes its connection before the answer
//! cancels the request's calls (a run already begun goes on, as after a cancellation).
//!
//! Before anything else: the endpoint's path, the Host and Origin headers (on loopback, DNS
//! rebinding protection), then the bearer token when one is configured. Listening beyond
//! loopback without a token is refused at start.

use core::net::SocketAddr;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::rc::{Rc, Weak};

use serde_json::{json, Value};

use crate::commands::open_server;
use crate::env::{Env, InboundRequest, ListenLimits, LocalBoxFuture, OutboundAnswer};
use crate::oauth::{OAuthConfig, Principal};
use crate::protocol::framing::LINE_BYTES_MAX;
use crate::protocol::jsonrpc::{self, Notification};
use crate::protocol::{Connection, LegacySession, Outlet, Shared, META_PROTOCOL_VERSION};
use crate::runs::Runs;

/// The one MCP endpoint.
pub const ENDPOINT: &str = "/mcp";
/// Connections open at once; one more is closed at once.
pub const CONNECTIONS_MAX: usize = 256;
/// A client must send a request's headers within this time.
pub const HEADER_READ_MS: u64 = 10_000;
/// 2025-11-25 sessions kept; a new one past this ends the least recently used.
pub const SESSIONS_MAX: usize = 1_024;
/// Messages one exchange keeps for its answer (a call's notifications, then its answer);
/// past this the oldest notifications are dropped.
pub const EXCHANGE_MESSAGES_MAX: usize = 256;
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
}

/// Where access tokens come from and whom they are for.
#[derive(Clone, Debug)]
pub struct OAuthOptions {
    pub issuer: String,
    /// This server's resource URL (ending in /mcp): the tokens' audience.
    pub audience: String,
    /// The issuer's public keys, a JWKS file.
    pub jwks_file: std::path::PathBuf,
}

/// How requests are authenticated.
enum Auth {
    /// Loopback only: whoever can reach the port.
    None,
    /// One static token: one trusted client, no principal (as over stdio).
    Bearer(String),
    /// Access tokens: each request's principal is the token's subject.
    OAuth(OAuthConfig),
}

/// Serves the manifest's tools over Streamable HTTP until listening fails or a durable
/// write fails.
pub async fn serve_http(env: &Env, manifest_path: &Path, options: HttpOptions) -> Result<(), String> {
    let auth = match (&options.oauth, &options.bearer_token_env) {
        (Some(_), Some(_)) => return Err("--bearer-token-env and --oauth-*: choose one way to authenticate".into()),
        (Some(oauth), None) => {
            Auth::OAuth(OAuthConfig::load(env, &oauth.issuer, &oauth.audience, &oauth.jwks_file).await?)
        }
        (None, _) => match bearer_token(env, &options)? {
            Some(token) => Auth::Bearer(token),
            None => Auth::None,
        },
    };
    let secrets = match &auth {
        Auth::Bearer(token) => vec![token.clone()],
        _ => Vec::new(),
    };
    let opened = open_server(env, manifest_path, secrets).await?;
    let front = Rc::new(Front {
        env: env.clone(),
        shared: Shared::new(&opened.runs),
        runs: Rc::clone(&opened.runs),
        loopback: options.listen.ip().is_loopback(),
        auth,
        sessions: RefCell::new(BTreeMap::new()),
        uses: Cell::new(0),
    });
    let handler_front = Rc::clone(&front);
    let handler: crate::env::InboundHandler = Rc::new(move |request| {
        let front = Rc::clone(&handler_front);
        Box::pin(async move { front.answer(request).await }) as LocalBoxFuture<'static, OutboundAnswer>
    });
    let limits = ListenLimits {
        body_bytes_max: LINE_BYTES_MAX,
        connections_max: CONNECTIONS_MAX,
        header_read_ms: HEADER_READ_MS,
    };
    let log_env = env.clone();
    let ready = Box::new(move |bound: SocketAddr| log_env.log(&format!("listening on http://{bound}{ENDPOINT}")));
    let served = env.http.serve(options.listen, limits, handler, ready);
    let stopped = Box::pin(front.runs.fatal.wait());
    match crate::sync::select(served, stopped).await {
        crate::sync::Either::Left(Ok(())) => Ok(()),
        crate::sync::Either::Left(Err(error)) => Err(format!("listening on {} failed: {error}", options.listen)),
        crate::sync::Either::Right(()) => {
            Err(opened.runs.fatal_message().unwrap_or_else(|| "a durable write failed".to_string()))
        }
    }
}

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
}

/// A 2025-11-25 session: its state, and the exchanges in progress (for a cancellation sent
/// in another exchange).
struct Session {
    state: LegacySession,
    /// The principal that opened it: no other may use it.
    subject: Option<String>,
    last_use: u64,
    exchanges: Vec<Weak<Connection>>,
}

impl Front {
    async fn answer(self: Rc<Self>, request: InboundRequest) -> OutboundAnswer {
        if let Err(refused) = self.check_host_and_origin(&request) {
            return refused;
        }
        if let Some(metadata) = self.resource_metadata(&request) {
            return metadata;
        }
        if request.path != ENDPOINT {
            return plain(404, &format!("not found: the MCP endpoint is {ENDPOINT}"));
        }
        let principal = match self.authenticate(&request) {
            Ok(principal) => principal,
            Err(refused) => return refused,
        };
        match request.method.as_str() {
            "POST" => self.post(request, principal).await,
            "DELETE" => self.end_session(&request, principal.as_ref()),
            _ => {
                let mut answer =
                    plain(405, "this endpoint takes POST (and DELETE to end a session); it opens no stream");
                answer.headers.push(("allow".into(), "POST, DELETE".into()));
                answer
            }
        }
    }

    /// DNS rebinding protection: on loopback, a request must name a loopback host, and a
    /// browser's Origin must be a loopback one. Beyond loopback, an Origin must match Host.
    fn check_host_and_origin(&self, request: &InboundRequest) -> Result<(), OutboundAnswer> {
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
        let presented = request.header("authorization").and_then(|value| value.strip_prefix("Bearer "));
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
    fn resource_metadata(&self, request: &InboundRequest) -> Option<OutboundAnswer> {
        let Auth::OAuth(oauth) = &self.auth else { return None };
        let path = request.path.as_str();
        let wanted = path == "/.well-known/oauth-protected-resource"
            || path == format!("/.well-known/oauth-protected-resource{ENDPOINT}");
        (wanted && request.method == "GET").then(|| json_answer(200, &oauth.metadata()))
    }

    async fn post(self: Rc<Self>, request: InboundRequest, principal: Option<Principal>) -> OutboundAnswer {
        let json_body =
            request.header("content-type").is_some_and(|t| t.to_ascii_lowercase().starts_with("application/json"));
        if !json_body {
            return plain(415, "unsupported media type: the body must be application/json");
        }
        let accept = request.header("accept").unwrap_or("*/*").to_ascii_lowercase();
        let takes_json = ["application/json", "*/*", "application/*"].iter().any(|t| accept.contains(t));
        let takes_stream = accept.contains("text/event-stream");
        if !takes_json && !takes_stream {
            return plain(406, "not acceptable: the client must accept application/json or text/event-stream");
        }
        let message: Value = match serde_json::from_slice(&request.body) {
            Ok(message) => message,
            Err(error) => {
                let error =
                    jsonrpc::RpcError::new(None, jsonrpc::PARSE_ERROR, format!("the body is not JSON: {error}"));
                return json_answer(400, &error.to_value());
            }
        };
        let Value::Object(fields) = &message else {
            let error = jsonrpc::RpcError::new(
                None,
                jsonrpc::INVALID_REQUEST,
                "one JSON-RPC message per request; batches are not supported",
            );
            return json_answer(400, &error.to_value());
        };
        let method = fields.get("method").and_then(Value::as_str).map(str::to_string);
        let id = fields.get("id").cloned();
        match (method, id) {
            (Some(method), Some(id)) => self.request(&request, &message, &method, id, takes_stream, principal).await,
            (Some(method), None) => {
                self.notification(&request, &message, &method, principal.as_ref());
                accepted()
            }
            // A response: this server sends no requests, so there is nothing to match it to.
            (None, _) => accepted(),
        }
    }

    /// A notification: a cancellation reaches the session's exchanges in progress; others
    /// are taken and dropped, never answered.
    fn notification(&self, request: &InboundRequest, message: &Value, method: &str, principal: Option<&Principal>) {
        if method != "notifications/cancelled" {
            return;
        }
        let Some(session_id) = request.header("mcp-session-id") else { return };
        let sessions = self.sessions.borrow();
        let Some(session) = sessions.get(session_id) else { return };
        if session.subject.as_deref() != principal.map(|p| p.subject.as_str()) {
            return;
        }
        for exchange in session.exchanges.iter().filter_map(Weak::upgrade) {
            let params = message.get("params").and_then(Value::as_object).cloned();
            exchange.handle_notification(Notification { method: method.to_string(), params });
        }
    }

    async fn request(
        self: Rc<Self>,
        request: &InboundRequest,
        message: &Value,
        method: &str,
        id: Value,
        takes_stream: bool,
        principal: Option<Principal>,
    ) -> OutboundAnswer {
        let subject = principal.as_ref().map(|p| p.subject.clone());
        let modern = message
            .pointer("/params/_meta")
            .and_then(Value::as_object)
            .is_some_and(|m| m.contains_key(META_PROTOCOL_VERSION));
        let session_header = request.header("mcp-session-id");
        // Errors of a request outside a session carry HTTP statuses (2026-07-28 over HTTP); in
        // a 2025-11-25 session a 404 would mean the session is gone, so they stay 200 there.
        let stateless = modern || session_header.is_none();
        let (session_id, state) = if modern {
            if let Err(mismatch) = headers_match(request, message, method) {
                let error = jsonrpc::RpcError::new(Some(id), jsonrpc::HEADER_MISMATCH, mismatch);
                return json_answer(400, &error.to_value());
            }
            (None, LegacySession::default())
        } else if method == "initialize" {
            (Some(self.env.new_run_id()), LegacySession::default())
        } else {
            match session_header {
                // Served outside any session: the connection refuses it (-32602: send
                // initialize first, or use the per-request envelope), with its id.
                None => (None, LegacySession::default()),
                Some(session_id) => match self.touch_session(session_id, subject.as_deref()) {
                    Some(state) => (Some(session_id.to_string()), state),
                    None => {
                        return plain(404, "session not found: it ended or was never opened; send initialize again")
                    }
                },
            }
        };
        let outlet = Rc::new(Collected::default());
        let connection = Connection::with_outlet(Rc::clone(&self.runs), &self.shared, outlet.clone(), state, principal);
        if let Some(session_id) = &session_id {
            if let Some(session) = self.sessions.borrow_mut().get_mut(session_id) {
                session.exchanges.retain(|exchange| exchange.strong_count() > 0);
                session.exchanges.push(Rc::downgrade(&connection));
            }
        }
        let body = serde_json::to_vec(message).expect("JSON values serialise");
        // A client that closes its connection first drops this future: its calls are
        // cancelled (what a run has begun goes on, as after notifications/cancelled).
        let mut on_close = CancelOnDrop { connection: Rc::clone(&connection), armed: true };
        connection.handle_message(body).await;
        on_close.armed = false;
        let state = connection.legacy_session();
        let mut extra_headers = Vec::new();
        if let Some(session_id) = session_id {
            if method == "initialize" {
                if state.initialized {
                    self.open_session(&session_id, state, subject);
                    extra_headers.push(("mcp-session-id".to_string(), session_id));
                }
            } else if let Some(session) = self.sessions.borrow_mut().get_mut(&session_id) {
                session.state = state;
            }
        }
        let mut answer = outlet.answer(takes_stream);
        if stateless && answer.status == 200 {
            answer.status = outlet.error_status().unwrap_or(200);
        }
        answer.headers.extend(extra_headers);
        answer
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

    /// Keeps a new session, ending the least recently used one past `SESSIONS_MAX`.
    fn open_session(&self, session_id: &str, state: LegacySession, subject: Option<String>) {
        let use_number = self.uses.get() + 1;
        self.uses.set(use_number);
        let mut sessions = self.sessions.borrow_mut();
        if sessions.len() >= SESSIONS_MAX {
            let oldest = sessions.iter().min_by_key(|(_, s)| s.last_use).map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
                self.env.log(&format!("{SESSIONS_MAX} HTTP sessions open: ended the least recently used"));
            }
        }
        sessions
            .insert(session_id.to_string(), Session { state, subject, last_use: use_number, exchanges: Vec::new() });
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
        sessions.remove(session_id);
        OutboundAnswer { status: 204, headers: vec![], body: vec![] }
    }
}

/// Cancels an exchange's calls when its future is dropped before the answer.
struct CancelOnDrop {
    connection: Rc<Connection>,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.connection.cancel_all();
        }
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
        _ => return Ok(()),
    };
    let Some(named) = named.and_then(Value::as_str) else { return Ok(()) };
    match request.header("mcp-name") {
        Some(header) if header == named => Ok(()),
        Some(_) => Err("the Mcp-Name header does not match the body's name".into()),
        None => Err(format!("a 2026-07-28 {method} over HTTP needs the Mcp-Name header")),
    }
}

/// `localhost`, `127.0.0.1`, `[::1]`, each with or without a port.
fn is_loopback_authority(authority: &str) -> bool {
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().map(|inside| format!("[{inside}]")).unwrap_or_default(),
        None => authority.split(':').next().unwrap_or("").to_string(),
    };
    let host = host.to_ascii_lowercase();
    host == "localhost" || host == "[::1]" || host.parse::<core::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// Equal secrets, compared without an early exit on the first differing byte.
fn same_secret(presented: &[u8], expected: &[u8]) -> bool {
    let mut difference = (presented.len() != expected.len()) as u8;
    for (index, byte) in expected.iter().enumerate() {
        difference |= byte ^ presented.get(index).copied().unwrap_or(0);
    }
    difference == 0
}

/// One exchange's messages, in order, bounded.
#[derive(Default)]
struct Collected {
    lines: RefCell<VecDeque<Vec<u8>>>,
}

impl Outlet for Collected {
    fn write_line(&self, mut line: Vec<u8>) -> LocalBoxFuture<'static, std::io::Result<()>> {
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        let mut lines = self.lines.borrow_mut();
        if lines.len() >= EXCHANGE_MESSAGES_MAX {
            lines.pop_front();
        }
        lines.push_back(line);
        Box::pin(std::future::ready(Ok(())))
    }
}

impl Collected {
    /// The HTTP status an error answer takes outside a session: 404 for a method not found,
    /// 400 for a request refused as malformed or unsupported, 500 for an internal error.
    fn error_status(&self) -> Option<u16> {
        let lines = self.lines.borrow();
        let answer: Value = serde_json::from_slice(lines.back()?).ok()?;
        let code = answer.pointer("/error/code")?.as_i64()?;
        Some(match code {
            jsonrpc::METHOD_NOT_FOUND => 404,
            jsonrpc::INTERNAL_ERROR => 500,
            _ => 400,
        })
    }

    /// The exchange's answer: nothing to say (202), one message as JSON, or several as an
    /// SSE stream (a client that takes no stream gets the last one, the answer, alone).
    fn answer(&self, takes_stream: bool) -> OutboundAnswer {
        let lines = self.lines.borrow();
        match lines.len() {
            0 => accepted(),
            1 => json_bytes(200, lines[0].clone()),
            _ if !takes_stream => json_bytes(200, lines.back().expect("several lines").clone()),
            _ => {
                let mut body = Vec::new();
                for line in lines.iter() {
                    body.extend_from_slice(b"event: message\ndata: ");
                    body.extend_from_slice(line);
                    body.extend_from_slice(b"\n\n");
                }
                OutboundAnswer {
                    status: 200,
                    headers: vec![
                        ("content-type".into(), "text/event-stream".into()),
                        ("cache-control".into(), "no-store".into()),
                    ],
                    body,
                }
            }
        }
    }
}

fn accepted() -> OutboundAnswer {
    OutboundAnswer { status: 202, headers: vec![], body: vec![] }
}

fn plain(status: u16, text: &str) -> OutboundAnswer {
    json_answer(status, &json!({"error": text}))
}

fn json_answer(status: u16, value: &Value) -> OutboundAnswer {
    json_bytes(status, serde_json::to_vec(value).expect("JSON values serialise"))
}

fn json_bytes(status: u16, body: Vec<u8>) -> OutboundAnswer {
    OutboundAnswer { status, headers: vec![("content-type".into(), "application/json".into())], body }
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
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same_secret(b"0123456789abcde", b"0123456789abcdef"));
        assert!(!same_secret(b"0123456789abcdefX", b"0123456789abcdef"));
        assert!(!same_secret(b"", b"0123456789abcdef"));
    }
}
