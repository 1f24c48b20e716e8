//! The durability oracle finds a removed fsync on the first call that depends on it, with no
//! crash in its window: each test loses the fsyncs of one kind of file (as a planted bug
//! that deletes the call would) and makes one call.

use serde_json::{json, Value};
use warden_sim::env::oracle::INVARIANT;
use warden_sim::env::world::World;
use warden_sim::workload::fixture::install;

mod common;
use common::usd;

/// A call that asks for progress, so the answer can be tied to its run.
fn call(id: i64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
                  "progressToken": id}}})
}

/// Runs one call with the fsyncs of paths containing `lost` (if any) made no-ops; returns
/// what the oracle found.
fn one_call_losing(lost: Option<&str>, tool: &str, arguments: Value) -> Vec<String> {
    one_call(lost, None, tool, arguments)
}

fn one_call(lost: Option<&str>, lost_dir: Option<&str>, tool: &str, arguments: Value) -> Vec<String> {
    let world = World::new(7);
    install(&world, None, None);
    world.disk.faults.borrow_mut().lose_fsyncs_of = lost.map(str::to_string);
    world.disk.faults.borrow_mut().lose_dir_fsyncs_of = lost_dir.map(str::to_string);
    let instance = world.start("manifest.json");
    instance.send(&call(1, tool, arguments));
    instance.run();
    assert!(instance.outputs().iter().any(|m| m["id"] == json!(1)), "the call was answered: {:?}", instance.log());
    let found = world.oracle.violations.borrow().clone();
    assert!(found.iter().all(|v| v.invariant == INVARIANT));
    found.into_iter().map(|v| v.message).collect()
}

#[test]
fn with_every_fsync_in_place_the_oracle_finds_nothing() {
    assert_eq!(one_call_losing(None, "note", json!({"text": "a"})), Vec::<String>::new());
    assert_eq!(one_call_losing(None, "close", json!({"ticket": 3})), Vec::<String>::new());
    let refund = json!({"order": "pi_2003", "amount": usd("12.00")});
    assert_eq!(one_call_losing(None, "refund", refund), Vec::<String>::new());
}

#[test]
fn a_lost_journal_fsync_is_found_when_the_action_reaches_the_service() {
    let found = one_call_losing(Some(".journal"), "note", json!({"text": "a"}));
    assert!(found.iter().any(|m| m.contains("POST https://notes.sim/notes reached the service")), "{found:?}");
    let found = one_call_losing(Some(".journal"), "close", json!({"ticket": 3}));
    assert!(found.iter().any(|m| m.contains("SQLite write") && m.contains("not durable")), "{found:?}");
}

#[test]
fn a_lost_ledger_fsync_is_found_when_the_call_is_answered() {
    let found = one_call_losing(Some("ledger"), "echo", json!({"text": "a"}));
    assert!(found.iter().any(|m| m.contains("answered before its ledger records were durable")), "{found:?}");
}

#[test]
fn a_lost_directory_fsync_is_found_when_the_call_is_answered() {
    // The journal's directory: its entry in the tool's folder is never made durable.
    let found = one_call(None, Some("/journals/echo/"), "echo", json!({"text": "a"}));
    assert!(found.iter().any(|m| m.contains("answered before its journal was durable")), "{found:?}");
}

#[test]
fn a_lost_waiting_record_fsync_is_found_by_the_answer_and_by_notify() {
    let world = World::new(7);
    install(&world, None, None);
    world.disk.faults.borrow_mut().lose_fsyncs_of = Some("/waiting/".into());
    world.services.fault_next("notes.sim", warden_sim::env::services::NetFault::LoseResponse);
    let instance = world.start("manifest.json");
    instance.send(&call(1, "note", json!({"text": "a"})));
    instance.run();
    let found: Vec<String> = world.oracle.violations.borrow().iter().map(|v| v.message.clone()).collect();
    assert!(found.iter().any(|m| m.starts_with("the answer that it waits")), "{found:?}");
    assert!(found.iter().any(|m| m.starts_with("the notify command")), "{found:?}");
}
