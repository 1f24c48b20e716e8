//! Durable runs on the real binary and the real disk: the OS lock, `warden mcp status`
//! beside a running server, `warden_run_status` of a run in progress, and records surviving
//! a restart.

mod common;

use std::process::Command;

use common::{fixture, Era, Wire};
use serde_json::{json, Value};

fn run_id_from_progress(message: &Value) -> String {
    let text = message["params"]["message"].as_str().expect("a progress message");
    text.trim_start_matches("run ").trim_end_matches(" started").to_string()
}

#[test]
fn a_second_server_on_the_same_directory_waits_then_refuses() {
    let mut first = Wire::start(&fixture("wire/manifest.json"));
    first.assert_serving(1);
    let manifest = first.dir.path().join("manifest.json");
    let second = Command::new(env!("CARGO_BIN_EXE_warden")).arg("mcp").arg(&manifest).output().unwrap();
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("another server holds the lock; waiting up to 5000 ms"), "{stderr}");
    assert!(stderr.contains("another Warden server is using this journal directory; refusing to start"), "{stderr}");
    assert!(second.stdout.is_empty());
    // The first server is unaffected.
    first.assert_serving(2);
}

#[test]
fn the_lock_is_freed_when_a_server_is_killed() {
    let mut first = Wire::start(&fixture("wire/manifest.json"));
    first.assert_serving(1);
    let mut second = first.restart();
    second.assert_serving(2);
}

#[test]
fn status_beside_a_running_server_and_run_status_of_a_run_in_progress() {
    let mut wire = Wire::start(&fixture("wire/manifest.json"));
    let mut call = Wire::request_message(
        Era::Modern,
        json!(1),
        "tools/call",
        json!({"name": "slow", "arguments": {"rounds": 60}}),
    );
    call["params"]["_meta"]["progressToken"] = json!("slow-1");
    wire.expect_era(&json!(1), Era::Modern, "tools/call");
    wire.send_line(&call);
    let progress = wire.recv();
    assert_eq!(progress["method"], json!("notifications/progress"), "{progress}");
    assert_eq!(progress["params"]["progressToken"], json!("slow-1"));
    let run = run_id_from_progress(&progress);
    assert_eq!(run.len(), 32);

    // The operator's view, read without the lock, while the run is in progress.
    let manifest = wire.dir.path().join("manifest.json");
    let status = Command::new(env!("CARGO_BIN_EXE_warden")).args(["mcp", "status"]).arg(&manifest).output().unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let report = String::from_utf8_lossy(&status.stdout);
    assert!(report.contains(&format!("slow {run}, reserved ")), "{report}");
    assert!(report.contains("executing its program; nothing to do while it runs"), "{report}");
    assert!(report.contains("server: running"), "{report}");

    let running = wire.request(
        Era::Modern,
        json!(2),
        "tools/call",
        json!({"name": "warden_run_status", "arguments": {"run": run}}),
    );
    assert_eq!(running["result"]["structuredContent"]["result"]["status"], json!("running"), "{running}");

    let done = wire.recv();
    assert_eq!(done["id"], json!(1));
    assert_eq!(done["result"]["structuredContent"]["result"], json!(6_000_000));
    let after = wire.request(
        Era::Modern,
        json!(3),
        "tools/call",
        json!({"name": "warden_run_status", "arguments": {"run": run}}),
    );
    assert_eq!(after["result"]["structuredContent"]["result"]["status"], json!("done"));

    // The records survive a restart.
    let mut restarted = wire.restart();
    let again = restarted.request(
        Era::Modern,
        json!(4),
        "tools/call",
        json!({"name": "warden_run_status", "arguments": {"run": run}}),
    );
    assert_eq!(again["result"]["structuredContent"]["result"]["result"], json!(6_000_000));
}

#[test]
fn the_status_tool_is_listed_last() {
    let mut wire = Wire::start(&fixture("wire/manifest.json"));
    let listed = wire.request(Era::Modern, json!(1), "tools/list", json!({}));
    let names: Vec<&str> =
        listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names.last(), Some(&"warden_run_status"));
    assert_eq!(names[0], "echo", "manifest order");
}
