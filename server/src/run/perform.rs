//! Performing one journaled action through the seam (`Env::net`, `Env::db`), with secrets
//! attached at send time and scrubbed from whatever comes back.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::broker::{scrub, scrub_then_cut, scrub_value, urls, Action, Kind, Method, Performed};
use crate::env::{Database, DbRequest, Env, HttpRequest, HttpResponse, PostgresTarget};
use crate::manifest::{CapabilityGrant, Grant, NetConfig};

/// The secret value a grant attaches, by environment variable name. Missing variables are
/// refused at start; one gone since fails the action loudly, and nothing is sent without it.
fn secret(env: &Env, name: &str) -> Result<String, String> {
    match env.process.var(name) {
        Some(value) if !value.is_empty() => Ok(value),
        _ => Err(format!("the secret variable `{name}` is not set in the server's environment; nothing was sent")),
    }
}

/// Every secret value a tool's grants can attach (for scrubbing): a connection URL's
/// password also on its own, as written in the URL and decoded, since an error may quote it.
pub fn secret_values(env: &Env, grants: &BTreeMap<String, Grant>) -> Vec<String> {
    let values: Vec<String> =
        crate::catalog::secret_variables(grants).iter().filter_map(|name| secret(env, name).ok()).collect();
    let passwords = values.iter().filter_map(|value| url::Url::parse(value).ok()).filter_map(|url| {
        let written = url.password()?.to_string();
        let decoded = percent_decoded(&written);
        Some([written, decoded])
    });
    let passwords: Vec<String> = passwords.flatten().collect();
    values.into_iter().chain(passwords).collect()
}

