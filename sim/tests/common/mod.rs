//! What the simulator's action tests share: a `tools/call` message, asking and reading the
//! answer, money, and where the journals are. Each test file uses a subset of them.
#![allow(dead_code)]

use serde_json::{json, Value};
use warden_sim::env::executor::Stop;
use warden_sim::env::world::{Instance, World};

pub fn call(id: i64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
}

/// Sends `message`, runs the instance until it is quiet, and returns the answer's result.
pub fn ask(instance: &Instance, message: &Value) -> Value {
    instance.send(message);
    assert_eq!(instance.run(), Stop::Quiet, "log: {:?}", instance.log());
    let outputs = instance.outputs();
    let answer = outputs.iter().find(|m| m.get("id") == Some(&message["id"]));
    answer.unwrap_or_else(|| panic!("no answer: {outputs:?}; log {:?}", instance.log()))["result"].clone()
}

pub fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

pub fn usd(amount: &str) -> Value {
    json!({"amount": amount, "currency": "USD"})
}

pub fn journals() -> std::path::PathBuf {
    World::path("journals")
}
