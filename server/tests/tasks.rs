//! Tasks (the 2026-07-28 extension, SEP-2663) over the real binary: a task is a durable run.
//! Created, asked for input, answered key by key, killed with kill -9 in between and found
//! again after the restart; cancelled; refused (-32021) to a client that did not declare the
//! extension, or a capability its tool requires.

mod common;

use std::time::{Duration, Instant};

use common::{fixture, Era, Wire};
use serde_json::{json, Value};

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A 2026-07-28 request whose client declares `capabilities`.
fn with(capabilities: Value, id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({"io.modelcontextprotocol/clientCapabilities": capabilities});
    Wire::request_message(Era::Modern, json!(id), method, params)
}

fn declaring() -> Value {
    json!({"elicitation": {}, "extensions": {TASKS: {}}})
}

/// Sends a request and returns its answer (tasks methods have no schema definition to check
/// the answer against; their shapes are asserted here).
fn ask(wire: &mut Wire, message: Value) -> Value {
    let id = message["id"].clone();
    wire.send_line(&message);
    let answer = wire.recv();
    assert_eq!(answer["id"], id, "{answer}");
    answer
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(100);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn get(wire: &mut Wire, task: &str) -> Value {
    let answer = ask(wire, with(declaring(), next_id(), "tasks/get", json!({"taskId": task})));
    answer["result"].clone()
}

/// Polls `tasks/get` until the task's status is `wanted`.
fn until(wire: &mut Wire, task: &str, wanted: &str) -> Value {
    let started = Instant::now();
    loop {
        let status = get(wire, task);
        if status["status"] == wanted {
            return status;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "task {task} never became {wanted}: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn create(wire: &mut Wire, tool: &str, arguments: Value) -> String {
    let answer = ask(wire, with(declaring(), next_id(), "tools/call", json!({"name": tool, "arguments": arguments})));
    let result = &answer["result"];
    assert_eq!(result["resultType"], "task", "{answer}");
    for absent in ["result", "error", "inputRequests", "requestState", "ttl", "pollInterval", "task"] {
        assert!(result.get(absent).is_none(), "a CreateTaskResult has no `{absent}`: {answer}");
    }
    assert!(result["createdAt"].as_str().is_some_and(|at| at.ends_with('Z')), "{answer}");
    assert_eq!(result["ttlMs"], json!(7 * 24 * 60 * 60 * 1000_u64));
    result["taskId"].as_str().expect("a task id").to_string()
}

#[test]
fn a_task_asks_survives_kill_9_and_completes_with_its_result() {
    let mut wire = Wire::start(&fixture("tasks/manifest.json"));
    let task = create(&mut wire, "confirm", json!({"filename": "notes.txt"}));
    let waiting = until(&mut wire, &task, "input_required");
    assert_eq!(waiting["resultType"], "complete");
    assert_eq!(waiting["inputRequests"]["confirm"]["method"], "elicitation/create", "{waiting}");
    assert!(waiting.get("requestState").is_none());

    // The server dies with the task waiting; the task is the run, and the run is durable.
    assert!(wire.kill_now());
    let mut wire = wire.restart();
    let waiting = until(&mut wire, &task, "input_required");
    assert!(waiting["inputRequests"]["confirm"].is_object(), "{waiting}");

    let answer = json!({"confirm": {"action": "accept", "content": {"confirm": true}}, "not-asked": {"x": 1}});
    let ack =
        ask(&mut wire, with(declaring(), next_id(), "tasks/update", json!({"taskId": task, "inputResponses": answer})));
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let done = until(&mut wire, &task, "completed");
    assert_eq!(done["result"]["structuredContent"]["result"], "deleted notes.txt", "{done}");
    assert_eq!(done["taskId"], json!(task));
    // An ended task is cancelled idempotently: it stays as it ended.
    let ack = ask(&mut wire, with(declaring(), next_id(), "tasks/cancel", json!({"taskId": task})));
    assert_eq!(ack["result"], json!({"resultType": "complete"}));
    assert_eq!(get(&mut wire, &task)["status"], "completed");
}

/// A round of two keys answered one at a time: the task stays `input_required` with the key
/// left, and goes on once both are answered.
#[test]
fn a_task_round_is_answered_key_by_key() {
    let mut wire = Wire::start(&fixture("tasks/manifest.json"));
    let task = create(&mut wire, "pair", json!({}));
    let waiting = until(&mut wire, &task, "input_required");
    assert_eq!(waiting["inputRequests"].as_object().map(|keys| keys.len()), Some(2), "{waiting}");
    let first = json!({"first": {"action": "accept", "content": {"name": "Ada"}}});
    ask(&mut wire, with(declaring(), next_id(), "tasks/update", json!({"taskId": task, "inputResponses": first})));
    let half = get(&mut wire, &task);
    assert_eq!(half["status"], "input_required", "{half}");
    let keys: Vec<&String> = half["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["second"], "{half}");
    let second = json!({"second": {"action": "accept", "content": {"name": "Grace"}}});
    ask(&mut wire, with(declaring(), next_id(), "tasks/update", json!({"taskId": task, "inputResponses": second})));
    let done = until(&mut wire, &task, "completed");
    assert_eq!(done["result"]["structuredContent"]["result"], "Hello, Ada and Grace!", "{done}");
}

#[test]
fn a_task_is_cancelled_while_it_asks_and_a_failed_run_is_a_failed_task() {
    let mut wire = Wire::start(&fixture("tasks/manifest.json"));
    let task = create(&mut wire, "confirm", json!({"filename": "keep.txt"}));
    until(&mut wire, &task, "input_required");
    let ack = ask(&mut wire, with(declaring(), next_id(), "tasks/cancel", json!({"taskId": task})));
    assert_eq!(ack["result"], json!({"resultType": "complete"}));
    until(&mut wire, &task, "cancelled");

    let spin = create(&mut wire, "spin", json!({}));
    let failed = until(&mut wire, &spin, "failed");
    assert_eq!(failed["error"]["code"], json!(-32603), "{failed}");
    assert!(failed.get("result").is_none(), "{failed}");
}

#[test]
fn what_a_request_did_not_declare_is_refused_with_32021() {
    let mut wire = Wire::start(&fixture("tasks/manifest.json"));
    let bare = json!({});
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let answer =
            ask(&mut wire, with(bare.clone(), next_id(), method, json!({"taskId": "gate", "inputResponses": {}})));
        assert_eq!(answer["error"]["code"], json!(-32021), "{answer}");
        assert!(answer["error"]["data"]["requiredCapabilities"]["extensions"][TASKS].is_object(), "{answer}");
    }
    let answer =
        ask(&mut wire, with(bare.clone(), next_id(), "tools/call", json!({"name": "must_task", "arguments": {}})));
    assert_eq!(answer["error"]["code"], json!(-32021), "{answer}");
    let answer =
        ask(&mut wire, with(declaring(), next_id(), "tools/call", json!({"name": "needs_sampling", "arguments": {}})));
    assert_eq!(answer["error"]["code"], json!(-32021), "{answer}");
    assert!(answer["error"]["data"]["requiredCapabilities"]["sampling"].is_object(), "{answer}");
    let sampling = json!({"sampling": {}});
    let answer =
        ask(&mut wire, with(sampling, next_id(), "tools/call", json!({"name": "needs_sampling", "arguments": {}})));
    assert_eq!(answer["result"]["structuredContent"]["result"], "done", "{answer}");
    // Without the extension, a tool that may be a task runs as a plain call.
    let plain = json!({"elicitation": {}});
    let answer = ask(
        &mut wire,
        with(plain, next_id(), "tools/call", json!({"name": "confirm", "arguments": {"filename": "a"}})),
    );
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
    let unknown = ask(
        &mut wire,
        with(declaring(), next_id(), "tasks/get", json!({"taskId": "0123456789abcdef0123456789abcdef"})),
    );
    assert_eq!(unknown["error"]["code"], json!(-32602), "{unknown}");
    let created =
        ask(&mut wire, with(declaring(), next_id(), "tools/call", json!({"name": "must_task", "arguments": {}})));
    let task = created["result"]["taskId"].as_str().expect("a task").to_string();
    let done = until(&mut wire, &task, "completed");
    assert_eq!(done["result"]["structuredContent"]["result"], "done");
}

/// What `tasks/update` acknowledges is what the run is given: an answer over the limit, a
/// second full answer to a round already answered, or answers to a task that waits for
/// nothing are refused (-32602), and the task goes on as it was.
#[test]
fn a_task_update_is_refused_unless_the_run_will_take_it() {
    let mut wire = Wire::start(&fixture("tasks/manifest.json"));
    let task = create(&mut wire, "confirm", json!({"filename": "big.txt"}));
    until(&mut wire, &task, "input_required");
    let huge = "x".repeat(300 * 1024);
    let too_big = json!({"confirm": {"action": "accept", "content": {"confirm": true, "note": huge}}});
    let update = |wire: &mut Wire, answers: Value| {
        ask(wire, with(declaring(), next_id(), "tasks/update", json!({"taskId": task, "inputResponses": answers})))
    };
    let refused = update(&mut wire, too_big);
    assert_eq!(refused["error"]["code"], json!(-32602), "{refused}");
    assert_eq!(get(&mut wire, &task)["status"], "input_required");
    let yes = json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    let no = json!({"confirm": {"action": "accept", "content": {"confirm": false}}});
    assert_eq!(update(&mut wire, yes)["result"], json!({"resultType": "complete"}));
    let second = update(&mut wire, no);
    assert_eq!(second["error"]["code"], json!(-32602), "a second answer to a round was taken: {second}");
    let done = until(&mut wire, &task, "completed");
    assert_eq!(done["result"]["structuredContent"]["result"], "deleted big.txt", "{done}");
    let late = update(&mut wire, json!({"confirm": {"action": "decline"}}));
    assert_eq!(late["error"]["code"], json!(-32602), "{late}");
}

/// A retry carries a `requestState`: it continues the run the state names, even from a client
/// that declares the tasks extension for a tool that may run as a task. Found by the simulator
/// (seed 14106 of the 100,000-seed sweep): the retry became a new task, its state dropped, so
/// an altered state went unchecked and the call was admitted afresh (a second run).
#[test]
fn a_retry_declaring_tasks_continues_its_run_instead_of_starting_a_task() {
    let mut wire = Wire::start(&fixture("tasks/manifest.json"));
    let plain = json!({"elicitation": {}});
    let arguments = json!({"filename": "notes.txt"});
    let asked =
        ask(&mut wire, with(plain, next_id(), "tools/call", json!({"name": "confirm", "arguments": arguments})));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"].as_str().expect("a requestState").to_string();
    let run = asked["result"]["_meta"]["dev.warden/run"]["run"].clone();

    // An altered state (its seal kept) is refused, tasks declared or not.
    let (payload, seal) = state.split_once('.').unwrap();
    let altered = format!("{}x.{seal}", &payload[..payload.len() - 1]);
    let answers = json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    let params = json!({"name": "confirm", "arguments": arguments, "requestState": altered, "inputResponses": answers});
    let refused = ask(&mut wire, with(declaring(), next_id(), "tools/call", params));
    assert_eq!(refused["error"]["code"], json!(-32602), "{refused}");

    let params = json!({"name": "confirm", "arguments": arguments, "requestState": state, "inputResponses": answers});
    let done = ask(&mut wire, with(declaring(), next_id(), "tools/call", params));
    assert_ne!(done["result"]["resultType"], "task", "a retry is not a new task: {done}");
    assert_eq!(done["result"]["structuredContent"]["result"], "deleted notes.txt", "{done}");
    assert_eq!(done["result"]["_meta"]["dev.warden/run"]["run"], run, "the run its state named: {done}");
}

/// A task whose journal reads back damaged is said so, for good (-32602): not "ask again"
/// (-32603), which is for a journal that could not be read just now (found in review: the
/// retryable answer first given to every read error would have a client ask for ever).
#[test]
fn a_task_whose_journal_is_damaged_is_said_so_not_to_ask_again() {
    let mut wire = Wire::start(&fixture("tasks/manifest.json"));
    let spin = create(&mut wire, "spin", json!({}));
    until(&mut wire, &spin, "failed");
    let journal = common::walk(wire.dir.path())
        .into_iter()
        .find(|path| path.file_name().is_some_and(|name| name.to_string_lossy() == format!("{spin}.journal")))
        .expect("the task's journal");
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes[10] ^= 0x01;
    std::fs::write(&journal, bytes).unwrap();
    let answer = ask(&mut wire, with(declaring(), next_id(), "tasks/get", json!({"taskId": spin})));
    assert_eq!(answer["error"]["code"], json!(-32602), "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("damaged"), "{answer}");
}

/// A task's `createdAt` is when its run was admitted, the same in every answer (issue 45 item
/// 6): it was the answer's own time at creation, then 1970 until the run's header was
/// journaled, then the header's time, so a client expiring tasks at `createdAt + ttlMs` could
/// drop a live one and call again.
#[test]
fn a_tasks_created_at_never_moves() {
    let mut wire = Wire::start(&fixture("tasks/manifest.json"));
    let answer = ask(
        &mut wire,
        with(declaring(), next_id(), "tools/call", json!({"name": "confirm", "arguments": {"filename": "a.txt"}})),
    );
    let task = answer["result"]["taskId"].as_str().unwrap().to_string();
    let created = answer["result"]["createdAt"].clone();
    let waiting = until(&mut wire, &task, "input_required");
    assert_eq!(waiting["createdAt"], created, "{waiting}");
    assert!(wire.kill_now());
    let mut wire = wire.restart();
    let answer = json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    ask(&mut wire, with(declaring(), next_id(), "tasks/update", json!({"taskId": task, "inputResponses": answer})));
    let done = until(&mut wire, &task, "completed");
    assert_eq!(done["createdAt"], created, "{done}");
}