fn percent_decoded(text: &str) -> String {
    form_urlencoded::parse(format!("x={}", text.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default()
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
    let (method, url, body, safe) = if grant.cap == Kind::StripeRefund {
        let key = need_secret(grant, "key").ok_or("the grant has no `needs.key`")?;
        headers.push(("authorization".into(), format!("Bearer {}", secret(env, &key)?)));
        if action.method == Method::Get {
            let get = need(grant, "get").ok_or("the grant has no `needs.get`")?;
            let url = urls::allowed(&get.only, &action.target)?;
            ("GET".to_string(), url, String::new(), true)
        } else {
            let post = need(grant, "post").ok_or("the grant has no `needs.post`")?;
            let url = post.only.first().cloned().ok_or("`needs.post.only` is empty")?;
            let money = action.money().ok_or("a refund without an amount")?;
            let body: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("payment_intent", &action.body)
                .append_pair("amount", &crate::broker::stripe::amount(&money)?.to_string())
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
            headers.push((name.to_ascii_lowercase(), format!("{prefix}{}", secret(env, variable)?)));
        }
        if let Some(key) = &action.idempotency_key {
            headers.push(("idempotency-key".into(), key.clone()));
        }
        let safe = action.method == Method::Get || action.idempotency_key.is_some();
        (action.method.name().to_string(), url, action.body.clone(), safe)
    };
    let request = HttpRequest {
        method,
        url,
        headers,
        body: body.into_bytes(),
        connect_timeout_ms: net.connect_timeout_ms.unwrap_or(0),
        timeout_ms: net.timeout_ms.unwrap_or(0),
        body_bytes_max: net.response_bytes_max,
    };
    Ok((request, safe))
}

/// What bounds an action's sends beyond its own timeouts.
pub struct SendRules<'a> {
    /// How long the instance's lease on the PostgreSQL store surely lasts (the action rule):
    /// a refund's write, sent after its currency was read, and every send again of a keyed
    /// write, are held back when too little is.
    pub lease_left: &'a dyn Fn() -> Option<u64>,
    /// How long a keyed write whose answer was lost may be sent again: until the run's deadline.
    pub resend_for_ms: u64,
}

/// A send the lease could not cover, after an earlier one of the same action may have reached
/// the service: the instance stops, and the run's next owner sends it again.
#[derive(Debug)]
pub struct HeldBack(pub String);

/// Performs `action` once. `sends_interrupted`: how many sends of it crashes interrupted (it
/// was begun before and may have happened).
pub async fn perform(
    env: &Env,
    (grant, net, model): (&CapabilityGrant, &NetConfig, Option<&crate::manifest::ModelConfig>),
    (run, action): (&str, &Action),
    secrets: &[String],
    sends_interrupted: u64,
    rules: &SendRules<'_>,
) -> Result<Performed, HeldBack> {
    let resend = sends_interrupted > 0;
    if grant.cap.is_database() {
        return Ok(perform_sql(env, grant, net, run, action, secrets).await);
    }
    if grant.cap == Kind::Model {
        return Ok(match model {
            Some(model) => {
                let lease_left = rules.lease_left;
                super::model::perform_model(env, model, action, secrets, (sends_interrupted, lease_left)).await
            }
            None => Performed::Done(json!({"error": "the manifest has no `model` section; nothing was sent"})),
        });
    }
    // A write begun before a crash may have happened already: a failure before it is sent
    // again proves nothing about the first attempt, so it stays in doubt.
    let in_doubt_if_resent = resend && !action.is_read();
    let not_sent = |problem: String| match in_doubt_if_resent {
        true => Performed::InDoubt(format!(
            "it was begun before a crash, and sending it again failed: {}",
            scrub(&problem, secrets)
        )),
        false => Performed::Done(json!({"error": scrub(&problem, secrets), "may_have_been_sent": false})),
    };
    if action.method == Method::Refund {
        if let Err(problem) = check_intent_currency(env, grant, net, action).await {
            return Ok(not_sent(problem));
        }
        // The read took time (or the process was paused in it): the write is checked again.
        let send = Kind::HttpPost.longest_send_ms(net).unwrap_or(0);
        let needed = send.saturating_add(crate::limits::LEASE_SEND_MARGIN_MS);
        if let Some(left) = (rules.lease_left)().filter(|left| *left < needed) {
            return Ok(not_sent(format!(
                "this instance's lease on the PostgreSQL store is sure for {left} ms more, too short to send the \
                 refund (up to {send} ms, and a margin): nothing was sent"
            )));
        }
    }
    let (request, safe) = match http_request(env, grant, net, action) {
        Ok(built) => built,
        Err(problem) => return Ok(not_sent(problem)),
    };
    let keyed_write = safe && !action.is_read();
    let first_sent_ms = env.clock.monotonic_ms();
    match env.net.request(request.clone()).await {
        // Sent again after a crash, an answer that tells nothing of the first send (409: that
        // request is still being processed) is no answer.
        Ok(response) if keyed_write && in_doubt_if_resent && tells_nothing_of_the_write(response.status) => {
            let last = format!("the service answered {}", response.status);
            send_again_until_answered(env, (request, first_sent_ms), net, (secrets, rules), last).await
        }
        Ok(response) => Ok(Performed::Done(response_result(&response, net, secrets))),
        Err(error) if keyed_write && (error.may_have_been_sent || in_doubt_if_resent) => {
            send_again_until_answered(env, (request, first_sent_ms), net, (secrets, rules), error.message).await
        }
        Err(error) if error.may_have_been_sent && !safe => Ok(Performed::InDoubt(scrub(&error.message, secrets))),
        Err(error) if !error.may_have_been_sent && in_doubt_if_resent => Ok(not_sent(error.message)),
        Err(error) => Ok(Performed::Done(
            json!({"error": scrub(&error.message, secrets), "may_have_been_sent": error.may_have_been_sent}),
        )),
    }
}

/// A keyed write that may have reached its service and was not answered: the service makes
/// it once whatever it is sent again with the same key, so Warden sends it again (waiting
/// longer each time) until an answer comes, and the program hears that answer, never "may
/// have been sent". An answer that says the first request is still being processed or that
/// a gateway failed (409, 425, 429, 5xx) tells nothing of the write: it is sent again too. If
/// no answer comes while a whole send still fits `rules.resend_for_ms` from the first send
/// (the run's deadline), the write is in doubt and waits for a person. A send the lease could
/// not cover is held back (`Err`): the run's next owner sends it again.
async fn send_again_until_answered(
    env: &Env,
    (request, first_sent_ms): (HttpRequest, u64),
    net: &NetConfig,
    (secrets, rules): (&[String], &SendRules<'_>),
    mut last: String,
) -> Result<Performed, HeldBack> {
    let send_ms = net.connect_timeout_ms.unwrap_or(0).saturating_add(net.timeout_ms.unwrap_or(0));
    let mut wait_ms = crate::limits::KEYED_RESEND_WAIT_MS_FIRST;
    for sent_again in 1..=crate::limits::KEYED_RESENDS_MAX {
        let used_ms = env.clock.monotonic_ms().saturating_sub(first_sent_ms);
        if used_ms.saturating_add(wait_ms).saturating_add(send_ms) > rules.resend_for_ms {
            return Ok(unanswered(&last, sent_again - 1, "before the run's deadline", secrets));
        }
        env.clock.sleep(wait_ms).await;
        wait_ms = wait_ms.saturating_mul(2).min(crate::limits::KEYED_RESEND_WAIT_MS_MAX);
        let needed = send_ms.saturating_add(crate::limits::LEASE_SEND_MARGIN_MS);
        if let Some(left) = (rules.lease_left)().filter(|left| *left < needed) {
            return Err(HeldBack(format!(
                "a keyed write whose answer was lost could not be sent again: this instance's lease on the \
                 PostgreSQL store is sure for {left} ms more, too short for its send (up to {send_ms} ms, and a margin)"
            )));
        }
        match env.net.request(request.clone()).await {
            Ok(response) if !tells_nothing_of_the_write(response.status) => {
                return Ok(Performed::Done(response_result(&response, net, secrets)))
            }
            Ok(response) => last = format!("the service answered {}", response.status),
            Err(error) => last = error.message,
        }
    }
    Ok(unanswered(&last, crate::limits::KEYED_RESENDS_MAX, "in as many tries", secrets))
}

/// An answer to a keyed write sent again that tells nothing of whether the write was made:
/// the first request with that key still being processed (409, 425), a limit on requests
/// (429), a service or gateway failing (5xx).
fn tells_nothing_of_the_write(status: u16) -> bool {
    matches!(status, 409 | 425 | 429) || (500..600).contains(&status)
}

/// A keyed write left unanswered by every send: in doubt, with what was tried.
fn unanswered(last: &str, sent_again: u32, within: &str, secrets: &[String]) -> Performed {
    Performed::InDoubt(scrub(
        &format!(
            "a write with an idempotency key may have reached its service and no answer came; it was sent again \
             {sent_again} time(s) with the same key, without an answer {within} (the last: {last})"
        ),
        secrets,
    ))
}

/// What a program sees of a response, with every secret scrubbed from every string a
/// reader could decode (the raw text, the parsed JSON, and JSON held inside strings).
fn response_result(response: &HttpResponse, net: &NetConfig, secrets: &[String]) -> Value {
    let headers: serde_json::Map<String, Value> =
        response.headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), json!(v))).collect();
    let header_bytes: usize = response.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    if header_bytes > crate::broker::RESPONSE_HEADERS_BYTES_MAX {
        let error = format!(
            "the response headers are over the limit of {} bytes; the response was not kept",
            crate::broker::RESPONSE_HEADERS_BYTES_MAX
        );
        return scrub_value(&json!({"status": response.status, "error": error}), secrets);
    }
    if response.body.len() > net.response_bytes_max {
        let error = format!(
            "the response body is over the limit of {} bytes (net.response_bytes_max); it was not kept",
            net.response_bytes_max
        );
        return scrub_value(&json!({"status": response.status, "headers": headers, "error": error}), secrets);
    }
    let body = String::from_utf8_lossy(&response.body).into_owned();
    // A body nested deeper than a record may hold is kept as text only.
    let parsed = serde_json::from_str::<Value>(&body)
        .ok()
        .filter(|parsed| crate::base::json::depth(parsed) <= crate::limits::VALUE_DEPTH_MAX)
        .unwrap_or(Value::Null);
    scrub_value(&json!({"status": response.status, "headers": headers, "body": body, "json": parsed}), secrets)
}

