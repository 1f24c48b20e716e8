//! The fixed world (one world among the generated ones: its manifest, programs), the
//! services' data every world shares (payment intents, tickets, secrets), and the canaries
//! planted in it.

use crate::names::{HTTP_TOKEN, HTTP_TOKEN_ENV, NOTES_TOKEN, OAUTH_JWKS, SECRET};
use warden_faults::{Canary, WorldFile};

use crate::env::world::World;

pub const MANIFEST: &str = r#"{
  "server": { "name": "sim", "journals": "journals", "max_concurrent_runs": 4, "notify": ["notify"] },
  "tools": [
    { "name": "echo", "program": "echo.star", "limits": { "max_steps": 10000 }, "once": { "by": ["text"], "keep": "1d" } },
    { "name": "refund", "program": "refund.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "pay": { "cap": "payments.stripe.refund", "each": { "amount": "50.00", "currency": "USD" }, "uses": 1,
        "needs": { "get": { "cap": "net.http.get", "only": ["https://payments.sim/v1/payment_intents/*"] },
                   "post": { "cap": "net.http.post", "only": ["https://payments.sim/v1/refunds"], "idempotency_key": true },
                   "key": { "env": "STRIPE_SECRET_KEY" } } } },
      "once": { "by": ["order"], "keep": "1d" },
      "quota": { "window": "24h", "calls": 30, "money": { "amount": "400.00", "currency": "USD" } } },
    { "name": "note", "program": "note.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "notes": { "cap": "net.http.post", "only": ["https://notes.sim/notes"] } } },
    { "name": "note_safe", "program": "note.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "notes": { "cap": "net.http.post", "only": ["https://notes.sim/notes"], "idempotency_key": true } } },
    { "name": "close", "program": "close.star", "once": { "by": ["ticket"], "keep": "1d" },
      "grants": { "db": { "cap": "db.sqlite", "path": "desk.db", "mode": "write" } } }
  ]
}"#;

const ECHO: &str = "def main(text: str) -> dict:\n    \"\"\"Echo.\n\n    Args:\n        text: The text.\n    \"\"\"\n    print(\"echo\", text)\n    return {\"echo\": text}\n";
const REFUND: &str = "def main(pay, order: str, amount: money) -> dict:\n    \"\"\"Refund.\n\n    Args:\n        order: The intent.\n        amount: How much.\n    \"\"\"\n    intent = pay.get(\"https://payments.sim/v1/payment_intents/\" + order)\n    if intent.get(\"status\") != 200:\n        fail(\"no such order\")\n    r = pay.refund(order, amount)\n    return {\"status\": r.get(\"status\"), \"amount\": amount.amount}\n";
const NOTE: &str = "def main(notes, text: str) -> dict:\n    \"\"\"Save a note.\n\n    Args:\n        text: The note.\n    \"\"\"\n    r = notes.post(\"https://notes.sim/notes\", json = {\"text\": text})\n    return {\"status\": r.get(\"status\"), \"error\": r.get(\"error\")}\n";
const CLOSE: &str = "def main(db, ticket: int) -> dict:\n    \"\"\"Close a ticket.\n\n    Args:\n        ticket: The ticket.\n    \"\"\"\n    return {\"changes\": db.execute(\"UPDATE tickets SET open = 0 WHERE id = ? AND open = 1\", [ticket])[\"changes\"]}\n";

/// The secrets every world's variables hold: the checker searches every output for them.
pub const SECRETS: &[&str] = &[
    SECRET,
    NOTES_TOKEN,
    HTTP_TOKEN,
    crate::names::MODEL_KEY,
    // Its connection URL's words ("postgres", "warden") are no secret; its password is.
    crate::names::PG_PASSWORD,
    crate::names::STORE_PASSWORD,
];

