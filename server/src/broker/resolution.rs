//! An operator's word that an action in doubt happened (`warden resolve --happened`): the
//! result it gives, checked against the shape the program reads for the action's kind and
//! filled in where a part may be left out, so a resumed program sees what a performed action
//! would have given it.

use serde_json::{json, Map, Value};

use super::{Action, Kind, Method};

/// What `--happened` takes for each kind of action, for `--help` and the README.
pub const SHAPES: &str = "an HTTP action (net.http.*, payments.stripe.refund): \
{\"status\": 100-599, \"json\": <the response's JSON>} (optional: \"body\", the response's text; \
\"headers\", an object of strings); a database write (db.sqlite, db.postgres): \
{\"changes\": <rows changed, a whole number from 0>} (optional: \"rows\", an array of objects)";

/// A filled-in `--happened` argument for `action`, for the waiting record and `mcp status`:
/// the service's own answer shape where the kind's is known (a Stripe refund object, its
/// amount in Stripe's unit), so a resumed program finds the fields it reads.
pub fn example(action: &Action) -> String {
    match action.kind {
        Kind::Sqlite | Kind::Postgres => r#"{"changes": 1}"#.to_string(),
        Kind::Model => r#"{"status": 200, "text": "<the completion>"}"#.to_string(),
        Kind::StripeRefund if action.method == Method::Refund => refund_example(action),
        _ => r#"{"status": 200, "json": {}}"#.to_string(),
    }
}

