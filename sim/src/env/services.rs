//! Simulated services behind the seam: a payment API (Stripe-shaped, with its own
//! idempotency-key store and a ground-truth record of every effect), a plain HTTP endpoint
//! that records each write, SQLite in memory, a PostgreSQL server (modelled by another
//! in-memory SQLite database, with the same one-transaction-per-statement semantics and
//! `warden_actions` row), and the operator's notify command.
//!
//! Faults: a request refused before sending, a timeout after the service acted (the case
//! that puts an action in doubt), and a crash of the server right after the service acted.
//! For PostgreSQL, the same faults hit the connection: refused (nothing committed), COMMIT's
//! answer lost (committed, in doubt), a crash after COMMIT, and a statement slower than its
//! `statement_timeout` (cancelled by the server, rolled back).

use crate::names::{ECHO_HOST, MODEL_HOST, NOTES_HOST, PAYMENTS_HOST};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rusqlite::types::Value as SqlValue;
use serde_json::{json, Map, Value};
use warden::env::{
    Database, Db, DbFailure, DbReply, DbRequest, HttpRequest, HttpResponse, LocalBoxFuture, Net, NetError, Process,
    ProcessOutcome, ProcessRequest,
};

/// Where the simulated services keep `database`: a SQLite file by its path, a PostgreSQL
/// server by its URL without the credentials.
pub fn database_key(database: &Database) -> PathBuf {
    match database {
        Database::Sqlite(path) => path.clone(),
        Database::Postgres(target) => {
            let place = target.url.rsplit('@').next().unwrap_or_default();
            PathBuf::from(format!("postgres://{}", place.trim_start_matches("postgres://")))
        }
    }
}

/// How the services and the checker name an HTTP write: its method, URL and body.
pub fn http_write(method: &str, url: &str, body: &str) -> String {
    format!("{method} {url} {body}")
}

/// A fault for the next matching request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetFault {
    /// Refused before sending: certainly not sent.
    Refuse,
    /// The service acts, then the response is lost (timeout after sending).
    LoseResponse,
    /// The service acts, then the server crashes before it reads the response.
    CrashAfterActing,
    /// The service acts at once and answers after this many ms of virtual time (a timeout
    /// after sending when that is past the request's timeout).
    Slow(u64),
}

/// A write a service refused on its own account (not a fault): in an operator's world, a
/// refund of an intent the payment API does not know, or of more than was paid on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The idempotency key the request carried, which names its run when Warden made it.
    pub key: Option<String>,
    /// What was asked: `a refund of <intent>`.
    pub what: String,
    /// The service's answer, as its status and error message.
    pub answer: String,
}

/// One effect the outside world really saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effect {
    pub kind: String,
    pub key: Option<String>,
    pub detail: String,
    pub minor: i64,
}