/// Installs the world's manifest and programs (the fixed world when `file` is `None`), the
/// secrets, and the services' data; plants a canary.
pub fn install(world: &World, file: Option<&WorldFile>, canary: Option<Canary>) {
    match file {
        Some(file) => {
            world.transport.set(file.transport);
            if file.transport == warden_faults::Transport::HttpOauth {
                world.install("jwks.json", OAUTH_JWKS.as_bytes());
            }
            world.install("manifest.json", file.manifest.as_bytes());
            for (name, text) in &file.programs {
                world.install(name, text.as_bytes());
            }
        }
        None => {
            world.install("manifest.json", MANIFEST.as_bytes());
            for (name, text) in
                [("echo.star", ECHO), ("refund.star", REFUND), ("note.star", NOTE), ("close.star", CLOSE)]
            {
                world.install(name, text.as_bytes());
            }
        }
    }
    world.services.variables.borrow_mut().insert("STRIPE_SECRET_KEY".into(), SECRET.into());
    world.services.variables.borrow_mut().insert("NOTES_TOKEN".into(), NOTES_TOKEN.into());
    world.services.variables.borrow_mut().insert(crate::names::MODEL_KEY_ENV.into(), crate::names::MODEL_KEY.into());
    world.services.variables.borrow_mut().insert(HTTP_TOKEN_ENV.into(), HTTP_TOKEN.into());
    // pi_2001 stays the services' intent in EUR: a refund of it in USD must be refused.
    for n in (0..20).filter(|&n| n != 1) {
        world.services.intents.borrow_mut().insert(format!("pi_{}", 2000 + n), (100_000, "usd".into()));
    }
    let url = crate::names::PG_URL;
    world.services.variables.borrow_mut().insert(crate::names::PG_URL_ENV.into(), url.into());
    let store = crate::names::STORE_URL;
    world.services.variables.borrow_mut().insert(crate::names::STORE_URL_ENV.into(), store.into());
    // An operator's world makes its own SQLite databases, from their grants' `init`.
    let own = file.is_some_and(|file| file.own.is_some());
    let sqlite = (!own).then(|| World::path("desk.db"));
    for db in sqlite.into_iter().chain([std::path::PathBuf::from(crate::names::PG_DESK)]) {
        world.services.sql(&db, "CREATE TABLE tickets (id INTEGER PRIMARY KEY, open INTEGER)");
        for n in 1..=20 {
            world.services.sql(&db, &format!("INSERT INTO tickets (id, open) VALUES ({n}, 1)"));
        }
    }
    if let Some(own) = file.and_then(|file| file.own.as_ref()) {
        world.services.serve_as_own_world(own.services_ignore_keys);
        *world.services.own_currency.borrow_mut() = file.and_then(|file| refund_currency(&file.manifest));
        for (name, text) in &own.files {
            world.install(name, text.as_bytes());
        }
        world.services.variables.borrow_mut().extend(own.variables.clone());
        if own.files.keys().any(|name| name.starts_with("journals/")) {
            crate::checks::truth::inherit(world);
            // The world's clock starts where the journals' did: a `once.keep`, a quota window or
            // an input round's deadline counts from when the state was written.
            let ledger = own.files.get(&format!("journals/{}", warden::store::ledger::LEDGER_FILE));
            let latest = ledger
                .into_iter()
                .flat_map(|text| text.lines())
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok()?["rec"]["at_ms"].as_u64());
            if let Some(latest) = latest.max() {
                let wall_now = crate::env::clock::EPOCH_MS + world.clock.now();
                world.clock.advance(latest.saturating_sub(wall_now));
            }
        }
    }
    match canary {
        Some(Canary::LyingFsync) => world.disk.faults.borrow_mut().lying_fsync = true,
        Some(Canary::IgnoreIdempotencyKeys) => world.services.ignore_idempotency_keys.set(true),
        None => {}
    }
}

/// The currency of an operator's manifest's first refund grant (its `each` or `max`), in lower
/// case as Stripe writes it.
fn refund_currency(manifest: &str) -> Option<String> {
    let manifest: serde_json::Value = serde_json::from_str(manifest).ok()?;
    let grants = manifest["tools"].as_array()?.iter().flat_map(|tool| tool["grants"].as_object().into_iter().flatten());
    let refund = grants.map(|(_, grant)| grant).find(|grant| grant["cap"] == "payments.stripe.refund")?;
    let limit = [&refund["each"], &refund["max"]].into_iter().find(|limit| limit["currency"].is_string())?;
    Some(limit["currency"].as_str()?.to_ascii_lowercase())
}
