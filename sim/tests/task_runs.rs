//! Tasks through the simulator: what a `tasks/cancel` acknowledges, against an action in
//! flight and a crash.

mod common;

use serde_json::{json, Value};
use warden_sim::env::executor::Stop;
use warden_sim::env::services::NetFault;
use warden_sim::env::world::{Instance, World};

const MANIFEST: &str = r#"{
  "server": { "name": "tasks", "journals": "journals" },
  "tools": [
    { "name": "fetch_twice", "program": "fetch_twice.star", "task": "optional",
      "net": { "timeout_ms": 200000, "connect_timeout_ms": 1000 },
      "grants": { "web": { "cap": "net.http.get", "only": ["https://notes.sim/notes"] } } }
  ]
}"#;

const FETCH_TWICE: &str = r#"
def main(web) -> list:
    """Fetch the notes twice."""
    first = web.get("https://notes.sim/notes")
    second = web.get("https://notes.sim/notes")
    return [first["status"], second["status"]]
"#;

/// The first fetch takes this long: longer than an instance's run is allowed to wait
/// (`HORIZON_MS`), so the run is in the middle of an action until the clock is moved.
const SLOW_MS: u64 = 120_000;

fn request(id: i64, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn answer(outputs: &[Value], id: i64) -> Option<Value> {
    outputs.iter().find(|m| m["id"] == json!(id)).cloned()
}

fn start() -> (World, Instance) {
    let world = World::new(21);
    world.install("manifest.json", MANIFEST.as_bytes());
    world.install("fetch_twice.star", FETCH_TWICE.as_bytes());
    let instance = world.start("manifest.json");
    assert_eq!(instance.run(), Stop::Quiet);
    (world, instance)
}

/// Creates the task with its first fetch held in flight; returns its id.
fn task_in_flight(world: &World, instance: &Instance) -> String {
    world.services.fault_next("notes.sim", NetFault::Slow(SLOW_MS));
    instance.send(&request(1, "tools/call", json!({"name": "fetch_twice", "arguments": {}})));
    assert_eq!(instance.run(), Stop::Quiet);
    let created = answer(&instance.outputs(), 1).expect("the call is answered with a task");
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    assert_eq!(world.services.requests.borrow().len(), 1, "the first fetch is in flight");
    created["result"]["taskId"].as_str().expect("a task id").to_string()
}

fn status(instance: &Instance, id: i64, task: &str) -> Value {
    instance.send(&request(id, "tasks/get", json!({"taskId": task})));
    assert_eq!(instance.run(), Stop::Quiet);
    answer(&instance.outputs(), id).unwrap_or_else(|| panic!("tasks/get is not answered: {:?}", instance.log()))
        ["result"]
        .clone()
}

/// The acknowledgement of a cancel says the run has ended: it comes once the action in
/// flight is done and the run has ended between actions, never before, so no crash after
/// it can bring the run back.
#[test]
fn a_cancel_is_acknowledged_once_the_run_has_ended_between_actions() {
    let (world, instance) = start();
    let task = task_in_flight(&world, &instance);
    instance.send(&request(2, "tasks/cancel", json!({"taskId": task})));
    assert_eq!(instance.run(), Stop::Quiet);
    assert_eq!(answer(&instance.outputs(), 2), None, "no acknowledgement while the run is inside an action");
    world.clock.advance(SLOW_MS);
    assert_eq!(instance.run(), Stop::Quiet);
    let ack = answer(&instance.outputs(), 2).expect("acknowledged once the run ended");
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    assert_eq!(status(&instance, 3, &task)["status"], "cancelled");
    assert_eq!(world.services.requests.borrow().len(), 1, "the second fetch never began");
    // Durable: a crash now and a restart find the task as it ended.
    world.crash(instance);
    let again = world.start("manifest.json");
    assert_eq!(again.run(), Stop::Quiet);
    assert_eq!(status(&again, 4, &task)["status"], "cancelled");
    assert_eq!(world.services.requests.borrow().len(), 1);
}

/// A crash while the cancel waits: it was never acknowledged, so the run resumed after the
/// restart may end as it would have (here, completed); a cancel sent then is acknowledged as
/// the run ended.
#[test]
fn a_cancel_cut_by_a_crash_was_never_acknowledged() {
    let (world, instance) = start();
    let task = task_in_flight(&world, &instance);
    instance.send(&request(2, "tasks/cancel", json!({"taskId": task})));
    assert_eq!(instance.run(), Stop::Quiet);
    assert_eq!(answer(&instance.outputs(), 2), None);
    world.crash(instance);
    // The restart resends the read begun before the crash, held in flight again.
    world.services.fault_next("notes.sim", NetFault::Slow(SLOW_MS));
    let again = world.start("manifest.json");
    assert_eq!(again.run(), Stop::Quiet);
    world.clock.advance(SLOW_MS);
    assert_eq!(again.run(), Stop::Quiet);
    assert_eq!(status(&again, 3, &task)["status"], "completed");
    assert_eq!(
        world.services.requests.borrow().len(),
        3,
        "the first fetch twice (resent after the crash), then the second"
    );
    again.send(&request(4, "tasks/cancel", json!({"taskId": task})));
    assert_eq!(again.run(), Stop::Quiet);
    assert_eq!(answer(&again.outputs(), 4).expect("acknowledged")["result"], json!({"resultType": "complete"}));
    assert_eq!(status(&again, 5, &task)["status"], "completed", "an ended task stays as it ended");
}