#[derive(Default)]
pub struct Services {
    pub effects: RefCell<Vec<Effect>>,
    pub requests: RefCell<Vec<HttpRequest>>,
    idempotency: RefCell<BTreeMap<String, HttpResponse>>,
    /// Keys whose request's answer was lost: the next request with one is answered 409.
    still_processing: RefCell<std::collections::BTreeSet<String>>,
    /// The canary: a payment service that ignores idempotency keys.
    pub ignore_idempotency_keys: Cell<bool>,
    /// In an operator's world: its recording services (every write but the payments API's)
    /// ignore idempotency keys (`OwnWorld::services_ignore_keys`).
    pub own_writes_ignore_keys: Cell<bool>,
    pub faults: RefCell<Vec<(String, NetFault)>>,
    pub crashed: RefCell<Option<Rc<Cell<bool>>>>,
    /// The crash flag of a peer instance while it asks a service (`as_instance`).
    beside: RefCell<Option<Rc<Cell<bool>>>>,
    /// Payment intents: id -> (amount in minor units, currency).
    pub intents: RefCell<BTreeMap<String, (i64, String)>>,
    pub notify_calls: RefCell<Vec<Vec<u8>>>,
    /// The notify command fails this many times before it succeeds.
    pub notify_failures: Cell<u32>,
    /// The notify command hangs this many times (until its timeout) before it succeeds.
    pub notify_hangs: Cell<u32>,
    /// Virtual time, for a hanging command's timeout.
    pub clock: RefCell<Option<Rc<crate::env::clock::SimClock>>>,
    pub variables: RefCell<BTreeMap<String, String>>,
    databases: RefCell<BTreeMap<PathBuf, rusqlite::Connection>>,
    /// Statements the PostgreSQL server received.
    pub postgres_statements: Cell<u64>,
    /// Crash the server right after the next committed write.
    pub crash_after_commit: Cell<bool>,
    /// Step the wall clock by this much (ms) when the next request reaches a service.
    pub step_wall_on_next_request: Cell<i64>,
    /// Checks that what each action depends on is durable when it reaches a service.
    pub oracle: RefCell<Option<Rc<crate::env::oracle::Oracle>>>,
    /// Output tokens the model provider billed: every request it received, at what its
    /// answer's usage says, or the request's `max_tokens` when it answered none.
    pub model_billed: Cell<u64>,
    /// The model tokens the ledger last held for each run the checker saw (kept when
    /// retention drops a settled run, whose charge is final).
    pub tokens_held: RefCell<BTreeMap<String, u64>>,
    /// When (virtual monotonic ms) the server receives a shutdown signal, if one is armed.
    pub shutdown_at_ms: Cell<Option<u64>>,
    /// Told when a shutdown is armed, so a server waiting for signals sees it.
    pub shutdown_armed: warden::base::sync::Notify,
    /// Shutdown signals delivered so far.
    pub shutdowns_sent: Cell<u64>,
    /// The world is an operator's own (`own.rs`): requests are routed by path, whatever the
    /// host, and a URL no modelled service answers reaches a recording HTTP service.
    pub own_world: Cell<bool>,
    /// The currency an operator's world's payment intents were paid in: its refund grant's
    /// (lower case, as Stripe writes it), else `usd`.
    pub own_currency: RefCell<Option<String>>,
    /// The simulated disk, where a SQLite database made from its `init` file appears.
    pub disk: RefCell<Option<Rc<crate::env::disk::SimDisk>>>,
    /// The shared PostgreSQL store, which knows the instances' leases: every write a service
    /// receives is checked to come while a lease is held (the action rule).
    pub shared_db: RefCell<Option<Rc<crate::env::state_db::SharedDb>>>,
    /// Effects made before the simulation began, by signature (`truth::signature`): the
    /// writes done in the journals a world starts from (`--from-journals`).
    pub inherited: RefCell<BTreeMap<String, u32>>,
    /// The writes a service refused on its own account, in an operator's world.
    pub refused: RefCell<Vec<Refused>>,
}

