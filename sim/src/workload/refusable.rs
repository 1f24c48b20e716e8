//! Calls the server must refuse before anything runs (the `calls that must be refused`
//! fault), made from a workload call just sent: the same call with one argument more that is
//! no parameter of the tool, and with a string argument replaced by a secret the manifest
//! names, and in an OAuth world as a principal without the scope the tools ask for. The
//! checker holds that each was refused and made no run: a promise the manifest
//! makes by what it leaves out, checked where nothing else would notice it broken (the
//! arguments check and the secret check each stand alone behind the other).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::env::world::World;
use crate::report::Violation;

pub use crate::names::{is_sent_unscoped, REFUSABLE_ID_PREFIX as ID_PREFIX};

/// The argument no generated tool takes.
const UNKNOWN_ARGUMENT: &str = "not_a_parameter_of_this_tool";

/// The values the server keeps secret: those of the environment variables its tools' grants
/// and its model name (the server's own bearer token, named elsewhere, is not among them).
pub fn manifest_secrets(world: &World) -> Vec<String> {
    let manifest: Value = (world.disk.peek(&World::path("manifest.json")))
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(Value::Null);
    let mut names = Vec::new();
    for tool in manifest["tools"].as_array().into_iter().flatten() {
        env_names(&tool["grants"], &mut names);
    }
    env_names(&manifest["model"], &mut names);
    let variables = world.services.variables.borrow();
    let secret_bytes_min = warden::catalog::SECRET_BYTES_MIN;
    names
        .iter()
        .filter_map(|name| variables.get(name))
        .filter(|value| value.len() >= secret_bytes_min)
        .cloned()
        .collect()
}

fn env_names(value: &Value, names: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(name) = map.get("env").and_then(Value::as_str) {
                names.push(name.to_string());
            }
            map.values().for_each(|inner| env_names(inner, names));
        }
        Value::Array(items) => items.iter().for_each(|inner| env_names(inner, names)),
        _ => {}
    }
}

/// The calls to refuse, made from `message` (a workload call): with an unknown argument;
/// when it has a string argument and the manifest a secret, with that secret in it; and in a
/// world whose tools ask for scopes (OAuth), as a 2026-07-28 call of a principal without them.
/// No progress token: nothing they do may be taken for the workload call's progress.
pub fn calls_from(message: &Value, secret: Option<&str>, scoped: bool) -> Vec<Value> {
    let id = &message["id"];
    let arguments = message["params"]["arguments"].as_object().cloned().unwrap_or_default();
    let mut meta = message["params"]["_meta"].clone();
    if let Some(meta) = meta.as_object_mut() {
        meta.remove("progressToken");
    }
    let call = |suffix: &str, arguments: serde_json::Map<String, Value>| {
        json!({"jsonrpc": "2.0", "id": format!("{ID_PREFIX}{id}-{suffix}"), "method": "tools/call",
            "params": {"name": message["params"]["name"], "arguments": arguments, "_meta": meta}})
    };
    let modern = message["params"]["_meta"].get("io.modelcontextprotocol/protocolVersion").is_some();
    let mut calls = Vec::new();
    if scoped && modern {
        calls.push(call("scope", arguments.clone()));
    }
    let mut unknown = arguments.clone();
    unknown.insert(UNKNOWN_ARGUMENT.into(), json!(1));
    calls.push(call("unknown", unknown));
    let text_argument = arguments.iter().find(|(_, value)| value.is_string()).map(|(name, _)| name.clone());
    if let (Some(name), Some(secret)) = (text_argument, secret) {
        let mut with_secret = arguments;
        with_secret.insert(name, json!(secret));
        calls.push(call("secret", with_secret));
    }
    calls
}

/// 8: every call that had to be refused and was answered was refused (an error, or a result
/// that is one), and names no run (nothing was reserved for it).
pub fn not_refused(answers: &BTreeMap<String, Value>) -> Vec<Violation> {
    let mut found = Vec::new();
    for (id, message) in answers {
        let result = &message["result"];
        let refused = message.get("error").is_some() || result["isError"] == json!(true);
        let run = result["_meta"][warden::call::answer::META_RUN]["run"].as_str();
        if !refused || run.is_some() {
            let what = if refused { format!("refused by run {}", run.unwrap_or_default()) } else { "answered".into() };
            found.push(Violation {
                invariant: 8,
                message: format!("call {id} had to be refused before anything ran, and was {what}: {message}"),
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_gives_one_with_an_unknown_argument_and_one_with_the_secret_and_no_progress_token() {
        let message = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo",
            "arguments": {"n": 1, "text": "a"}, "_meta": {"progressToken": 7}}});
        let calls = calls_from(&message, Some("s3cret-value"), false);
        assert_eq!(calls[0]["id"], json!("refuse-7-unknown"));
        assert_eq!(calls[0]["params"]["arguments"], json!({"n": 1, "text": "a", UNKNOWN_ARGUMENT: 1}));
        assert_eq!(calls[1]["params"]["arguments"], json!({"n": 1, "text": "s3cret-value"}));
        assert_eq!(calls[1]["params"]["_meta"], json!({}));
        assert_eq!(calls_from(&message, None, false).len(), 1);
        assert_eq!(calls_from(&message, None, true).len(), 1, "a 2025-11-25 call is its session's principal's");
        let mut modern = message.clone();
        modern["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        let calls = calls_from(&modern, None, true);
        assert_eq!(calls[0]["id"], json!("refuse-7-scope"));
        assert!(is_sent_unscoped("refuse-7-scope") && !is_sent_unscoped("refuse-7-unknown"));
    }

    #[test]
    fn an_answer_that_ran_or_succeeded_is_a_violation() {
        let answers: BTreeMap<String, Value> = [
            ("a", json!({"result": {"isError": true, "content": []}})),
            ("b", json!({"error": {"code": -32602, "message": "invalid"}})),
            ("c", json!({"result": {"isError": false}})),
            ("d", json!({"result": {"isError": true, "_meta": {warden::call::answer::META_RUN: {"run": "r"}}}})),
        ]
        .into_iter()
        .map(|(id, answer)| (id.to_string(), answer))
        .collect();
        let found: Vec<String> = not_refused(&answers).into_iter().map(|v| v.message).collect();
        assert_eq!(found.len(), 2);
        assert!(found[0].starts_with("call c had to be refused before anything ran, and was answered"));
        assert!(found[1].starts_with("call d had to be refused before anything ran, and was refused by run r"));
    }
}