/// A refund moves money in its payment intent's currency, which the request does not name:
/// read the intent first (through the grant's `needs.get`) and refuse a currency other than
/// the one `each` and `max` were checked in.
async fn check_intent_currency(
    env: &Env,
    grant: &CapabilityGrant,
    net: &NetConfig,
    action: &Action,
) -> Result<(), String> {
    let money = action.money().ok_or("a refund without an amount")?;
    let get = need(grant, "get").ok_or("the grant has no `needs.get`")?;
    let intent = &action.body;
    let url = get
        .only
        .iter()
        .map(|pattern| pattern.replacen('*', intent, 1))
        .find(|url| urls::allowed(&get.only, url).is_ok())
        .ok_or_else(|| format!("no URL of `needs.get.only` reads payment intent `{intent}`"))?;
    let read = Action { method: Method::Get, target: url, amount: None, idempotency_key: None, ..action.clone() };
    let (request, _) = http_request(env, grant, net, &read)?;
    let unreadable = |why: String| {
        format!("could not read payment intent `{intent}` to check its currency: {why}; nothing was refunded")
    };
    let response = env.net.request(request).await.map_err(|e| unreadable(e.message))?;
    if response.body.len() > net.response_bytes_max || !(200..300).contains(&response.status) {
        return Err(unreadable(format!("the service answered {}", response.status)));
    }
    let parsed: Value = serde_json::from_slice(&response.body).map_err(|e| unreadable(format!("not JSON: {e}")))?;
    let currency = parsed.get("currency").and_then(Value::as_str).ok_or_else(|| unreadable("no `currency`".into()))?;
    if !currency.eq_ignore_ascii_case(&money.currency) {
        return Err(format!(
            "payment intent `{intent}` is in {}, but the refund of {money} was checked in {}; refused, nothing was refunded",
            currency.to_ascii_uppercase(),
            money.currency
        ));
    }
    Ok(())
}