fn response(status: u16, body: Value) -> HttpResponse {
    HttpResponse {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

impl Services {
    pub fn new() -> Rc<Services> {
        let services = Services::default();
        services.intents.borrow_mut().insert("pi_1001".into(), (5000, "usd".into()));
        services.intents.borrow_mut().insert("pi_1002".into(), (30000, "usd".into()));
        services.intents.borrow_mut().insert("pi_2001".into(), (9000, "eur".into()));
        Rc::new(services)
    }

    /// Serves an operator's world: its services on whatever hosts its manifest names, its
    /// recording services ignoring idempotency keys or not (`OwnWorld::services_ignore_keys`).
    pub fn serve_as_own_world(&self, ignore_keys: bool) {
        self.own_world.set(true);
        self.own_writes_ignore_keys.set(ignore_keys);
    }

    pub fn fault_next(&self, url_contains: &str, fault: NetFault) {
        self.faults.borrow_mut().push((url_contains.to_string(), fault));
    }

    /// Every database the services hold (SQLite by path, PostgreSQL by URL).
    pub fn database_keys(&self) -> Vec<PathBuf> {
        self.databases.borrow().keys().cloned().collect()
    }

    /// Takes the next fault for `url` only if it is a refusal (a lookup that is refused
    /// leaves the other faults to the statements they were planned for).
    fn take_refusal(&self, url: &str) -> bool {
        let mut faults = self.faults.borrow_mut();
        let found = faults.iter().position(|(part, _)| url.contains(part.as_str()));
        match found {
            Some(index) if faults[index].1 == NetFault::Refuse => {
                faults.remove(index);
                true
            }
            _ => false,
        }
    }

    fn take_fault(&self, url: &str) -> Option<NetFault> {
        let mut faults = self.faults.borrow_mut();
        let index = faults.iter().position(|(part, _)| url.contains(part.as_str()))?;
        Some(faults.remove(index).1)
    }

    /// Refunds the payment service really made, in minor units.
    pub fn refunded_minor(&self) -> i64 {
        self.effects.borrow().iter().filter(|e| e.kind == "refund").map(|e| e.minor).sum()
    }

    pub fn effects_of(&self, kind: &str) -> usize {
        self.effects.borrow().iter().filter(|e| e.kind == kind).count()
    }

    fn header<'a>(request: &'a HttpRequest, name: &str) -> Option<&'a str> {
        request.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn serve(&self, request: &HttpRequest) -> HttpResponse {
        if self.own_world.get() {
            return self.serve_own(request);
        }
        let url = request.url.as_str();
        if let Some(id) = url.strip_prefix(&format!("{PAYMENTS_HOST}/v1/payment_intents/")) {
            return self.intent(id);
        }
        if url == format!("{PAYMENTS_HOST}/v1/refunds") && request.method == "POST" {
            return self.refund(request);
        }
        if let Some(path) = url.strip_prefix(ECHO_HOST) {
            return Services::echo(request, path);
        }
        if url == format!("{MODEL_HOST}/v1/messages") && request.method == "POST" {
            return self.model(request);
        }
        if url.starts_with(NOTES_HOST) {
            if request.method == "GET" {
                return response(200, json!({"notes": self.effects_of("note")}));
            }
            let key = Services::header(request, "idempotency-key").map(str::to_string);
            if let Some(key) = &key {
                if let Some(earlier) = self.idempotency.borrow().get(key) {
                    return earlier.clone();
                }
            }
            let body = String::from_utf8_lossy(&request.body);
            self.effects.borrow_mut().push(Effect {
                kind: "note".into(),
                key: key.clone(),
                detail: http_write(&request.method, &request.url, &body),
                minor: 0,
            });
            let answer = response(201, json!({"saved": true}));
            if let Some(key) = key {
                self.idempotency.borrow_mut().insert(key, answer.clone());
            }
            return answer;
        }
        response(404, json!({"error": "no such endpoint"}))
    }

    /// A payment intent by id (`paid_on`).
    fn intent(&self, id: &str) -> HttpResponse {
        match self.paid_on(id) {
            Some((amount, currency)) => {
                response(200, json!({"id": id, "amount": amount, "currency": currency, "status": "succeeded"}))
            }
            None => response(404, json!({"error": {"message": format!("No such payment_intent: {id}")}})),
        }
    }

    /// A refund (form-encoded), made once per idempotency key.
    fn refund(&self, request: &HttpRequest) -> HttpResponse {
        let key = Services::header(request, "idempotency-key").map(str::to_string);
        if let (Some(key), false) = (&key, self.ignore_idempotency_keys.get()) {
            if let Some(earlier) = self.idempotency.borrow().get(key) {
                return earlier.clone();
            }
        }
        let form: BTreeMap<String, String> = form_urlencoded::parse(&request.body).into_owned().collect();
        let minor: i64 = form.get("amount").and_then(|a| a.parse().ok()).unwrap_or(0);
        let intent = form.get("payment_intent").cloned().unwrap_or_default();
        if let Some(answer) = self.refund_refused(&intent, minor, key.as_deref()) {
            return answer;
        }
        let number = self.effects.borrow().len();
        self.effects.borrow_mut().push(Effect {
            kind: "refund".into(),
            key: key.clone(),
            detail: intent.clone(),
            minor,
        });
        // Stripe's refund object, in the currency the intent was paid in.
        let currency = self.paid_on(&intent).map_or_else(|| "usd".to_string(), |(_, currency)| currency);
        let refund = json!({"id": format!("re_{number}"), "object": "refund", "amount": minor, "currency": currency,
            "payment_intent": intent, "status": "succeeded"});
        let answer = response(200, refund);
        if let Some(key) = key {
            self.idempotency.borrow_mut().insert(key, answer.clone());
        }
        answer
    }

    /// In an operator's world, a refund the payment API refuses as Stripe does: of an intent
    /// it does not know (404), or of more than was paid on it (400). Refused once per key.
    fn refund_refused(&self, intent: &str, minor: i64, key: Option<&str>) -> Option<HttpResponse> {
        if !self.own_world.get() {
            return None;
        }
        let paid = self.paid_on(intent);
        let (status, message) = match paid {
            None => (404, format!("No such payment_intent: '{intent}'")),
            Some((paid, _)) if minor > paid => {
                (400, format!("Refund amount ({minor}) is greater than the amount paid on {intent} ({paid})"))
            }
            Some(_) => return None,
        };
        let answer = response(status, json!({"error": {"type": "invalid_request_error", "message": message}}));
        let what = format!("a refund of {intent}");
        self.refused.borrow_mut().push(Refused {
            key: key.map(str::to_string),
            what,
            answer: format!("{status} {message}"),
        });
        if let Some(key) = key {
            self.idempotency.borrow_mut().insert(key.to_string(), answer.clone());
        }
        Some(answer)
    }

    /// What was paid on an intent: the services' own, and in an operator's world any other
    /// id too (from 100 to 5000 of Stripe's unit of its currency, 1.00 to 50.00 USD, as its
    /// id's hash says: orders differ in size), but one that says it is missing.
    fn paid_on(&self, id: &str) -> Option<(i64, String)> {
        let known = self.intents.borrow().get(id).cloned();
        let fnv1a = id
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3));
        let paid = 100 * (1 + (fnv1a % 50) as i64);
        let currency = self.own_currency.borrow().clone().unwrap_or_else(|| "usd".to_string());
        let own = (self.own_world.get() && !id.contains("missing")).then_some((paid, currency));
        known.or(own)
    }

    /// An operator's world: the payments API and the model by their paths on any host; any
    /// other URL a recording service (a read answers `{"ok": true}`; a write is an effect,
    /// made once per idempotency key).
    fn serve_own(&self, request: &HttpRequest) -> HttpResponse {
        let url = request.url.as_str();
        let path = url.split_once("://").map_or(url, |(_, rest)| rest.find('/').map_or("/", |at| &rest[at..]));
        let path = path.split(['?', '#']).next().unwrap_or(path);
        if let Some(id) = path.strip_prefix("/v1/payment_intents/") {
            return self.intent(id);
        }
        match (path, request.method.as_str()) {
            ("/v1/refunds", "POST") => self.refund(request),
            (path, "POST") if path.ends_with("/v1/messages") => self.model(request),
            (_, "GET" | "HEAD") => response(200, json!({"ok": true})),
            _ => self.recorded_write(request),
        }
    }

    fn recorded_write(&self, request: &HttpRequest) -> HttpResponse {
        let key = Services::header(request, "idempotency-key").map(str::to_string);
        let honoured = key.as_ref().filter(|_| !self.own_writes_ignore_keys.get());
        if let Some(earlier) = honoured.and_then(|key| self.idempotency.borrow().get(key).cloned()) {
            return earlier;
        }
        // Named as the checker names a journal's write (`truth::signature`).
        let body = String::from_utf8_lossy(&request.body);
        let detail = http_write(&request.method, &request.url, &body);
        self.effects.borrow_mut().push(Effect { kind: "http".into(), key: key.clone(), detail, minor: 0 });
        let answer = response(200, json!({"ok": true}));
        if let Some(key) = key {
            self.idempotency.borrow_mut().insert(key, answer.clone());
        }
        answer
    }

    fn model(&self, request: &HttpRequest) -> HttpResponse {
        let asked = self.effects_of("model") + 1;
        self.effects.borrow_mut().push(Effect { kind: "model".into(), key: None, detail: String::new(), minor: 0 });
        if Services::header(request, "x-api-key") != Some(crate::names::MODEL_KEY) {
            return response(401, json!({"error": {"message": "invalid x-api-key"}}));
        }
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        // A provider that bills every request it received: at its usage when it reports
        // one, else at the most the request allowed.
        let most = body["max_tokens"].as_u64().unwrap_or(0);
        let bill = |tokens: u64| self.model_billed.set(self.model_billed.get().saturating_add(tokens));
        match (asked % 5, asked % 7, asked % 11, asked % 13) {
            (0, ..) => {
                bill(most);
                return response(429, json!({"error": {"message": "rate limited"}}));
            }
            (_, 0, ..) => {
                bill(most);
                return response(500, json!({"error": {"message": "overloaded"}}));
            }
            // A proxy's error page with a 200, and JSON in another API's shape.
            (_, _, 0, _) => {
                bill(most);
                let page = b"<html><body>502 Bad Gateway</body></html>".to_vec();
                return HttpResponse { status: 200, headers: vec![], body: page };
            }
            (_, _, _, 0) => {
                bill(most);
                return response(200, json!({"id": "msg", "choices": []}));
            }
            _ => {}
        }
        let said = body["messages"][0]["content"].as_str().unwrap_or_default().chars().take(40).collect::<String>();
        // Half the answers use every output token the call allowed: the worst case happens.
        let output = if said.len() % 2 == 0 { most } else { 2 };
        let content = json!([{"type": "text", "text": format!("worded {said}")}]);
        // Every third answer reports no usage (some proxies strip it).
        if asked % 3 == 0 {
            bill(most);
            return response(200, json!({"content": content}));
        }
        bill(output);
        response(200, json!({"content": content, "usage": {"input_tokens": said.len(), "output_tokens": output}}))
    }

    fn echo(request: &HttpRequest, path: &str) -> HttpResponse {
        if let Some(size) = path.strip_prefix("/headers/").and_then(|n| n.parse::<usize>().ok()) {
            let header = ("x-big".to_string(), "h".repeat(size));
            return HttpResponse { status: 200, headers: vec![header], body: b"{}".to_vec() };
        }
        if let Some(depth) = path.strip_prefix("/deep/").and_then(|n| n.parse::<usize>().ok()) {
            let body = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            return HttpResponse { status: 200, headers: vec![], body: body.into_bytes() };
        }
        if let Some(size) = path.strip_prefix("/big/").and_then(|n| n.parse::<usize>().ok()) {
            let body = format!("{{\"data\":\"{}\"}}", "x".repeat(size.saturating_sub(11)));
            return HttpResponse { status: 200, headers: vec![], body: body.into_bytes() };
        }
        let seen = Services::header(request, "authorization").unwrap_or_default();
        let plain = json!({"authorization": seen}).to_string();
        let body = match path {
            "/echo/php" => plain.replace('/', "\\/"),
            "/echo/go" => plain.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026"),
            "/echo/unicode" => {
                let escaped: String = seen.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
                format!("{{\"authorization\":\"{escaped}\"}}")
            }
            // An anti-XSSI prefix: the body as a whole is not JSON.
            "/echo/xssi" => format!(")]}}'\n{}", plain.replace('/', "\\/")),
            _ => plain,
        };
        HttpResponse {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into_bytes(),
        }
    }

    /// Serves `request` at once and answers after `ms` of virtual time, or times out first.
    fn slow(&self, request: &HttpRequest, ms: u64) -> LocalBoxFuture<'static, Result<HttpResponse, NetError>> {
        let response = self.serve(request);
        let timeout = request.timeout_ms;
        let timed_out = timeout > 0 && ms > timeout;
        let outcome = match timed_out {
            true => Err(NetError { may_have_been_sent: true, message: format!("timed out after {timeout} ms") }),
            false => Ok(response),
        };
        let Some(clock) = self.clock.borrow().as_ref().map(Rc::clone) else {
            return Box::pin(std::future::ready(outcome));
        };
        let sleep =
            warden::env::Clock::sleep(&crate::env::clock::SimClockHandle(clock), if timed_out { timeout } else { ms });
        Box::pin(async move {
            sleep.await;
            outcome
        })
    }

    /// Whether the server instance asking has crashed: then it can reach no service.
    fn server_crashed(&self) -> bool {
        self.asking().is_some_and(|crashed| crashed.get())
    }

    fn crash_server(&self) {
        if let Some(crashed) = self.asking() {
            crashed.set(true);
        }
    }

    /// The crash flag of the instance asking now: a peer's own while it asks (`beside`), else
    /// the world's.
    fn asking(&self) -> Option<Rc<Cell<bool>>> {
        self.beside.borrow().clone().or_else(|| self.crashed.borrow().clone())
    }

    /// Runs `ask` as the instance whose crash flag is `beside` (a peer's), if any: a crash a
    /// service's fault causes is that instance's.
    fn as_instance<T>(&self, beside: &Option<Rc<Cell<bool>>>, ask: impl FnOnce() -> T) -> T {
        let before = self.beside.replace(beside.clone());
        let outcome = ask();
        *self.beside.borrow_mut() = before;
        outcome
    }
}

