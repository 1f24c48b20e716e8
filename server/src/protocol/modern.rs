//! The 2026-07-28 era: every request carries its own envelope and is served statelessly.
//! Every result has `resultType` and `_meta.serverInfo`; cacheable ones have `ttlMs` and
//! `cacheScope`.

use std::rc::Rc;

use serde_json::{json, Map, Value};

use super::jsonrpc::{self, Request, RequestId, RpcError};
use super::{
    call_params, completion, prompt_call, read_call, CallJob, Connection, InputTurn, PendingCall, Routed, LIST_TTL_MS,
    META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_PROTOCOL_VERSION, META_SERVER_INFO, MODERN_VERSION,
};

use crate::call::Retry;
use crate::run::notice::LOG_LEVELS;

pub(super) fn route(connection: &Connection, request: Request) -> Routed {
    let id = request.id.clone();
    if let Err(error) = check_envelope(&request) {
        return Routed::Reply(error.to_value());
    }
    let outcome = match request.method.as_str() {
        "server/discover" => return Routed::Static { id, result: Rc::clone(&connection.statics.modern_discover) },
        "tools/list" => return Routed::Static { id, result: Rc::clone(&connection.statics.modern_tools_list) },
        "tools/call" => return tool_call(connection, request),
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            match super::tasks::route(&request.method, &id, request.params.as_ref()) {
                Ok(task) => return Routed::Task(task),
                Err(error) => Err(error),
            }
        }
        "resources/list" if has_resources(connection) => Ok(cacheable(
            json!({"resources": crate::call::surface::resources(&connection.catalog)}),
            LIST_TTL_MS,
            "public",
        )),
        "resources/templates/list" if has_resources(connection) => Ok(cacheable(
            json!({"resourceTemplates": crate::call::surface::templates(&connection.catalog)}),
            LIST_TTL_MS,
            "public",
        )),
        "resources/read" if has_resources(connection) => {
            match read_call(connection, &request, jsonrpc::INVALID_PARAMS, finish_read)
                .and_then(|call| Ok(PendingCall { input: input_turn(&request)?, ..call }))
            {
                Ok(call) => return Routed::Call(call),
                Err(error) => Err(error),
            }
        }
        "completion/complete" if crate::call::surface::completes(&connection.catalog) => {
            completion(connection, &request)
        }
        "prompts/list" if !connection.catalog.prompts.is_empty() => {
            Ok(cacheable(json!({"prompts": crate::call::surface::prompts(&connection.catalog)}), LIST_TTL_MS, "public"))
        }
        "prompts/get" if !connection.catalog.prompts.is_empty() => match prompt_call(connection, &request, finish) {
            Ok(call) => return Routed::Call(call),
            Err(error) => Err(error),
        },
        method => {
            Err(RpcError::new(Some(id.clone()), jsonrpc::METHOD_NOT_FOUND, format!("Method not found: {method}")))
        }
    };
    Routed::Reply(match outcome {
        Ok(result) => jsonrpc::response(&id, complete(connection, result)),
        Err(error) => error.to_value(),
    })
}

/// Routes `tools/call`: a call of a known tool, as a task or not, or the refusal.
fn tool_call(connection: &Connection, request: Request) -> Routed {
    let id = request.id.clone();
    match call_params(connection, &request) {
        Ok((tool, arguments, progress)) => {
            // Without `logLevel` the server sends no log message for the request.
            let log_level = request_meta(&request)
                .and_then(|meta| meta.get(META_LOG_LEVEL))
                .and_then(Value::as_str)
                .and_then(crate::run::notice::log_level);
            let input = match input_turn(&request) {
                Ok(input) => input,
                Err(error) => return Routed::Reply(error.to_value()),
            };
            let task = match declared_enough(connection, &request, &tool, &input.kinds) {
                // A retry (a `requestState`) continues the run its state names: it is never a
                // new task, or its state would be dropped and the call admitted afresh (a
                // second run; seed 14106 of the 100,000-seed sweep).
                Ok(task) => task && input.retry.is_none(),
                Err(error) => return Routed::Reply(error.to_value()),
            };
            Routed::Call(PendingCall {
                id,
                tool,
                arguments,
                progress,
                log_level,
                finish,
                job: CallJob::Tool,
                input,
                traceparent: None,
                task,
            })
        }
        Err(error) => Routed::Reply(error.to_value()),
    }
}

/// Whether a call may run as the request declared its client: the capabilities its tool
/// requires, and the tasks extension a task-only tool needs (-32021 naming what is missing,
/// before anything runs). `Ok`: whether the call becomes a task.
fn declared_enough(connection: &Connection, request: &Request, tool: &str, kinds: &[String]) -> Result<bool, RpcError> {
    let Some(tool) = connection.catalog.callable(tool) else { return Ok(false) };
    super::refuse_undeclared(&request.id, tool, kinds)?;
    super::tasks::becomes_task(tool.config.task, super::tasks::declared(request_meta(request))).map_err(|()| {
        let what = format!(
            "`{}` runs only as a task: declare the tasks extension ({})",
            tool.config.name,
            super::tasks::TASKS_EXTENSION
        );
        super::tasks::missing_capability(&request.id, super::tasks::extension_required(), &what)
    })
}

