//! Model calls (a `model` grant's `complete(...)`): the request in the manifest's provider's
//! shape (`anthropic` messages, or an `openai`-compatible chat completion), sent through
//! `Env::net` with the API key attached at send time, each attempt within the model's
//! `timeout_ms`, retried `retries` times after a 429, a 5xx or a failure to get an answer,
//! waiting between attempts (doubling from one second, or what `retry-after` asks, at most
//! 60 s). A model call changes nothing outside (it only costs tokens), so one begun before a
//! crash is sent again; one the journal holds as done is replayed, never sent again.

use serde_json::{json, Value};

use crate::broker::{scrub, scrub_then_cut, scrub_value, Action, Performed};
use crate::env::{Env, HttpRequest, HttpResponse};
use crate::manifest::ModelConfig;

/// The most bytes of a provider's answer kept.
pub const MODEL_RESPONSE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// The longest wait between two attempts.
pub const MODEL_RETRY_WAIT_MS_MAX: u64 = 60_000;
/// The first wait between attempts; each next one doubles it.
const MODEL_RETRY_WAIT_MS_FIRST: u64 = 1_000;
/// The Anthropic API version sent.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The most characters of a provider's error body shown, cut after it is scrubbed.
const MODEL_ERROR_CHARS_MAX: usize = 300;

/// One model call, with its retries. Every attempt that may have reached the provider is
/// charged its `max_tokens` unless the provider's usage says less, and a call sent again
/// after crashes is charged every attempt each of the `sends_interrupted` may have made: a
/// quota holds against a provider that bills every request it received. The charge is the
/// result's `tokens_charged`, what a token quota counts.
pub async fn perform_model(
    env: &Env,
    model: &ModelConfig,
    action: &Action,
    secrets: &[String],
    (sends_interrupted, lease_left): (u64, &dyn Fn() -> Option<u64>),
) -> Performed {
    let asked: Value = match serde_json::from_str(&action.body) {
        Ok(asked) => asked,
        Err(e) => return failed(format!("the model call's request does not read back: {e}"), 0, secrets),
    };
    let max_tokens = asked["max_tokens"].as_u64().unwrap_or(0);
    // Each send a crash interrupted may have made every attempt.
    let mut charged = max_tokens.saturating_mul(attempts_per_send(model)).saturating_mul(sends_interrupted);
    if let Some(spent) = sends_spent(sends_interrupted, charged, secrets) {
        return spent;
    }
    let key = match env.process.var(&model.api_key_env) {
        Some(key) if !key.is_empty() => key,
        _ => {
            let problem = format!("the secret variable `{}` is not set; nothing was sent", model.api_key_env);
            return failed(problem, charged, secrets);
        }
    };
    let mut last = String::new();
    for attempt in 0..attempts_per_send(model) {
        if attempt > 0 {
            env.clock.sleep(wait_before(attempt, &last)).await;
        }
        // The action rule, for each request: one started after the lease may have ended could
        // reach the provider after the run's next owner settled it. Held back, the call fails,
        // charged for what the sends before it may have cost (never in doubt).
        if let Some(left) = lease_left().filter(|left| *left < crate::limits::LEASE_SEND_MARGIN_MS) {
            let tried = if attempt == 0 { String::new() } else { format!(" (the last attempt: {last})") };
            let problem = format!(
                "this instance's lease on the PostgreSQL store is sure for {left} ms more, too short to send the \
                 model call{tried}; nothing more was sent"
            );
            return failed(problem, charged, secrets);
        }
        let request = request(model, &asked, &key);
        let response = match env.net.request(request).await {
            Ok(response) => response,
            Err(error) => {
                if error.may_have_been_sent {
                    charged = charged.saturating_add(max_tokens);
                }
                last = error.message;
                continue;
            }
        };
        if response.status == 200 {
            let (result, used) = answer(model, &response, max_tokens, secrets);
            return Performed::Done(with_charge(result, charged.saturating_add(used)));
        }
        // An error answer reached the provider: nothing says it billed less than the most.
        charged = charged.saturating_add(max_tokens);
        let text = scrub_then_cut(&String::from_utf8_lossy(&response.body), secrets, MODEL_ERROR_CHARS_MAX);
        if !(response.status == 429 || response.status >= 500) {
            let error = format!("the model provider answered {}: {text}", response.status);
            let result = scrub_value(&json!({"error": error, "status": response.status}), secrets);
            return Performed::Done(with_charge(result, charged));
        }
        let wait = retry_after(&response).map(|s| format!(" retry-after:{s}")).unwrap_or_default();
        last = format!("status {}{wait}: {text}", response.status);
    }
    let attempts = attempts_per_send(model);
    failed(format!("the model did not answer after {attempts} attempt(s); the last: {last}"), charged, secrets)
}

/// A call's sends are what the run's tokens were held for (`manifest::worst_tokens`): one
/// whose every send a crash cut (a run the operator resumed after crashes) is not sent again,
/// charged what those sends may have cost (seed 412582 of the sweep over new seeds: a third
/// send passed the quota).
fn sends_spent(sends_interrupted: u64, charged: u64, secrets: &[String]) -> Option<Performed> {
    (sends_interrupted >= crate::manifest::MODEL_SENDS_MAX).then(|| {
        let problem = format!(
            "the model call was sent {sends_interrupted} times and a crash cut each send; the run's tokens were \
             held for {} sends, so it is not sent again; nothing more was sent",
            crate::manifest::MODEL_SENDS_MAX
        );
        failed(problem, charged, secrets)
    })
}