/// An instance's network: the world's services, and the registration its store handle made
/// (the action rule's witness names the sender).
pub struct SimNet(pub Rc<Services>, pub crate::env::state_db::Registration, pub Option<Rc<Cell<bool>>>);

impl Net for SimNet {
    fn request(&self, request: HttpRequest) -> LocalBoxFuture<'static, Result<HttpResponse, NetError>> {
        self.0.as_instance(&self.2, || self.request_now(request))
    }
}

impl SimNet {
    fn request_now(&self, request: HttpRequest) -> LocalBoxFuture<'static, Result<HttpResponse, NetError>> {
        let services = &self.0;
        if services.server_crashed() {
            return Box::pin(std::future::pending());
        }
        if let Some(oracle) = services.oracle.borrow().as_ref() {
            oracle.before_request(&request);
        }
        services.requests.borrow_mut().push(request.clone());
        // A write (a model call's request included) is sent only while the sender holds its
        // lease on the store (the action rule).
        let write = request.method != "GET";
        if let (true, Some(db)) = (write, services.shared_db.borrow().as_ref()) {
            db.note_a_write_sent(self.1.borrow().as_ref());
        }
        let step = services.step_wall_on_next_request.replace(0);
        if let (true, Some(clock)) = (step != 0, services.clock.borrow().as_ref()) {
            clock.step_wall(step);
        }
        // The first request with a key whose answer was lost is still being processed, as the
        // service sees it: the next one with that key is answered 409 (Stripe's
        // `idempotency_key_in_use`), which tells nothing of whether the write was made.
        let key = request.headers.iter().find(|(name, _)| name == "idempotency-key").map(|(_, key)| key.clone());
        if key.as_ref().is_some_and(|key| services.still_processing.borrow_mut().remove(key)) {
            let body = br#"{"error": {"code": "idempotency_key_in_use"}}"#.to_vec();
            return Box::pin(std::future::ready(Ok(HttpResponse { status: 409, headers: vec![], body })));
        }
        let outcome = match services.take_fault(&request.url) {
            Some(NetFault::Refuse) => Err(NetError { may_have_been_sent: false, message: "connection refused".into() }),
            Some(NetFault::LoseResponse) => {
                services.serve(&request);
                // (A service that ignores keys answers no 409: it makes the write again.)
                let ignored = services.own_writes_ignore_keys.get() && !request.url.contains("/v1/refunds");
                services.still_processing.borrow_mut().extend(key.filter(|_| !ignored));
                Err(NetError { may_have_been_sent: true, message: "timed out after sending".into() })
            }
            Some(NetFault::CrashAfterActing) => {
                services.serve(&request);
                services.crash_server();
                return Box::pin(std::future::pending());
            }
            Some(NetFault::Slow(ms)) => return services.slow(&request, ms),
            None => Ok(services.serve(&request)),
        };
        Box::pin(std::future::ready(outcome))
    }
}