/// A call's input turn: the input kinds its client declared (`elicitation`, `sampling`,
/// `roots`), and a retry's `requestState` and `inputResponses`.
fn input_turn(request: &Request) -> Result<InputTurn, RpcError> {
    let declared = request_meta(request).and_then(|meta| meta.get(META_CLIENT_CAPABILITIES)).and_then(Value::as_object);
    let kinds = ["elicitation", "sampling", "roots"]
        .into_iter()
        .filter(|kind| declared.is_some_and(|d| d.get(*kind).is_some_and(Value::is_object)))
        .map(str::to_string)
        .collect();
    let params = request.params.as_ref();
    let responses = params.and_then(|p| p.get("inputResponses")).cloned();
    let retry = params
        .and_then(|p| p.get("requestState"))
        .map(|state| Retry { request_state: state.clone(), input_responses: responses });
    Ok(InputTurn::new(kinds, retry, Some(input_required)))
}

/// An `input_required` result: the requests and the state to retry with.
fn input_required(connection: &Connection, id: &RequestId, result: Value) -> Value {
    let mut result = match result {
        Value::Object(result) => result,
        other => panic!("results are objects, got {other}"),
    };
    result.insert("resultType".into(), json!("input_required"));
    let mut meta = match result.remove("_meta") {
        Some(Value::Object(meta)) => meta,
        _ => Map::new(),
    };
    meta.insert(META_SERVER_INFO.into(), connection.server_info());
    result.insert("_meta".into(), Value::Object(meta));
    jsonrpc::response(id, Value::Object(result))
}

fn request_meta(request: &Request) -> Option<&serde_json::Map<String, Value>> {
    request.params.as_ref()?.get("_meta")?.as_object()
}

/// The per-request envelope: a supported version, client capabilities, a valid log level.
fn check_envelope(request: &Request) -> Result<(), RpcError> {
    let id = Some(request.id.clone());
    let meta = request
        .params
        .as_ref()
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
        .expect("routing saw the envelope");
    let requested = match meta.get(META_PROTOCOL_VERSION) {
        Some(Value::String(version)) => version.clone(),
        _ => {
            return Err(RpcError::new(
                id,
                jsonrpc::INVALID_PARAMS,
                format!("_meta[\"{META_PROTOCOL_VERSION}\"] must be a string"),
            ))
        }
    };
    if requested != MODERN_VERSION {
        return Err(RpcError::new(id, jsonrpc::UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version")
            .with_data(json!({"supported": [MODERN_VERSION], "requested": requested})));
    }
    if !meta.get(META_CLIENT_CAPABILITIES).is_some_and(Value::is_object) {
        return Err(RpcError::new(
            id,
            jsonrpc::INVALID_PARAMS,
            format!("_meta[\"{META_CLIENT_CAPABILITIES}\"] must be an object"),
        ));
    }
    if let Some(level) = meta.get(META_LOG_LEVEL) {
        if !level.as_str().is_some_and(|l| LOG_LEVELS.contains(&l)) {
            return Err(RpcError::new(
                id,
                jsonrpc::INVALID_PARAMS,
                format!("_meta[\"{META_LOG_LEVEL}\"] is not a log level"),
            ));
        }
    }
    Ok(())
}

/// The result of `server/discover` (built once, `StaticResults`).
pub(super) fn discover(server_info: &Value, capabilities: Value) -> Value {
    complete_with(
        server_info,
        json!({
            "supportedVersions": [MODERN_VERSION],
            "capabilities": capabilities,
            "ttlMs": LIST_TTL_MS,
            "cacheScope": "public",
        }),
    )
}

/// The result of `tools/list` (built once, `StaticResults`).
pub(super) fn tools_list(server_info: &Value, tools: Value) -> Value {
    complete_with(server_info, json!({"tools": tools, "ttlMs": LIST_TTL_MS, "cacheScope": "public"}))
}

fn complete(connection: &Connection, result: Value) -> Value {
    complete_with(&connection.server_info(), result)
}

fn complete_with(server_info: &Value, result: Value) -> Value {
    let mut result = match result {
        Value::Object(result) => result,
        other => panic!("results are objects, got {other}"),
    };
    result.insert("resultType".into(), json!("complete"));
    // Keeps what the result's own `_meta` carries (argument problems) beside the server's info.
    let mut meta = match result.remove("_meta") {
        Some(Value::Object(meta)) => meta,
        _ => Map::new(),
    };
    meta.insert(META_SERVER_INFO.into(), server_info.clone());
    result.insert("_meta".into(), Value::Object(meta));
    Value::Object(result)
}

fn finish(connection: &Connection, id: &RequestId, result: Value) -> Value {
    jsonrpc::response(id, complete(connection, result))
}

fn has_resources(connection: &Connection) -> bool {
    connection.catalog.resources().next().is_some()
}

fn cacheable(mut result: Value, ttl_ms: u64, scope: &str) -> Value {
    result["ttlMs"] = json!(ttl_ms);
    result["cacheScope"] = json!(scope);
    result
}

/// A read's result: private, and stale at once unless the resource declares a `ttl`.
fn finish_read(connection: &Connection, id: &RequestId, contents: Value) -> Value {
    let ttl_ms = contents["contents"][0]["uri"]
        .as_str()
        .and_then(|uri| crate::call::surface::find(&connection.catalog, uri))
        .and_then(|(tool, _)| tool.resource.as_ref()?.ttl_ms)
        .unwrap_or(0);
    finish(connection, id, cacheable(contents, ttl_ms, "private"))
}
