//! Programs that spin or allocate inside one builtin, where `max_steps` cannot see them: each
//! execution runs in a worker process with a memory limit and is killed at its wall-clock
//! limit (`limits.execution_ms`). The run ends as `budget`, the server keeps serving, and
//! nothing is left to resume at the next start. A program whose top level does the same is
//! refused at `warden check`.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{fixture, Era, Wire};
use serde_json::{json, Value};

fn call(wire: &mut Wire, id: i64, tool: &str, arguments: Value) -> Value {
    let answer = wire.request(Era::Modern, json!(id), "tools/call", json!({"name": tool, "arguments": arguments}));
    answer["result"].clone()
}

fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

/// The live worker processes (`warden exec-program`) of the server `parent`.
fn workers_of(parent: u32) -> Vec<u32> {
    let mut workers = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // pid (comm) state ppid ...: the fields after the last ')'.
        let fields: Vec<&str> =
            stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let alive = fields.first().is_some_and(|state| *state != "Z");
        if alive
            && fields.get(1) == Some(&parent.to_string().as_str())
            && String::from_utf8_lossy(&cmdline).contains("exec-program")
        {
            workers.push(pid);
        }
    }
    workers
}

/// Issue 23 item 4: a worker that died while idle (the OOM killer picks large processes, often
/// a worker that held a big heap) is not the next run's failure: its job goes to a fresh
/// worker. Only a worker that dies during the job ends the run.
#[test]
fn a_worker_that_died_while_idle_is_replaced_not_blamed() {
    let mut wire = Wire::start(&fixture("runaway/manifest.json"));
    let first = call(&mut wire, 1, "echo", json!({"text": "one"}));
    assert_eq!(first["structuredContent"]["result"], json!("one"), "{first}");
    let idle = workers_of(wire.pid());
    assert!(!idle.is_empty(), "a worker waits for the next job");
    for pid in &idle {
        assert!(Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    }
    let waited = std::time::Instant::now();
    while !workers_of(wire.pid()).is_empty() {
        assert!(waited.elapsed() < Duration::from_secs(10), "the workers did not die");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = call(&mut wire, 2, "echo", json!({"text": "two"}));
    assert_eq!(second["structuredContent"]["result"], json!("two"), "{second}");
}

#[test]
fn a_builtin_that_spins_or_allocates_ends_its_run_as_budget_and_the_server_serves_on() {
    let mut wire = Wire::start(&fixture("runaway/manifest.json"));
    let spun = call(&mut wire, 1, "encode_shared", json!({"depth": 60}));
    assert_eq!(spun["isError"], json!(true), "{spun}");
    assert!(text(&spun).starts_with("budget: ") && text(&spun).contains("wall-clock limit of 2000 ms"), "{spun}");
    wire.assert_serving(2);
    let allocated = call(&mut wire, 3, "allocate", json!({"count": 1_000_000_000u64}));
    assert_eq!(allocated["isError"], json!(true), "{allocated}");
    assert!(text(&allocated).starts_with("budget: "), "{allocated}");
    let fine = call(&mut wire, 4, "echo", json!({"text": "still here"}));
    assert_eq!(fine["structuredContent"]["result"], json!("still here"), "{fine}");
    // Both runs settled: a restart has nothing to resume.
    let manifest = wire.dir.path().join("manifest.json");
    let status = Command::new(env!("CARGO_BIN_EXE_warden")).args(["mcp", "status"]).arg(&manifest).output().unwrap();
    assert!(String::from_utf8_lossy(&status.stdout).contains("unfinished runs: none"), "{status:?}");
    wire.close_stdin();
    assert!(wire.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn a_program_whose_top_level_allocates_without_bound_is_refused_at_check() {
    let manifest = fixture("broken/huge_constant/manifest.json");
    let output = Command::new(env!("CARGO_BIN_EXE_warden")).arg("check").arg(&manifest).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("huge.star: loading the program was stopped"), "{stderr}");
}