use warden::io::db::{from_sql, to_sql};

/// The table a committed write records itself in (the server's `warden_actions`).
pub const ACTIONS_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS warden_actions (run TEXT NOT NULL, action INTEGER NOT NULL, PRIMARY KEY (run, action))";

impl Services {
    /// Runs SQL against a database directly (test set-up and ground truth).
    pub fn sql(&self, path: &Path, sql: &str) -> Vec<Map<String, Value>> {
        let mut databases = self.databases.borrow_mut();
        let connection = databases
            .entry(path.to_path_buf())
            .or_insert_with(|| rusqlite::Connection::open_in_memory().expect("in-memory SQLite"));
        let mut statement = connection.prepare(sql).expect("test SQL");
        let names: Vec<String> = statement.column_names().iter().map(|s| s.to_string()).collect();
        let mut rows = Vec::new();
        let mut cursor = statement.query([]).expect("test SQL");
        while let Some(row) = cursor.next().expect("test SQL") {
            rows.push(names.iter().enumerate().map(|(i, n)| (n.clone(), from_sql(row.get_ref(i).unwrap()))).collect());
        }
        rows
    }

    fn execute(&self, request: &DbRequest) -> Result<DbReply, String> {
        let mut databases = self.databases.borrow_mut();
        let connection = databases
            .entry(database_key(&request.database))
            .or_insert_with(|| rusqlite::Connection::open_in_memory().expect("in-memory SQLite"));
        let transaction = connection.transaction().map_err(|e| e.to_string())?;
        let params: Vec<SqlValue> = request.params.iter().map(to_sql).collect();
        let rows;
        let changes;
        {
            let mut statement = transaction.prepare(&request.sql).map_err(|e| e.to_string())?;
            if !request.write && !statement.readonly() {
                return Err("attempt to write a readonly database".into());
            }
            let names: Vec<String> = statement.column_names().iter().map(|s| s.to_string()).collect();
            let mut cursor = statement.query(rusqlite::params_from_iter(params.iter())).map_err(|e| e.to_string())?;
            rows = warden::io::db::read_rows(&mut cursor, &names, request.rows_bytes_max)?;
            changes = transaction.changes();
        }
        if let Some((run, action)) = &request.action {
            transaction.execute(ACTIONS_TABLE, []).map_err(|e| e.to_string())?;
            transaction
                .execute(
                    "INSERT INTO warden_actions (run, action) VALUES (?1, ?2)",
                    rusqlite::params![run, *action as i64],
                )
                .map_err(|e| e.to_string())?;
        }
        transaction.commit().map_err(|e| e.to_string())?;
        Ok(DbReply { rows, changes })
    }
}