/// How many attempts one send of a model call makes at most.
pub fn attempts_per_send(model: &ModelConfig) -> u64 {
    model.retries.saturating_add(1)
}

fn failed(problem: String, charged: u64, secrets: &[String]) -> Performed {
    Performed::Done(with_charge(json!({"error": scrub(&problem, secrets)}), charged))
}

fn with_charge(mut result: Value, charged: u64) -> Value {
    result["tokens_charged"] = json!(charged);
    result
}

/// The wait before attempt `attempt` (from 1): what the last answer's `retry-after` asked,
/// else one second doubled each time; never more than a minute.
fn wait_before(attempt: u64, last: &str) -> u64 {
    let asked = last
        .split_once("retry-after:")
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|seconds| seconds.parse::<u64>().ok())
        .map(|seconds| seconds.saturating_mul(1000));
    let doubled = MODEL_RETRY_WAIT_MS_FIRST.saturating_mul(1 << (attempt - 1).min(16));
    asked.unwrap_or(doubled).min(MODEL_RETRY_WAIT_MS_MAX)
}

fn retry_after(response: &HttpResponse) -> Option<u64> {
    let (_, value) = response.headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("retry-after"))?;
    value.trim().parse().ok()
}

/// The provider's request for what the program asked.
fn request(model: &ModelConfig, asked: &Value, key: &str) -> HttpRequest {
    let mut messages = asked["messages"].as_array().cloned().unwrap_or_default();
    let (url, headers, body) = match model.provider.as_str() {
        "anthropic" => {
            let mut body = json!({"model": model.model, "max_tokens": asked["max_tokens"], "messages": messages});
            for field in ["system", "temperature"] {
                if !asked[field].is_null() {
                    body[field] = asked[field].clone();
                }
            }
            let headers = vec![
                ("x-api-key".to_string(), key.to_string()),
                ("anthropic-version".into(), ANTHROPIC_VERSION.into()),
            ];
            (format!("{}/v1/messages", model.base_url), headers, body)
        }
        _ => {
            if let Some(system) = asked["system"].as_str() {
                messages.insert(0, json!({"role": "system", "content": system}));
            }
            let mut body = json!({"model": model.model, "max_tokens": asked["max_tokens"], "messages": messages});
            if !asked["temperature"].is_null() {
                body["temperature"] = asked["temperature"].clone();
            }
            let headers = vec![("authorization".to_string(), format!("Bearer {key}"))];
            (format!("{}/v1/chat/completions", model.base_url), headers, body)
        }
    };
    let mut headers = headers;
    headers.push(("content-type".into(), "application/json".into()));
    HttpRequest {
        method: "POST".to_string(),
        url,
        headers,
        body: serde_json::to_vec(&body).expect("JSON values serialise"),
        connect_timeout_ms: model.timeout_ms,
        timeout_ms: model.timeout_ms,
        body_bytes_max: MODEL_RESPONSE_BYTES_MAX,
    }
}

/// What a program sees of an answer (the text and the tokens used, in the same shape for
/// every provider), and the output tokens it costs. An answer without its text (a proxy's
/// error page, another API's shape, a body over the limit) is an error, never an empty
/// completion, and costs `max_tokens`, as does one without usage.
fn answer(model: &ModelConfig, response: &HttpResponse, max_tokens: u64, secrets: &[String]) -> (Value, u64) {
    let refused = |why: &str| {
        let error = format!("the model provider answered 200 but {why}; no completion was used");
        (scrub_value(&json!({"error": error, "status": 200}), secrets), max_tokens)
    };
    if response.body.len() > MODEL_RESPONSE_BYTES_MAX {
        return refused(&format!("its body is over {MODEL_RESPONSE_BYTES_MAX} bytes"));
    }
    let Ok(parsed) = serde_json::from_slice::<Value>(&response.body) else {
        return refused("its body is not JSON");
    };
    let (text, input, output) = match model.provider.as_str() {
        "anthropic" => {
            let texts: Vec<&str> = (parsed["content"].as_array().into_iter().flatten())
                .filter(|block| block["type"] == "text")
                .filter_map(|block| block["text"].as_str())
                .collect();
            let text = (!texts.is_empty()).then(|| texts.concat());
            (text, &parsed["usage"]["input_tokens"], &parsed["usage"]["output_tokens"])
        }
        _ => {
            let text = parsed["choices"][0]["message"]["content"].as_str().map(str::to_string);
            (text, &parsed["usage"]["prompt_tokens"], &parsed["usage"]["completion_tokens"])
        }
    };
    let Some(text) = text else {
        return refused("its body has no completion text in the provider's shape");
    };
    let used = output.as_u64().unwrap_or(max_tokens);
    let usage = json!({"input_tokens": input.as_u64().unwrap_or(0), "output_tokens": output.as_u64().unwrap_or(0)});
    (scrub_value(&json!({"status": 200, "text": text, "usage": usage}), secrets), used)
}
