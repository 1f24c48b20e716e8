//! The shop example on the real binary, against a local payments test service on 127.0.0.1:
//! a refund within its grant, `once` answering a repeat without a second refund, the
//! broker's refusal, and the secret appearing in no byte Warden wrote anywhere.

mod common;

use std::path::Path;
use std::time::Duration;

use common::payments::Payments;
use common::{Era, Wire};
use serde_json::json;

const SECRET: &str = "sk_test_WARDEN_SECRET_51HqLyj";

fn every_byte_under(dir: &Path, into: &mut Vec<u8>) {
    for path in common::walk(dir) {
        into.extend(std::fs::read(&path).unwrap());
    }
}

#[test]
fn the_shop_refunds_once_within_its_grant_and_never_writes_the_secret() {
    let payments = Payments::start();
    let mut wire = Wire::start_dir(payments.shop(), &[("STRIPE_SECRET_KEY", SECRET)]);
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
    // The program narrows the refund to the intent it read and what was paid on it (10.00):
    // within the grant's 50.00 a refund, over what was paid it is refused before it is sent.
    let paid_less = wire.request(
        Era::Modern,
        json!(6),
        "tools/call",
        json!({"name": "refund_order", "arguments": {"order": "pi_1003", "amount": {"amount": "20.00", "currency": "USD"}}}),
    );
    assert_eq!(
        paid_less["result"]["content"][0]["text"],
        json!("the narrowed 'payments.stripe.refund' allows at most 10.00 USD; this action needs 20.00 USD"),
        "{paid_less}"
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
    let dir = payments.shop();
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

/// A client that sent a progress token hears the run id at start, each action begun and
/// done, and what the program reports with `progress(...)`; at the log level it asked for,
/// it hears the program's prints (info) and the run's lifecycle (debug). Both eras.
#[test]
fn progress_per_action_and_log_messages_at_the_level_asked() {
    let payments = Payments::start();
    let dir = payments.shop();
    let program = dir.path().join("refund.star");
    let text = std::fs::read_to_string(&program).unwrap().replace(
        "    refund = refund_of_order.refund(order, amount)\n",
        "    print(\"order checked\")\n    progress(1, 2, \"order checked\")\n    refund = refund_of_order.refund(order, amount)\n",
    );
    std::fs::write(&program, text).unwrap();
    let mut wire = Wire::start_dir(dir, &[("STRIPE_SECRET_KEY", SECRET)]);
    let call = |wire: &mut Wire, era: Era, id: i64, order: &str, meta: serde_json::Value| {
        let arguments = json!({"order": order, "amount": {"amount": "1", "currency": "USD"}});
        wire.send_request(
            era,
            json!(id),
            "tools/call",
            json!({"name": "refund_order", "arguments": arguments, "_meta": meta}),
        );
    };
    let until_answer = |wire: &mut Wire, id: i64| {
        let mut heard = Vec::new();
        loop {
            let message = wire.recv();
            if message["id"] == json!(id) {
                assert_eq!(message["result"]["isError"], json!(false), "{message}");
                return heard;
            }
            heard.push(message);
        }
    };
    call(
        &mut wire,
        Era::Modern,
        1,
        "pi_9001",
        json!({"progressToken": "p1", "io.modelcontextprotocol/logLevel": "debug"}),
    );
    let heard = until_answer(&mut wire, 1);
    let progress: Vec<&serde_json::Value> =
        heard.iter().filter(|m| m["method"] == "notifications/progress").map(|m| &m["params"]).collect();
    let texts: Vec<&str> = progress.iter().map(|p| p["message"].as_str().unwrap()).collect();
    assert!(texts[0].starts_with("run ") && texts[0].ends_with(" started"), "{texts:?}");
    for expected in [
        "action 0 (GET payments.stripe.refund) begun",
        "action 0 done",
        "1 of 2: order checked",
        "action 1 (REFUND payments.stripe.refund) begun",
        "action 1 done",
    ] {
        assert!(texts.contains(&expected), "{expected:?} missing from {texts:?}");
    }
    let numbers: Vec<u64> = progress.iter().map(|p| p["progress"].as_u64().unwrap()).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "progress must increase: {numbers:?}");
    assert!(progress.iter().all(|p| p["progressToken"] == json!("p1")));
    let logs: Vec<(&str, &str)> = heard
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .map(|m| (m["params"]["level"].as_str().unwrap(), m["params"]["data"]["text"].as_str().unwrap()))
        .collect();
    assert!(logs.contains(&("info", "print: order checked")), "{logs:?}");
    assert!(logs.iter().any(|(level, text)| *level == "debug" && *text == "started"), "{logs:?}");

    // No log level, no token: nothing but the answer.
    call(&mut wire, Era::Modern, 2, "pi_9002", json!({}));
    assert_eq!(until_answer(&mut wire, 2), Vec::<serde_json::Value>::new());

    // 2025-11-25: the level set with logging/setLevel; info and above only.
    wire.initialize();
    wire.request(Era::Legacy, json!(3), "logging/setLevel", json!({"level": "info"}));
    call(&mut wire, Era::Legacy, 4, "pi_9003", json!({}));
    let heard = until_answer(&mut wire, 4);
    let logs: Vec<&str> = heard.iter().map(|m| m["params"]["data"]["text"].as_str().unwrap()).collect();
    assert_eq!(logs, ["print: order checked"], "{heard:?}");
    let mut bytes = Vec::new();
    for message in &wire.received {
        bytes.extend(serde_json::to_vec(message).unwrap());
    }
    assert!(!String::from_utf8_lossy(&bytes).contains(SECRET));
}

/// A program that narrows wider than its grant fails as a capability error before anything
/// is sent; the journal's begin record carries the narrowing of an action taken through one.
#[test]
fn a_narrowing_wider_than_the_grant_fails_the_run_and_a_narrowed_action_is_journaled_so() {
    let payments = Payments::start();
    let dir = payments.shop();
    let program = dir.path().join("refund.star");
    let original = std::fs::read_to_string(&program).unwrap();
    let wider = original
        .replace("max = paid, uses = 1)", "max = paid, uses = 1, each = {\"amount\": \"60\", \"currency\": \"USD\"})");
    assert_ne!(wider, original, "the example narrows its refund");
    std::fs::write(&program, wider).unwrap();
    let mut wire = Wire::start_dir(dir, &[("STRIPE_SECRET_KEY", SECRET)]);
    let arguments = json!({"order": "pi_1001", "amount": {"amount": "5", "currency": "USD"}});
    let refused =
        wire.request(Era::Modern, json!(1), "tools/call", json!({"name": "refund_order", "arguments": arguments}));
    let text = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("narrow: each=60.00 USD is more than 50.00 USD"), "{refused}");
    assert_eq!(refused["result"]["_meta"]["dev.warden/run"]["outcome"], json!("capability"));
    assert_eq!(payments.refunded_minor(), 0);

    let payments = Payments::start();
    let mut wire = Wire::start_dir(payments.shop(), &[("STRIPE_SECRET_KEY", SECRET)]);
    let done =
        wire.request(Era::Modern, json!(1), "tools/call", json!({"name": "refund_order", "arguments": arguments}));
    assert_eq!(done["result"]["isError"], json!(false), "{done}");
    let journals: String = common::walk(&wire.dir.path().join("journals/refund_order"))
        .into_iter()
        .map(|path| std::fs::read_to_string(path).unwrap_or_default())
        .collect();
    assert!(
        journals
            .contains("\"narrowed\":{\"only\":[\"pi_1001\"],\"max\":{\"minor\":5000,\"currency\":\"USD\"},\"uses\":1}"),
        "{journals}"
    );
}