async fn perform_sql(
    env: &Env,
    grant: &CapabilityGrant,
    net: &NetConfig,
    run: &str,
    action: &Action,
    secrets: &[String],
) -> Performed {
    let write = action.method == Method::Execute;
    let params: Vec<Value> = match serde_json::from_str(&action.body) {
        Ok(params) => params,
        Err(e) => return Performed::Done(json!({"error": format!("the statement's parameters do not parse: {e}")})),
    };
    let database = match database(env, grant, net) {
        Ok(database) => database,
        Err(problem) => return Performed::Done(json!({"error": problem})),
    };
    let request = DbRequest {
        database,
        write,
        sql: action.target.clone(),
        params,
        action: write.then(|| (run.to_string(), action.op)),
        rows_bytes_max: crate::broker::SQL_ROWS_BYTES_MAX,
    };
    match env.db.execute(request).await {
        Ok(reply) => Performed::Done(json!({"rows": reply.rows, "changes": reply.changes})),
        // A read changes nothing, whatever became of its COMMIT.
        Err(failure) if failure.may_have_committed && write => {
            Performed::InDoubt(scrub_then_cut(&failure.message, secrets, crate::broker::ERROR_TEXT_CHARS_MAX))
        }
        Err(failure) => Performed::Done(
            json!({"error": scrub_then_cut(&failure.message, secrets, crate::broker::ERROR_TEXT_CHARS_MAX)}),
        ),
    }
}

/// The database a `db.*` grant reaches: its file, or its server with the tool's `net`
/// timeouts (required for a tool with a network grant, so present here).
fn database(env: &Env, grant: &CapabilityGrant, net: &NetConfig) -> Result<Database, String> {
    match grant.cap {
        Kind::Postgres => {
            let variable = grant.url_env.as_deref().ok_or("the grant has no `url`")?;
            Ok(Database::Postgres(PostgresTarget {
                url: secret(env, variable)?,
                connect_timeout_ms: net.connect_timeout_ms.unwrap_or(0),
                statement_timeout_ms: net.timeout_ms.unwrap_or(0),
                fence: None,
            }))
        }
        _ => Ok(Database::Sqlite(grant.path.clone().unwrap_or_default())),
    }
}

/// After a crash between a `db.*` write's begin and done: did it commit?
pub async fn sql_write_happened(
    env: &Env,
    grant: &CapabilityGrant,
    net: &NetConfig,
    run: &str,
    op: u64,
) -> Result<bool, String> {
    env.db.action_recorded(&database(env, grant, net)?, run, op).await
}