/// An instance's databases; a peer's crash flag (`Services::as_instance`).
pub struct SimDb(pub Rc<Services>, pub Option<Rc<Cell<bool>>>);

impl Db for SimDb {
    fn initialize(&self, path: &Path, sql: &str) -> LocalBoxFuture<'static, Result<(), String>> {
        let mut databases = self.0.databases.borrow_mut();
        let connection = databases
            .entry(path.to_path_buf())
            .or_insert_with(|| rusqlite::Connection::open_in_memory().expect("in-memory SQLite"));
        let made = connection.execute_batch(sql).map_err(|e| e.to_string());
        // The database's file exists from now on, as SQLite's would: the next start finds it.
        if let (Ok(()), Some(disk)) = (&made, self.0.disk.borrow().as_ref()) {
            disk.install(path, b"SQLite format 3\0");
        }
        Box::pin(std::future::ready(made))
    }

    fn execute(&self, request: DbRequest) -> LocalBoxFuture<'static, Result<DbReply, DbFailure>> {
        self.0.as_instance(&self.1, || self.execute_now(request))
    }

    fn action_recorded(
        &self,
        database: &Database,
        run: &str,
        action: u64,
    ) -> LocalBoxFuture<'static, Result<bool, String>> {
        if let Database::Postgres(target) = database {
            if self.0.take_refusal(&target.url) {
                return Box::pin(std::future::ready(Err("PostgreSQL: connection refused".into())));
            }
        }
        let key = database_key(database);
        let _ = self.0.sql(&key, ACTIONS_TABLE);
        let rows = self
            .0
            .sql(&key, &format!("SELECT COUNT(*) AS n FROM warden_actions WHERE run = '{run}' AND action = {action}"));
        let found = rows.first().and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0) > 0;
        Box::pin(std::future::ready(Ok(found)))
    }
}

