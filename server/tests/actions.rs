//! The shop example on the real binary, against a local payments test service on 127.0.0.1:
//! a refund within its grant, `once` answering a repeat without a second refund, the
//! broker's refusal, and the secret appearing in no byte Warden wrote anywhere.

mod common;

use std::path::Path;
use std::time::Duration;

use common::payments::Payments;
use common::{private_copy, repo_root, Era, Wire};
use serde_json::json;

const SECRET: &str = "sk_test_WARDEN_SECRET_51HqLyj";

fn shop(payments: &Payments) -> tempfile::TempDir {
    let dir = private_copy(&repo_root().join("examples/shop"));
    let manifest = dir.path().join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap().replace("https://api.stripe.com", &payments.base());
    std::fs::write(&manifest, text).unwrap();
    let program = dir.path().join("refund.star");
    let text = std::fs::read_to_string(&program).unwrap().replace("https://api.stripe.com", &payments.base());
    std::fs::write(&program, text).unwrap();
    dir
}

fn every_byte_under(dir: &Path, into: &mut Vec<u8>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            every_byte_under(&path, into);
        } else {
            into.extend(std::fs::read(&path).unwrap());
        }
    }
}

#[test]
fn the_shop_refunds_once_within_its_grant_and_never_writes_the_secret() {
    let payments = Payments::start();
    let mut wire = Wire::start_dir(shop(&payments), &[("STRIPE_SECRET_KEY", SECRET)]);
    let arguments = json!({"order": "pi_1001", "amount": {"amount": "12.5", "currency": "USD"}});
    let done =
        wire.request(Era::Modern, json!(1), "tools/call", json!({"name": "refund_order", "arguments": arguments}));
    assert_eq!(done["result"]["isError"], json!(false), "{done}");
    assert_eq!(done["result"]["structuredContent"]["result"]["amount"], json!("12.50"));
    assert_eq!(payments.refunded_minor(), 1250);

    // The service saw the secret as a bearer token and an idempotency key on the refund.
    let posts: Vec<_> =
        payments.ledger.lock().unwrap().requests.iter().filter(|r| r.method == "POST").cloned().collect();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].headers.get("authorization"), Some(&format!("Bearer {SECRET}")));
    assert!(posts[0].headers.get("idempotency-key").is_some_and(|k| k.starts_with("warden-")));
    assert_eq!(posts[0].body, "payment_intent=pi_1001&amount=1250");

    // once: the same order again is the same run, answered the same, refunded once.
    let again =
        wire.request(Era::Modern, json!(2), "tools/call", json!({"name": "refund_order", "arguments": arguments}));
    assert_eq!(again["result"]["structuredContent"], done["result"]["structuredContent"]);
    wire.initialize();
    let again =
        wire.request(Era::Legacy, json!(3), "tools/call", json!({"name": "refund_order", "arguments": arguments}));
    assert_eq!(again["result"]["content"], done["result"]["content"]);
    assert_eq!(payments.refunded_minor(), 1250);

    // The broker refuses more than `each`, before anything is sent.
    let over = wire.request(
        Era::Modern,
        json!(4),
        "tools/call",
        json!({"name": "refund_order", "arguments": {"order": "pi_1002", "amount": {"amount": "300.00", "currency": "USD"}}}),
    );
    assert_eq!(
        over["result"]["content"][0]["text"],
        json!("'payments.stripe.refund' allows at most 50.00 USD per action; this action needs 300.00 USD")
    );
    assert_eq!(payments.refunded_minor(), 1250);
    let unknown = wire.request(
        Era::Modern,
        json!(5),
        "tools/call",
        json!({"name": "refund_order", "arguments": {"order": "pi_404", "amount": {"amount": "1", "currency": "USD"}}}),
    );
    assert!(unknown["result"]["content"][0]["text"].as_str().unwrap().contains("was not found"), "{unknown}");

    wire.close_stdin();
    assert!(wire.wait_exit(Duration::from_secs(20)).success());
    let mut written = Vec::new();
    every_byte_under(wire.dir.path(), &mut written);
    written.extend(wire.stderr().into_bytes());
    for message in &wire.received {
        written.extend(message.to_string().into_bytes());
    }
    let text = String::from_utf8_lossy(&written);
    assert!(text.contains("pi_1001") && text.contains("\"record\":\"begin\""), "the scan covered the journals");
    assert!(!text.contains(SECRET), "the secret was written somewhere Warden writes");
    assert!(!text.contains(&SECRET[8..20]), "a part of the secret was written");
}

#[test]
fn a_missing_secret_variable_stops_the_server_naming_it() {
    let payments = Payments::start();
    let dir = shop(&payments);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("mcp")
        .arg(dir.path().join("manifest.json"))
        .env_remove("STRIPE_SECRET_KEY")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the environment variable STRIPE_SECRET_KEY is not set"), "{stderr}");
}
