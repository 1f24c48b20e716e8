//! JSON-RPC 2.0 message classification and error shapes (seed 000 section 3).
//!
//! A line becomes exactly one `Incoming`. Anything that is not a valid request or
//! notification becomes an error to send back (or nothing, for a response we did not ask
//! for). The MCP schema has no null id, so an error whose id cannot be read omits it.

use serde_json::{json, Map, Value};

use super::framing::{depth_exceeds, Frame};
use crate::limits::{DEPTH_MAX, LINE_BYTES_MAX};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// HTTP only: a request's headers do not match its body (2026-07-28).
pub const HEADER_MISMATCH: i64 = -32020;
/// The request did not declare a client capability the server needs to serve it (2026-07-28);
/// its data names them (`requiredCapabilities`).
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;

/// A request id: a string or an integer, kept as the client wrote it.
pub type RequestId = Value;

#[derive(Debug, PartialEq)]
pub struct Request {
    pub id: RequestId,
    pub method: String,
    pub params: Option<Map<String, Value>>,
}

#[derive(Debug, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: Option<Map<String, Value>>,
}

/// A protocol error: its code, one-sentence message, optional data, and the id to echo.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub id: Option<RequestId>,
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(id: Option<RequestId>, code: i64, message: impl Into<String>) -> RpcError {
        RpcError { id, code, message: message.into(), data: None }
    }

    pub fn with_data(mut self, data: Value) -> RpcError {
        self.data = Some(data);
        self
    }

    pub fn to_value(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code));
        error.insert("message".into(), json!(self.message));
        if let Some(data) = &self.data {
            error.insert("data".into(), data.clone());
        }
        let mut message = Map::new();
        message.insert("jsonrpc".into(), json!("2.0"));
        if let Some(id) = &self.id {
            message.insert("id".into(), id.clone());
        }
        message.insert("error".into(), Value::Object(error));
        Value::Object(message)
    }
}

#[derive(Debug, PartialEq)]
pub enum Incoming {
    Request(Request),
    Notification(Notification),
    /// A response from the client to a request the server sent (input for a run), with its
    /// id and its `result` or `error`.
    Response {
        id: Value,
        body: Map<String, Value>,
    },
    /// Something to answer with an error.
    Invalid(RpcError),
}

/// Classifies one frame without trusting anything in it.
pub fn classify(frame: &Frame) -> Incoming {
    let bytes = match frame {
        Frame::TooLong { bytes } => {
            return Incoming::Invalid(RpcError::new(
                None,
                INVALID_REQUEST,
                format!("line of {bytes} bytes exceeds the limit of {LINE_BYTES_MAX} bytes"),
            ))
        }
        Frame::Line(bytes) => bytes,
    };
    if depth_exceeds(bytes, DEPTH_MAX) {
        return Incoming::Invalid(RpcError::new(
            None,
            PARSE_ERROR,
            format!("JSON nested deeper than {DEPTH_MAX} levels"),
        ));
    }
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(error) => return Incoming::Invalid(RpcError::new(None, PARSE_ERROR, format!("not JSON: {error}"))),
    };
    classify_value(value)
}

fn classify_value(value: Value) -> Incoming {
    let mut object = match value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return Incoming::Invalid(RpcError::new(
                None,
                INVALID_REQUEST,
                "JSON-RPC batches are not supported; send one message a line",
            ))
        }
        _ => return Incoming::Invalid(RpcError::new(None, INVALID_REQUEST, "a message must be a JSON object")),
    };
    let id = match object.remove("id") {
        None => None,
        Some(id) if is_valid_id(&id) => Some(id),
        Some(_) => {
            return Incoming::Invalid(RpcError::new(None, INVALID_REQUEST, "`id` must be a string or an integer"))
        }
    };
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Incoming::Invalid(RpcError::new(id, INVALID_REQUEST, "`jsonrpc` must be \"2.0\""));
    }
    let method = match object.remove("method") {
        Some(Value::String(method)) => method,
        Some(_) => return Incoming::Invalid(RpcError::new(id, INVALID_REQUEST, "`method` must be a string")),
        None if id.is_some() && (object.contains_key("result") || object.contains_key("error")) => {
            return Incoming::Response { id: id.expect("checked"), body: object }
        }
        None => return Incoming::Invalid(RpcError::new(id, INVALID_REQUEST, "`method` is missing")),
    };
    let params = match object.remove("params") {
        None => None,
        Some(Value::Object(params)) => Some(params),
        Some(_) => {
            // A notification is never answered, even when malformed.
            return match id {
                None => Incoming::Notification(Notification { method, params: None }),
                Some(id) => Incoming::Invalid(RpcError::new(Some(id), INVALID_REQUEST, "`params` must be an object")),
            };
        }
    };
    match id {
        Some(id) => Incoming::Request(Request { id, method, params }),
        None => Incoming::Notification(Notification { method, params }),
    }
}

fn is_valid_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(number) => number.is_i64() || number.is_u64(),
        _ => false,
    }
}

/// A successful response.
pub fn response(id: &RequestId, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> Incoming {
        classify(&Frame::Line(text.as_bytes().to_vec()))
    }

    fn code(incoming: Incoming) -> (Option<RequestId>, i64) {
        match incoming {
            Incoming::Invalid(error) => (error.id, error.code),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn error_codes_follow_the_discipline() {
        assert_eq!(code(line("nope")), (None, PARSE_ERROR));
        assert_eq!(code(line("[]")), (None, INVALID_REQUEST));
        assert_eq!(code(line(r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#)), (None, INVALID_REQUEST));
        assert_eq!(code(line(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#)), (None, INVALID_REQUEST));
        assert_eq!(code(line(r#"{"jsonrpc":"1.0","id":7,"method":"x"}"#)), (Some(json!(7)), INVALID_REQUEST));
        assert_eq!(code(line(r#"{"jsonrpc":"2.0","id":"a","method":3}"#)), (Some(json!("a")), INVALID_REQUEST));
    }

    #[test]
    fn requests_notifications_and_responses() {
        assert!(matches!(line(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Incoming::Request(_)));
        assert!(matches!(line(r#"{"jsonrpc":"2.0","method":"n","params":[1]}"#), Incoming::Notification(_)));
        assert!(matches!(line(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#), Incoming::Response { .. }));
    }

    #[test]
    fn errors_without_a_readable_id_omit_it() {
        let value = RpcError::new(None, PARSE_ERROR, "bad").to_value();
        assert!(value.get("id").is_none());
    }
}
