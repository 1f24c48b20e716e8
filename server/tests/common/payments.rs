//! A local payments test service on 127.0.0.1, shaped like Stripe's: payment intents to look
//! up, refunds (form-encoded) with an idempotency-key store, and a record of what it really
//! did. One thread per connection, `Connection: close`.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::{json, Value};

#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

#[derive(Default)]
pub struct Ledger {
    pub requests: Vec<Seen>,
    /// Notes really saved (their bodies).
    pub notes: Vec<String>,
    /// Refunds really made: (payment intent, minor units).
    pub refunds: Vec<(String, i64)>,
    /// The answer given to each idempotency key (the service's own records of its refunds).
    pub answered: BTreeMap<String, Value>,
}

/// How long a refund of a payment intent `pi_noanswer...` goes unanswered.
const UNANSWERED_REFUND_MS: u64 = 10_000;

/// How long the lookup of a payment intent `pi_slowlookup...` takes.
const LINGERING_LOOKUP_MS: u64 = 5_000;

pub struct Payments {
    pub port: u16,
    pub ledger: Arc<Mutex<Ledger>>,
}

impl Payments {
    pub fn start() -> Payments {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let shared = Arc::clone(&ledger);
        let port = super::loopback::listen(move |stream| serve(stream, &shared));
        Payments { port, ledger }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A private copy of the shop example whose payments service is this one.
    pub fn shop(&self) -> tempfile::TempDir {
        let dir = super::private_copy(&super::repo_root().join("examples/shop"));
        for file in ["manifest.json", "refund.star"] {
            let path = dir.path().join(file);
            let text = std::fs::read_to_string(&path).unwrap().replace("https://api.stripe.com", &self.base());
            std::fs::write(&path, text).unwrap();
        }
        dir
    }

    /// The shop with a deadline short enough for a test (3 s): a refund unanswered past it
    /// waits for a person.
    pub fn shop_with_a_short_deadline(&self) -> tempfile::TempDir {
        let dir = self.shop();
        let path = dir.path().join("manifest.json");
        let mut manifest: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        manifest["tools"][0]["deadline"] = json!("3s");
        manifest["tools"][0]["net"] = json!({"connect_timeout_ms": 300, "timeout_ms": 700});
        std::fs::write(&path, manifest.to_string()).unwrap();
        dir
    }

    pub fn refunded_minor(&self) -> i64 {
        self.ledger.lock().unwrap().refunds.iter().map(|(_, minor)| minor).sum()
    }
}

fn serve(stream: TcpStream, ledger: &Mutex<Ledger>) {
    let Some(request) = super::loopback::read_request(&stream) else { return };
    let (method, path, headers) = (request.method, request.path, request.headers);
    let body = String::from_utf8_lossy(&request.body).into_owned();
    let seen = Seen { method: method.clone(), path: path.clone(), headers: headers.clone(), body: body.clone() };
    let (status, answer) = {
        let mut ledger = ledger.lock().unwrap();
        ledger.requests.push(seen);
        answer(&mut ledger, &method, &path, &headers, &body)
    };
    // A payment intent `pi_slowlookup...` is looked up slowly: its run is surely in progress
    // (owned by its instance) meanwhile, so a test can kill that instance with a run to take over.
    if path.starts_with("/v1/payment_intents/pi_slowlookup") {
        thread::sleep(std::time::Duration::from_millis(LINGERING_LOOKUP_MS));
    }
    // A refund of a payment intent `pi_noanswer...` is made and never answered in time (the
    // answer comes after every client's timeout): the refund an operator must decide.
    if path == "/v1/refunds" && body.contains("payment_intent=pi_noanswer") {
        thread::sleep(std::time::Duration::from_millis(UNANSWERED_REFUND_MS));
    }
    // A note `linger-<ms>` is saved at once and answered that much later (a slow service).
    if let Some(ms) = body.strip_prefix("linger-").and_then(|ms| ms.parse::<u64>().ok()) {
        thread::sleep(std::time::Duration::from_millis(ms));
    }
    if path == "/v1/notes" && body.contains("slow") {
        // The note is saved; the answer comes too late for the client's timeout.
        thread::sleep(std::time::Duration::from_millis(1500));
    }
    let text = answer.to_string();
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
}

fn answer(
    ledger: &mut Ledger,
    method: &str,
    path: &str,
    headers: &BTreeMap<String, String>,
    body: &str,
) -> (u16, Value) {
    if let Some(id) = path.strip_prefix("/v1/payment_intents/") {
        return match id {
            "pi_1001" => (200, json!({"id": id, "amount": 5000, "currency": "usd", "status": "succeeded"})),
            "pi_1002" => (200, json!({"id": id, "amount": 30000, "currency": "usd", "status": "succeeded"})),
            "pi_1003" => (200, json!({"id": id, "amount": 1000, "currency": "usd", "status": "succeeded"})),
            // One intent in each class of currency, paid in Stripe's own minor unit.
            "pi_jpy" => (200, json!({"id": id, "amount": 5000, "currency": "jpy", "status": "succeeded"})),
            "pi_bhd" => (200, json!({"id": id, "amount": 5000, "currency": "bhd", "status": "succeeded"})),
            "pi_eur" => (200, json!({"id": id, "amount": 5000, "currency": "eur", "status": "succeeded"})),
            _ if id.starts_with("pi_9") || id.starts_with("pi_slowlookup") || id.starts_with("pi_noanswer") => {
                (200, json!({"id": id, "amount": 100000, "currency": "usd", "status": "succeeded"}))
            }
            _ => (404, json!({"error": {"message": format!("No such payment_intent: '{id}'")}})),
        };
    }
    if path == "/v1/refunds" && method == "POST" {
        let key = headers.get("idempotency-key").cloned();
        if let Some(earlier) = key.as_ref().and_then(|k| ledger.answered.get(k)) {
            return (200, earlier.clone());
        }
        let form: BTreeMap<String, String> = form_pairs(body);
        let minor: i64 = form.get("amount").and_then(|a| a.parse().ok()).unwrap_or(0);
        let intent = form.get("payment_intent").cloned().unwrap_or_default();
        ledger.refunds.push((intent.clone(), minor));
        // Stripe's refund object: its currency is the payment intent's.
        let currency = ["jpy", "bhd", "eur"].into_iter().find(|c| intent.contains(c)).unwrap_or("usd");
        let refund = json!({"id": format!("re_{}", ledger.refunds.len()), "object": "refund", "amount": minor,
            "currency": currency, "payment_intent": intent, "status": "succeeded"});
        if let Some(key) = key {
            ledger.answered.insert(key, refund.clone());
        }
        return (200, refund);
    }
    if path == "/v1/notes" && method == "POST" {
        ledger.notes.push(body.to_string());
        return (201, json!({"saved": ledger.notes.len()}));
    }
    (404, json!({"error": {"message": "no such endpoint"}}))
}

fn form_pairs(body: &str) -> BTreeMap<String, String> {
    body.split('&').filter_map(|pair| pair.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}
