//! Model calls (a `model` grant's `complete(...)`): the request in the manifest's provider's
//! shape (`anthropic` messages, or an `openai`-compatible chat completion), sent through
//! `Env::net` with the API key attached at send time, each attempt within the model's
//! `timeout_ms`, retried `retries` times after a 429, a 5xx or a failure to get an answer,
//! waiting between attempts (doubling from one second, or what `retry-after` asks, at most
//! 60 s). A model call changes nothing outside (it only costs tokens), so one begun before a
//! crash is sent again; one the journal holds as done is replayed, never sent again.

use serde_json::{json, Value};

use super::perform::Performed;
use super::{scrub, scrub_value, Action};
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

/// One model call, with its retries.
pub async fn perform_model(env: &Env, model: &ModelConfig, action: &Action, secrets: &[String]) -> Performed {
    let failed = |problem: String| Performed::Done(json!({"error": scrub(&problem, secrets)}));
    let asked: Value = match serde_json::from_str(&action.body) {
        Ok(asked) => asked,
        Err(e) => return failed(format!("the model call's request does not read back: {e}")),
    };
    let key = match env.process.var(&model.api_key_env) {
        Some(key) if !key.is_empty() => key,
        _ => return failed(format!("the secret variable `{}` is not set; nothing was sent", model.api_key_env)),
    };
    let mut last = String::new();
    for attempt in 0..=model.retries {
        if attempt > 0 {
            env.clock.sleep(wait_before(attempt, &last)).await;
        }
        let request = request(model, &asked, &key);
        let (retry, problem) = match env.net.request(request).await {
            Ok(response) if response.status == 200 => return Performed::Done(answer(model, &response, secrets)),
            Ok(response) => {
                let retryable = response.status == 429 || response.status >= 500;
                let text = String::from_utf8_lossy(&response.body).chars().take(300).collect::<String>();
                let wait = retry_after(&response).map(|s| format!(" retry-after:{s}")).unwrap_or_default();
                if !retryable {
                    let error = format!("the model provider answered {}: {text}", response.status);
                    return Performed::Done(scrub_value(&json!({"error": error, "status": response.status}), secrets));
                }
                (true, format!("status {}{wait}: {text}", response.status))
            }
            Err(error) => (true, error.message),
        };
        last = problem;
        if !retry {
            break;
        }
    }
    let attempts = model.retries + 1;
    failed(format!("the model did not answer after {attempts} attempt(s); the last: {last}"))
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

/// What a program sees of an answer: the text and the tokens used, in the same shape for
/// every provider.
fn answer(model: &ModelConfig, response: &HttpResponse, secrets: &[String]) -> Value {
    let parsed: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    let (text, input, output) = match model.provider.as_str() {
        "anthropic" => {
            let text: String = (parsed["content"].as_array().into_iter().flatten())
                .filter(|block| block["type"] == "text")
                .filter_map(|block| block["text"].as_str())
                .collect();
            (text, &parsed["usage"]["input_tokens"], &parsed["usage"]["output_tokens"])
        }
        _ => {
            let text = parsed["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string();
            (text, &parsed["usage"]["prompt_tokens"], &parsed["usage"]["completion_tokens"])
        }
    };
    let usage = json!({"input_tokens": input.as_u64().unwrap_or(0), "output_tokens": output.as_u64().unwrap_or(0)});
    scrub_value(&json!({"status": 200, "text": text, "usage": usage}), secrets)
}
