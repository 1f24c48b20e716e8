//! Performing one journaled action through the seam (`Env::net`, `Env::db`), with secrets
//! attached at send time and scrubbed from whatever comes back.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{scrub, urls, Action};
use crate::env::{DbRequest, Env, HttpRequest};
use crate::manifest::{CapabilityGrant, Grant, NetConfig};

/// What performing an action produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Performed {
    /// A result to journal as the action's done record.
    Done(Value),
    /// The request may have reached the service and cannot safely be sent again.
    InDoubt(String),
}

/// The secret values a grant attaches, by environment variable name. Missing variables are
/// refused at start, so a missing one here is a bug.
fn secret(env: &Env, name: &str) -> String {
    env.process.var(name).unwrap_or_default()
}

/// Every secret value a tool's grants can attach (for scrubbing).
pub fn secret_values(env: &Env, grants: &BTreeMap<String, Grant>) -> Vec<String> {
    crate::catalog::secret_variables(grants).iter().map(|name| secret(env, name)).filter(|v| !v.is_empty()).collect()
}

fn need<'a>(grant: &'a CapabilityGrant, name: &str) -> Option<&'a CapabilityGrant> {
    match grant.needs.get(name) {
        Some(Grant::Capability(need)) => Some(need),
        _ => None,
    }
}

fn need_secret(grant: &CapabilityGrant, name: &str) -> Option<String> {
    match grant.needs.get(name) {
        Some(Grant::Secret { env }) => Some(env.clone()),
        _ => None,
    }
}

/// The HTTP request an action sends, secrets attached, and whether resending it is safe.
fn http_request(
    env: &Env,
    grant: &CapabilityGrant,
    net: &NetConfig,
    action: &Action,
) -> Result<(HttpRequest, bool), String> {
    let mut headers: Vec<(String, String)> = action.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let (method, url, body, safe) = if grant.cap == "payments.stripe.refund" {
        let key = need_secret(grant, "key").map(|name| secret(env, &name)).unwrap_or_default();
        headers.push(("authorization".into(), format!("Bearer {key}")));
        if action.method == "GET" {
            let get = need(grant, "get").ok_or("the grant has no `needs.get`")?;
            let url = urls::allowed(&get.only, &action.target)?;
            ("GET".to_string(), url, String::new(), true)
        } else {
            let post = need(grant, "post").ok_or("the grant has no `needs.post`")?;
            let url = post.only.first().cloned().ok_or("`needs.post.only` is empty")?;
            let money = action.money().ok_or("a refund without an amount")?;
            let body: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("payment_intent", &action.body)
                .append_pair("amount", &money.minor.to_string())
                .finish();
            headers.push(("content-type".into(), "application/x-www-form-urlencoded".into()));
            if let Some(key) = &action.idempotency_key {
                headers.push(("idempotency-key".into(), key.clone()));
            }
            let safe = action.idempotency_key.is_some();
            ("POST".to_string(), url, body, safe)
        }
    } else {
        let url = urls::allowed(&grant.only, &action.target)?;
        for (name, (prefix, variable)) in &grant.headers {
            headers.push((name.to_ascii_lowercase(), format!("{prefix}{}", secret(env, variable))));
        }
        if let Some(key) = &action.idempotency_key {
            headers.push(("idempotency-key".into(), key.clone()));
        }
        let safe = action.method == "GET" || action.idempotency_key.is_some();
        (action.method.clone(), url, action.body.clone(), safe)
    };
    let request = HttpRequest {
        method,
        url,
        headers,
        body: body.into_bytes(),
        connect_timeout_ms: net.connect_timeout_ms.unwrap_or(0),
        timeout_ms: net.timeout_ms.unwrap_or(0),
    };
    Ok((request, safe))
}

/// Whether re-sending `action` after a crash between its begin and done records is safe.
pub fn resend_is_safe(action: &Action) -> bool {
    action.is_read() || action.idempotency_key.is_some()
}

/// Performs `action` once.
pub async fn perform(
    env: &Env,
    grant: &CapabilityGrant,
    net: &NetConfig,
    run: &str,
    action: &Action,
    secrets: &[String],
) -> Performed {
    if grant.cap == "db.sqlite" {
        return perform_sql(env, grant, run, action).await;
    }
    let (request, safe) = match http_request(env, grant, net, action) {
        Ok(built) => built,
        Err(problem) => return Performed::Done(json!({"error": problem, "may_have_been_sent": false})),
    };
    match env.net.request(request).await {
        Ok(response) => {
            let body = scrub(&String::from_utf8_lossy(&response.body), secrets);
            let parsed = serde_json::from_str::<Value>(&body).unwrap_or(Value::Null);
            let headers: serde_json::Map<String, Value> =
                response.headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), json!(scrub(v, secrets)))).collect();
            Performed::Done(json!({"status": response.status, "headers": headers, "body": body, "json": parsed}))
        }
        Err(error) if error.may_have_been_sent && !safe => Performed::InDoubt(scrub(&error.message, secrets)),
        Err(error) => Performed::Done(
            json!({"error": scrub(&error.message, secrets), "may_have_been_sent": error.may_have_been_sent}),
        ),
    }
}

async fn perform_sql(env: &Env, grant: &CapabilityGrant, run: &str, action: &Action) -> Performed {
    let write = action.method == "EXECUTE";
    let params: Vec<Value> = serde_json::from_str(&action.body).unwrap_or_default();
    let request = DbRequest {
        path: grant.path.clone().unwrap_or_default(),
        write,
        sql: action.target.clone(),
        params,
        action: write.then(|| (run.to_string(), action.op)),
    };
    match env.db.execute(request).await {
        Ok(reply) => Performed::Done(json!({"rows": reply.rows, "changes": reply.changes})),
        Err(error) => Performed::Done(json!({"error": error})),
    }
}

/// After a crash between a `db.sqlite` write's begin and done: did it commit?
pub async fn sql_write_happened(env: &Env, grant: &CapabilityGrant, run: &str, op: u64) -> Result<bool, String> {
    env.db.action_recorded(&grant.path.clone().unwrap_or_default(), run, op).await
}