impl SimDb {
    fn execute_now(&self, request: DbRequest) -> LocalBoxFuture<'static, Result<DbReply, DbFailure>> {
        if self.0.server_crashed() {
            return Box::pin(std::future::pending());
        }
        if let (true, Some((run, op)), Some(oracle)) = (request.write, &request.action, self.0.oracle.borrow().as_ref())
        {
            oracle.before_sql_write(run, *op);
        }
        if let Database::Postgres(target) = &request.database {
            self.0.postgres_statements.set(self.0.postgres_statements.get() + 1);
            if let Some(fault) = self.0.take_fault(&target.url) {
                return self.postgres_fault(&request, target.statement_timeout_ms, fault);
            }
        }
        let reply = self.0.execute(&request).map_err(DbFailure::rolled_back);
        if request.write && reply.is_ok() && self.0.crash_after_commit.replace(false) {
            self.0.crash_server();
            return Box::pin(std::future::pending());
        }
        Box::pin(std::future::ready(reply))
    }

    /// A statement on the PostgreSQL server's connection, under a network fault.
    fn postgres_fault(
        &self,
        request: &DbRequest,
        statement_timeout_ms: u64,
        fault: NetFault,
    ) -> LocalBoxFuture<'static, Result<DbReply, DbFailure>> {
        let services = &self.0;
        let outcome = match fault {
            NetFault::Refuse => Err(DbFailure::rolled_back("PostgreSQL: connection refused")),
            // The connection broke with COMMIT on its way: every other time it had arrived
            // and committed, otherwise not. Either way no answer came.
            NetFault::LoseResponse => {
                let arrived = services.postgres_statements.get() % 2 == 1;
                let committed =
                    if arrived { services.execute(request) } else { Ok(DbReply { rows: vec![], changes: 0 }) };
                match committed {
                    Ok(_) => Err(DbFailure {
                        message: "PostgreSQL: connection closed with COMMIT on its way".into(),
                        may_have_committed: request.write,
                        untrusted: false,
                    }),
                    Err(problem) => Err(DbFailure::rolled_back(problem)),
                }
            }
            NetFault::CrashAfterActing => {
                let _ = services.execute(request);
                services.crash_server();
                return Box::pin(std::future::pending());
            }
            // The server cancels a statement past `statement_timeout`, rolling it back.
            NetFault::Slow(ms) if ms > statement_timeout_ms => {
                let cancelled = "PostgreSQL: canceling statement due to statement timeout";
                return services.after(statement_timeout_ms, Err(DbFailure::rolled_back(cancelled)));
            }
            NetFault::Slow(ms) => {
                let reply = services.execute(request).map_err(DbFailure::rolled_back);
                return services.after(ms, reply);
            }
        };
        Box::pin(std::future::ready(outcome))
    }
}

impl Services {
    /// `outcome` after `ms` of virtual time (at once without a clock).
    fn after<T: 'static>(&self, ms: u64, outcome: T) -> LocalBoxFuture<'static, T> {
        let Some(clock) = self.clock.borrow().as_ref().map(Rc::clone) else {
            return Box::pin(std::future::ready(outcome));
        };
        let sleep = warden::env::Clock::sleep(&crate::env::clock::SimClockHandle(clock), ms);
        Box::pin(async move {
            sleep.await;
            outcome
        })
    }
}