/// A Stripe refund object for `action`, its id to be read from Stripe's dashboard.
fn refund_example(action: &Action) -> String {
    let money = action.money();
    let amount = money.as_ref().and_then(|money| super::stripe::amount(money).ok()).unwrap_or(0);
    let currency = money.map(|money| money.currency.to_ascii_lowercase()).unwrap_or_default();
    let refund = json!({"id": "re_<from the dashboard>", "object": "refund", "amount": amount,
        "currency": currency, "payment_intent": action.body, "status": "succeeded"});
    format!(r#"{{"status": 200, "json": {refund}}}"#)
}

/// The fields of a Stripe refund object a program reads, and their JSON types.
const REFUND_FIELDS: [(&str, &str); 4] =
    [("id", "string"), ("amount", "integer"), ("currency", "string"), ("status", "string")];

/// The result to journal for `action` from the operator's `given`, or what is wrong with it,
/// naming the field and showing an example.
pub fn checked(action: &Action, given: Value) -> Result<Value, String> {
    let kind = action.kind.name();
    let wrong =
        |problem: String| format!("--happened: {problem} for a {kind} action; for example: {}", example(action));
    let Value::Object(given) = given else {
        return Err(wrong("the result must be a JSON object".to_string()));
    };
    match action.kind {
        Kind::Sqlite | Kind::Postgres => database_result(given).map_err(wrong),
        Kind::Model => model_result(given).map_err(wrong),
        Kind::StripeRefund if action.method == Method::Refund => {
            http_result(given).and_then(|result| refund_result(result, action)).map_err(wrong)
        }
        _ => http_result(given).map_err(wrong),
    }
}

/// A refund's result: a success carries the refund object a program reads (its id, amount,
/// currency, status), or the resumed program fails on the field it lacks while the customer
/// was refunded.
fn refund_result(result: Value, action: &Action) -> Result<Value, String> {
    let status = result["status"].as_u64().unwrap_or(0);
    if !(200..300).contains(&status) {
        return Ok(result);
    }
    for (field, kind) in REFUND_FIELDS {
        let value = &result["json"][field];
        let fits = match kind {
            "integer" => value.is_i64(),
            _ => value.is_string(),
        };
        if !fits {
            return Err(format!(
                "`json.{field}` must be the refund's {field} ({kind}, as Stripe's refund object has it)"
            ));
        }
    }
    let expected = action.money().and_then(|money| super::stripe::amount(&money).ok());
    match (expected, result["json"]["amount"].as_i64()) {
        (Some(expected), Some(given)) if expected != given => Err(format!(
            "`json.amount` is {given}, but the action refunds {expected} in Stripe's unit: give the refund this \
             action made"
        )),
        _ => Ok(result),
    }
}

fn unknown_keys(given: &Map<String, Value>, known: &[&str]) -> Result<(), String> {
    match given.keys().find(|key| !known.contains(&key.as_str())) {
        Some(key) => Err(format!("`{key}` is not a field of the result (its fields: {})", known.join(", "))),
        None => Ok(()),
    }
}

fn http_result(mut given: Map<String, Value>) -> Result<Value, String> {
    unknown_keys(&given, &["status", "json", "body", "headers"])?;
    match given.get("status").and_then(Value::as_u64) {
        Some(status) if (100..=599).contains(&status) => {}
        _ => return Err("`status` must be the HTTP status, a whole number from 100 to 599".to_string()),
    }
    if given.get("body").is_some_and(|body| !body.is_string()) {
        return Err("`body` must be the response's text, a string".to_string());
    }
    match given.get("headers") {
        None => {}
        Some(Value::Object(headers)) if headers.values().all(Value::is_string) => {}
        Some(_) => return Err("`headers` must be an object whose values are strings".to_string()),
    }
    let json = given.remove("json").unwrap_or(Value::Null);
    let body = match given.remove("body") {
        Some(body) => body,
        None if json.is_null() => json!(""),
        None => json!(json.to_string()),
    };
    let headers = given.remove("headers").unwrap_or(json!({}));
    Ok(json!({"status": given["status"], "headers": headers, "body": body, "json": json}))
}

fn database_result(given: Map<String, Value>) -> Result<Value, String> {
    unknown_keys(&given, &["changes", "rows"])?;
    let Some(changes) = given.get("changes").and_then(Value::as_u64) else {
        return Err("`changes` must be the rows the write changed, a whole number from 0".to_string());
    };
    let rows = given.get("rows").cloned().unwrap_or(json!([]));
    if !rows.as_array().is_some_and(|rows| rows.iter().all(Value::is_object)) {
        return Err("`rows` must be an array of objects".to_string());
    }
    Ok(json!({"rows": rows, "changes": changes}))
}

fn model_result(given: Map<String, Value>) -> Result<Value, String> {
    unknown_keys(&given, &["status", "text", "usage"])?;
    let Some(text) = given.get("text").and_then(Value::as_str) else {
        return Err("`text` must be the completion, a string".to_string());
    };
    let usage = given.get("usage").cloned().unwrap_or(json!({"input_tokens": 0, "output_tokens": 0}));
    Ok(json!({"status": 200, "text": text, "usage": usage}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(kind: &str, method: &str) -> Action {
        serde_json::from_value(json!({"op": 0, "grant": "g", "kind": kind, "method": method, "target": "t",
            "headers": {}, "body": "", "amount": null, "idempotency_key": null}))
        .unwrap()
    }

    #[test]
    fn a_partial_http_result_is_filled_in_and_a_wrong_one_is_named() {
        let post = action("net.http.post", "POST");
        assert_eq!(
            checked(&post, json!({"status": 201})).unwrap(),
            json!({"status": 201, "headers": {}, "body": "", "json": null})
        );
        assert_eq!(checked(&post, json!({"status": 201, "json": {"id": 7}})).unwrap()["body"], json!("{\"id\":7}"));
        for (given, named) in [
            (json!({"json": {}}), "`status`"),
            (json!({"status": 42}), "`status`"),
            (json!({"status": 200, "stauts": 1}), "`stauts` is not a field"),
            (json!({"status": 200, "body": 5}), "`body`"),
            (json!([201]), "a JSON object"),
        ] {
            let error = checked(&post, given.clone()).unwrap_err();
            assert!(error.contains(named) && error.contains("for example: {\"status\": 200"), "{given}: {error}");
        }
    }

    #[test]
    fn a_database_result_needs_its_changes() {
        let write = action("db.sqlite", "EXECUTE");
        assert_eq!(checked(&write, json!({"changes": 1})).unwrap(), json!({"rows": [], "changes": 1}));
        assert!(checked(&write, json!({"status": 201})).unwrap_err().contains("`status` is not a field"));
        let error = checked(&write, json!({"changes": -1})).unwrap_err();
        assert!(error.contains("`changes`") && error.contains("for example: {\"changes\": 1}"), "{error}");
    }

    #[test]
    fn a_model_result_needs_its_text_and_is_filled_in() {
        let complete = action("model", "COMPLETE");
        assert_eq!(
            checked(&complete, json!({"text": "done"})).unwrap(),
            json!({"status": 200, "text": "done", "usage": {"input_tokens": 0, "output_tokens": 0}})
        );
        let error = checked(&complete, json!({"status": 200})).unwrap_err();
        assert!(error.contains("`text`") && error.contains("for example: {\"status\": 200, \"text\""), "{error}");
    }

    /// A refund's `--happened` is Stripe's refund object: the example is one, and one without
    /// a field the program reads (the shop's `refund["json"]["id"]`) is refused, naming it.
    #[test]
    fn a_refund_result_carries_the_refund_object() {
        let refund: Action = serde_json::from_value(json!({"op": 1, "grant": "pay", "kind": "payments.stripe.refund",
            "method": "REFUND", "target": "", "headers": {}, "body": "pi_1001",
            "amount": {"amount": "12.50", "currency": "USD"}, "idempotency_key": "k"}))
        .unwrap();
        let example: Value = serde_json::from_str(&example(&refund)).unwrap();
        assert_eq!(example["json"]["amount"], 1250);
        assert_eq!(example["json"]["payment_intent"], "pi_1001");
        assert!(checked(&refund, example).is_ok());
        let bare = checked(&refund, json!({"status": 200, "json": {}})).unwrap_err();
        assert!(bare.contains("`json.id`"), "{bare}");
        let other =
            json!({"status": 200, "json": {"id": "re_1", "amount": 50, "currency": "usd", "status": "succeeded"}});
        assert!(checked(&refund, other).unwrap_err().contains("`json.amount` is 50"));
        assert!(checked(&refund, json!({"status": 402, "json": {"error": {}}})).is_ok(), "a refusal has no refund");
    }

    #[test]
    fn http_headers_must_be_strings() {
        let post = action("net.http.post", "POST");
        let given = json!({"status": 200, "headers": {"etag": "x"}});
        assert_eq!(checked(&post, given).unwrap()["headers"], json!({"etag": "x"}));
        let error = checked(&post, json!({"status": 200, "headers": {"etag": 1}})).unwrap_err();
        assert!(error.contains("`headers`"), "{error}");
    }
}
