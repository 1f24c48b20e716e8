//! Money in each currency's own minor unit (issue 45 item 2), against the local payments
//! service: a refund in a zero-decimal currency (JPY), a three-decimal one (BHD) and a
//! two-decimal one (EUR) moves exactly what the grant checked, in what Stripe's `amount`
//! means for that currency, and the ledger holds the same; an unknown currency is refused by
//! `warden check`, naming the field.

mod common;

use common::payments::Payments;
use common::{Era, Wire};
use serde_json::{json, Value};

const SECRET: &str = "sk_test_CURRENCIES_1";

/// The shop, its limits in `currency` (each, quota) as `each` and `quota`.
fn shop_in(payments: &Payments, currency: &str, each: &str, quota: &str) -> tempfile::TempDir {
    let dir = payments.shop();
    let path = dir.path().join("manifest.json");
    let mut manifest: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let tool = &mut manifest["tools"][0];
    tool["grants"]["pay"]["each"] = json!({"amount": each, "currency": currency});
    tool["quota"]["money"] = json!({"amount": quota, "currency": currency});
    std::fs::write(&path, manifest.to_string()).unwrap();
    dir
}

fn refund(payments: &Payments, currency: &str, (each, quota): (&str, &str), intent: &str, amount: &str) -> Value {
    let mut wire = Wire::start_dir(shop_in(payments, currency, each, quota), &[("STRIPE_SECRET_KEY", SECRET)]);
    let arguments = json!({"order": intent, "amount": {"amount": amount, "currency": currency}});
    let answer =
        wire.request(Era::Modern, json!(1), "tools/call", json!({"name": "refund_order", "arguments": arguments}));
    let ledger: String = (common::walk(&wire.dir.path().join("journals")).iter())
        .filter(|path| path.file_name().is_some_and(|name| name.to_string_lossy() == "server.ledger"))
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect();
    json!({"answer": answer, "ledger": ledger})
}

#[test]
fn a_refund_moves_what_was_checked_in_each_class_of_currency() {
    let payments = Payments::start();
    // Yen have no minor unit: 500 JPY is Stripe's amount=500, never 50000.
    let jpy = refund(&payments, "JPY", ("1000", "5000"), "pi_jpy", "500");
    assert_eq!(jpy["answer"]["result"]["isError"], json!(false), "{jpy}");
    // A dinar has a thousand fils: 1.25 BHD is amount=1250.
    let bhd = refund(&payments, "BHD", ("2.000", "10.000"), "pi_bhd", "1.25");
    assert_eq!(bhd["answer"]["result"]["isError"], json!(false), "{bhd}");
    let eur = refund(&payments, "EUR", ("20.00", "100.00"), "pi_eur", "12.50");
    assert_eq!(eur["answer"]["result"]["isError"], json!(false), "{eur}");
    let refunds = payments.ledger.lock().unwrap().refunds.clone();
    let expected = [("pi_jpy".to_string(), 500), ("pi_bhd".to_string(), 1250), ("pi_eur".to_string(), 1250)];
    assert_eq!(refunds, expected, "what the service was asked to move");
    // The ledger and the answer say the same amounts, written in each currency's own digits.
    assert!(jpy["ledger"].as_str().unwrap().contains(r#""amount":"500","currency":"JPY""#), "{jpy}");
    assert!(bhd["ledger"].as_str().unwrap().contains(r#""amount":"1.250","currency":"BHD""#), "{bhd}");
    assert_eq!(jpy["answer"]["result"]["structuredContent"]["result"]["amount"], json!("500"), "{jpy}");
}

#[test]
fn warden_check_refuses_an_unknown_currency_and_a_fraction_of_a_yen() {
    let payments = Payments::start();
    for (currency, each, said) in [("XYZ", "5.00", "ISO 4217"), ("JPY", "5.5", "no minor unit")] {
        let dir = shop_in(&payments, currency, each, "100");
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
            .arg("check")
            .arg(dir.path().join("manifest.json"))
            .env("STRIPE_SECRET_KEY", SECRET)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(!output.status.success(), "{currency}: {text}");
        assert!(text.contains("tools[0].grants.pay.each") && text.contains(said), "{currency}: {text}");
    }
}
