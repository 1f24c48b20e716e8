//! The 2025-11-25 era: `initialize`, `notifications/initialized`, `ping`, and requests
//! without the per-request envelope once `initialize` happened. Results carry no
//! `resultType` and no cache hints.

use std::rc::Rc;

use serde_json::{json, Value};

use super::jsonrpc::{self, Request, RequestId, RpcError};
use super::{
    call_params, completion, prompt_call, read_call, CallJob, Connection, InputTurn, PendingCall, Routed,
    LEGACY_VERSION,
};

/// Resource not found, in 2025-11-25 (2026-07-28 uses -32602).
const RESOURCE_NOT_FOUND: i64 = -32002;

fn has_resources(connection: &Connection) -> bool {
    connection.catalog.resources().next().is_some()
}

pub(super) fn route(connection: &Connection, request: Request) -> Routed {
    let id = request.id.clone();
    let outcome = match request.method.as_str() {
        "initialize" => initialize(connection, &request),
        "ping" => Ok(json!({})),
        _ if !connection.legacy_initialized.get() => Err(RpcError::new(
            Some(id.clone()),
            jsonrpc::INVALID_PARAMS,
            "missing _meta[\"io.modelcontextprotocol/protocolVersion\"]: send `initialize` first, or use the 2026-07-28 per-request envelope",
        )),
        "tools/list" => return Routed::Static { id, result: Rc::clone(&connection.statics.legacy_tools_list) },
        "tools/call" => match call_params(connection, &request).and_then(|call| {
            let kinds = connection.askable_kinds();
            match connection.catalog.callable(&call.0) {
                Some(tool) => super::refuse_undeclared(&id, tool, &kinds).map(|()| call),
                None => Ok(call),
            }
        }) {
            Ok((tool, arguments, progress)) => {
                let log_level = connection.legacy_log_level.get();
                let input = InputTurn::new(connection.askable_kinds(), None, None);
                let job = CallJob::Tool;
                let traceparent = None;
                return Routed::Call(PendingCall {
                    id,
                    tool,
                    arguments,
                    progress,
                    log_level,
                    finish,
                    job,
                    input,
                    traceparent,
                    task: false,
                });
            }
            Err(error) => Err(error),
        },
        "logging/setLevel" => set_level(connection, &request),
        "completion/complete" if crate::call::surface::completes(&connection.catalog) => completion(connection, &request),
        "resources/list" if has_resources(connection) => {
            Ok(json!({"resources": crate::call::surface::resources(&connection.catalog)}))
        }
        "resources/templates/list" if has_resources(connection) => {
            Ok(json!({"resourceTemplates": crate::call::surface::templates(&connection.catalog)}))
        }
        "resources/read" if has_resources(connection) => {
            match read_call(connection, &request, RESOURCE_NOT_FOUND, finish) {
                Ok(call) => return Routed::Call(call),
                Err(error) => Err(error),
            }
        }
        "prompts/list" if !connection.catalog.prompts.is_empty() => {
            Ok(json!({"prompts": crate::call::surface::prompts(&connection.catalog)}))
        }
        "prompts/get" if !connection.catalog.prompts.is_empty() => match prompt_call(connection, &request, finish) {
            Ok(call) => return Routed::Call(call),
            Err(error) => Err(error),
        },
        method => Err(RpcError::new(Some(id.clone()), jsonrpc::METHOD_NOT_FOUND, format!("Method not found: {method}"))),
    };
    Routed::Reply(match outcome {
        Ok(result) => jsonrpc::response(&id, result),
        Err(error) => error.to_value(),
    })
}

/// The result of `tools/list` (built once, `StaticResults`).
pub(super) fn tools_list(tools: Value) -> Value {
    json!({"tools": tools})
}

fn initialize(connection: &Connection, request: &Request) -> Result<Value, RpcError> {
    let id = Some(request.id.clone());
    if connection.legacy_initialized.get() {
        return Err(RpcError::new(
            id,
            jsonrpc::INVALID_REQUEST,
            "`initialize` was already received on this connection",
        ));
    }
    let params = request.params.as_ref();
    let Some(requested) = params.and_then(|p| p.get("protocolVersion")).and_then(Value::as_str) else {
        return Err(RpcError::new(id, jsonrpc::INVALID_PARAMS, "`initialize` needs a string `protocolVersion`"));
    };
    if !params.and_then(|p| p.get("capabilities")).is_some_and(Value::is_object) {
        return Err(RpcError::new(id, jsonrpc::INVALID_PARAMS, "`initialize` needs an object `capabilities`"));
    }
    // A client asking for any other version (rmcp asks for 2026-07-28 here) is answered
    // with the one version this handshake serves; it disconnects if it cannot use it.
    if requested != LEGACY_VERSION {
        connection.env.log(&format!("initialize asked for {requested}; answering {LEGACY_VERSION}"));
    }
    connection.legacy_initialized.set(true);
    if connection.can_ask.get() {
        *connection.legacy_kinds.borrow_mut() =
            super::asking::declared_kinds(params.and_then(|p| p.get("capabilities")));
    }
    Ok(json!({
        "protocolVersion": LEGACY_VERSION,
        "capabilities": super::capabilities(&connection.catalog),
        "serverInfo": connection.server_info(),
    }))
}

/// `logging/setLevel`: from now on, calls' runs send log messages at this level and above.
fn set_level(connection: &Connection, request: &Request) -> Result<Value, RpcError> {
    let level = request.params.as_ref().and_then(|p| p.get("level")).and_then(Value::as_str);
    let Some(level) = level.and_then(crate::run::notice::log_level) else {
        let message = format!("`level` must be one of {}", crate::run::notice::LOG_LEVELS.join(", "));
        return Err(RpcError::new(Some(request.id.clone()), jsonrpc::INVALID_PARAMS, message));
    };
    connection.legacy_log_level.set(Some(level));
    Ok(json!({}))
}

fn finish(_connection: &Connection, id: &RequestId, result: Value) -> Value {
    jsonrpc::response(id, result)
}
