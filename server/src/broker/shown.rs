//! An action as a person deciding about it sees it (`warden mcp status`, `warden runs show`,
//! `warden resolve`, the notify command's input): its kind and method, its full target (a
//! refund's endpoint and payment intent, which the action's `target` leaves empty), the money
//! it moves and its idempotency key. Written into the waiting record by the server, which
//! knows the grant, and read back by the operator's commands.

use serde_json::{json, Value};

use super::{Action, Kind, Method};
use crate::manifest::{CapabilityGrant, Grant};

/// The action as a person deciding about it needs it, as JSON; `grant` (the tool's grant the
/// action was taken through) names a refund's endpoint.
pub fn described(action: &Action, grant: Option<&Grant>) -> Value {
    let money = action.money();
    let body = match (action.kind, action.method) {
        (Kind::Model, _) | (_, Method::Refund) | (_, Method::Get) => None,
        _ if action.body.is_empty() => None,
        _ => Some(crate::base::text::clipped(
            &action.body,
            crate::limits::SHOWN_BODY_CHARS_MAX,
            "the run's journal has it whole",
        )),
    };
    json!({
        "op": action.op,
        "kind": action.kind.name(),
        "method": action.method.name(),
        "target": full_target(action, grant),
        "payment_intent": (action.method == Method::Refund).then(|| action.body.clone()),
        "amount": money.as_ref().map(|money| money.amount_text()),
        "currency": money.as_ref().map(|money| money.currency.clone()),
        "idempotency_key": action.idempotency_key,
        "body": body,
    })
}

/// Where the action goes: a refund's endpoint and payment intent, an HTTP action's URL, a
/// database write's statement.
fn full_target(action: &Action, grant: Option<&Grant>) -> String {
    match (action.kind, action.method) {
        (Kind::Model, _) => "the model provider (`model` in the manifest)".to_string(),
        (_, Method::Refund) => {
            let url = match grant {
                Some(Grant::Capability(grant)) => refund_url(grant),
                _ => None,
            };
            let url = url.unwrap_or_else(|| "Stripe's refunds endpoint".to_string());
            format!("POST {url}: a refund of payment intent {}", action.body)
        }
        _ => action.target.clone(),
    }
}

/// The URL a refund grant posts to (its `needs.post.only`).
fn refund_url(grant: &CapabilityGrant) -> Option<String> {
    match grant.needs.get("post") {
        Some(Grant::Capability(post)) => post.only.first().cloned(),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A refund of 12.50 USD on payment intent `pi_1001`, with its idempotency key.
    pub(crate) fn refund() -> Action {
        serde_json::from_value(json!({
            "op": 1, "grant": "pay", "kind": "payments.stripe.refund", "method": "REFUND", "target": "",
            "body": "pi_1001", "headers": {}, "amount": {"amount": "12.50", "currency": "USD"},
            "idempotency_key": "warden-abc-1"
        }))
        .unwrap()
    }

    /// A request body is kept for a person within its bound, saying how much was left out.
    #[test]
    fn a_long_body_is_clipped() {
        let mut post = refund();
        (post.kind, post.method, post.target) = (Kind::HttpPost, Method::Post, "https://example.test/".into());
        post.body = "y".repeat(crate::limits::SHOWN_BODY_CHARS_MAX + 10);
        let body = described(&post, None)["body"].as_str().unwrap().to_string();
        assert!(body.ends_with("(10 more characters; the run's journal has it whole)"), "{}", &body[body.len() - 80..]);
    }

    /// A refund in doubt names its intent, amount and key, and the endpoint the grant posts to.
    #[test]
    fn a_refund_is_described_whole() {
        let capability = |cap: Kind, only: &[&str], needs| CapabilityGrant {
            cap,
            only: only.iter().map(|url| url.to_string()).collect(),
            each: None,
            max: None,
            uses: None,
            needs,
            idempotency_key: true,
            headers: Default::default(),
            path: None,
            mode: None,
            init: None,
            max_tokens: None,
            url_env: None,
        };
        let post =
            Grant::Capability(capability(Kind::HttpPost, &["https://api.stripe.com/v1/refunds"], Default::default()));
        let grant = Grant::Capability(capability(Kind::StripeRefund, &[], [("post".to_string(), post)].into()));
        let shown = described(&refund(), Some(&grant));
        assert_eq!(shown["amount"], "12.50");
        assert_eq!(shown["currency"], "USD");
        assert_eq!(shown["payment_intent"], "pi_1001");
        assert_eq!(shown["idempotency_key"], "warden-abc-1");
        let target = shown["target"].as_str().unwrap();
        assert_eq!(target, "POST https://api.stripe.com/v1/refunds: a refund of payment intent pi_1001");
        assert!(described(&refund(), None)["target"].as_str().unwrap().contains("pi_1001"));
    }
}