impl Services {
    /// A shutdown signal for the server `after_ms` from now (virtual, monotonic).
    pub fn arm_shutdown(&self, after_ms: u64) {
        let Some(clock) = self.clock.borrow().clone() else { return };
        let now = warden::env::Clock::monotonic_ms(&crate::env::clock::SimClockHandle(clock));
        // A scenario file may name any u64: past the end of time it simply never comes.
        self.shutdown_at_ms.set(Some(now.saturating_add(after_ms)));
        self.shutdown_armed.notify_all();
    }
}

/// One server process's view of the world's processes and signals.
pub struct SimProcess {
    pub services: Rc<Services>,
    /// Shutdown signals this process received.
    received: Rc<Cell<u64>>,
    /// A peer instance's crash flag: the shutdown faults are the first instance's, and a
    /// crash a command's fault causes is the peer's own.
    beside: Option<Rc<Cell<bool>>>,
}

impl SimProcess {
    pub fn new(services: Rc<Services>) -> SimProcess {
        SimProcess { services, received: Rc::default(), beside: None }
    }

    /// A peer instance's process (`beside`: its crash flag).
    pub fn beside(services: Rc<Services>, crashed: Rc<Cell<bool>>) -> SimProcess {
        SimProcess { services, received: Rc::default(), beside: Some(crashed) }
    }

    /// An armed signal whose time has come reaches this process (the first instance's).
    fn deliver_due_signal(&self) {
        if self.beside.is_some() {
            return;
        }
        let Some(at) = self.services.shutdown_at_ms.get() else { return };
        let Some(clock) = self.services.clock.borrow().clone() else { return };
        if warden::env::Clock::monotonic_ms(&crate::env::clock::SimClockHandle(clock)) >= at {
            self.services.shutdown_at_ms.set(None);
            self.services.shutdowns_sent.set(self.services.shutdowns_sent.get() + 1);
            self.received.set(self.received.get() + 1);
        }
    }
}

impl Process for SimProcess {
    fn run(&self, request: ProcessRequest) -> LocalBoxFuture<'static, io::Result<ProcessOutcome>> {
        if self.services.as_instance(&self.beside, || self.services.server_crashed()) {
            return Box::pin(std::future::pending());
        }
        if let Some(oracle) = self.services.oracle.borrow().as_ref() {
            oracle.before_notify(&request.stdin);
        }
        self.services.notify_calls.borrow_mut().push(request.stdin.clone());
        let hanging = self.services.notify_hangs.get();
        if hanging > 0 {
            self.services.notify_hangs.set(hanging - 1);
            // The command never exits; the server's timeout kills it.
            if let Some(clock) = self.services.clock.borrow().as_ref() {
                let sleep =
                    warden::env::Clock::sleep(&crate::env::clock::SimClockHandle(Rc::clone(clock)), request.timeout_ms);
                return Box::pin(async move {
                    sleep.await;
                    Ok(ProcessOutcome { exit_code: None })
                });
            }
        }
        let failing = self.services.notify_failures.get();
        let exit_code = if failing > 0 {
            self.services.notify_failures.set(failing - 1);
            Some(1)
        } else {
            Some(0)
        };
        Box::pin(std::future::ready(Ok(ProcessOutcome { exit_code })))
    }

    fn var(&self, name: &str) -> Option<String> {
        self.services.variables.borrow().get(name).cloned()
    }

    fn shutdown_signals(&self) -> u64 {
        self.deliver_due_signal();
        self.received.get()
    }

    /// A signal comes when a `shutdown` fault armed one (`Services::arm_shutdown`), at its
    /// virtual time; never otherwise.
    fn shutdown_signal(&self, nth: u64) -> LocalBoxFuture<'static, ()> {
        if self.beside.is_some() {
            // The shutdown faults are the first instance's: no signal comes to a peer.
            return Box::pin(std::future::pending());
        }
        let process = SimProcess {
            services: Rc::clone(&self.services),
            received: Rc::clone(&self.received),
            beside: self.beside.clone(),
        };
        Box::pin(async move {
            loop {
                process.deliver_due_signal();
                if process.received.get() >= nth {
                    return;
                }
                let clock = process.services.clock.borrow().clone();
                match (process.services.shutdown_at_ms.get(), clock) {
                    (Some(at), Some(clock)) => {
                        let clock = crate::env::clock::SimClockHandle(clock);
                        let now = warden::env::Clock::monotonic_ms(&clock);
                        warden::env::Clock::sleep(&clock, at.saturating_sub(now)).await;
                    }
                    _ => process.services.shutdown_armed.changed().await,
                }
            }
        })
    }
}
