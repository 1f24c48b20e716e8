//! Issue 25 item 2: the log (stderr) through `tracing`: a timestamp and a level on every line,
//! `--log-format json` for one JSON object a line, `RUST_LOG` filters, a run's lines carrying
//! its run and tool (and the action, for a line about one) as fields, refusals logged with their reason, the exit saying why. Stdout
//! stays the protocol's alone.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// Serves the toolbox example over stdio for `requests`, then closes stdin: (stdout, stderr).
fn serve(args: &[&str], env: &[(&str, &str)], requests: &[Value]) -> (String, String) {
    serve_in(&common::private_copy(&common::repo_root().join("examples/toolbox")), args, env, requests)
}

/// Serves the manifest in `dir` over stdio for `requests`, then closes stdin.
fn serve_in(dir: &tempfile::TempDir, args: &[&str], env: &[(&str, &str)], requests: &[Value]) -> (String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("mcp")
        .arg(dir.path().join("manifest.json"))
        .args(args)
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for request in requests {
        writeln!(stdin, "{request}").unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
}

fn calls() -> Vec<Value> {
    vec![call(1, "text_stats", json!({"text": "one two three"})), call(2, "convert_length", json!({"value": "x"}))]
}

#[test]
fn json_lines_carry_levels_and_a_run_s_fields() {
    let (stdout, stderr) = serve(&["--log-format", "json"], &[], &calls());
    // Stdout holds the two answers and nothing else.
    let answers: Vec<Value> = stdout.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(answers.len(), 2, "{stdout}");
    let lines: Vec<Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: a log line is not JSON: {line}")))
        .collect();
    for line in &lines {
        let stamp = line["timestamp"].as_str().unwrap_or_default();
        assert!(stamp.len() == 24 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T', "{line}");
        assert!(["ERROR", "WARN", "INFO", "DEBUG"].contains(&line["level"].as_str().unwrap_or_default()), "{line}");
        assert!(line["message"].is_string(), "{line}");
    }
    let first = answers.iter().find(|answer| answer["id"] == 1).unwrap();
    let run = first["result"]["_meta"]["dev.warden/run"]["run"].as_str().unwrap();
    let settled = lines.iter().find(|l| l["message"] == "settled (done)").expect("the run's settle is logged");
    assert_eq!((settled["run"].as_str(), settled["tool"].as_str()), (Some(run), Some("text_stats")), "{settled}");
    let refused = lines.iter().find(|l| l["message"].as_str().unwrap().starts_with("call refused (invalid_arguments)"));
    let refused = refused.expect("the refusal is logged");
    assert_eq!((refused["level"].as_str(), refused["tool"].as_str()), (Some("INFO"), Some("convert_length")));
    assert!(refused["message"].as_str().unwrap().contains("$.value"), "{refused}");
    let last = lines.last().unwrap();
    assert!(last["message"].as_str().unwrap().starts_with("exiting: the protocol stream ended"), "{last}");
}

#[test]
fn text_lines_have_a_level_and_rust_log_filters_them() {
    let (_, stderr) = serve(&[], &[], &calls());
    let settled = stderr.lines().find(|line| line.contains(": settled (done)")).expect("the settle is logged");
    assert!(settled.contains("  INFO warden: tool text_stats run "), "{settled}");
    assert!(stderr.lines().all(|line| line.as_bytes().get(23) == Some(&b'Z')), "{stderr}");

    let (_, quiet) = serve(&[], &[("RUST_LOG", "warn")], &calls());
    assert!(quiet.lines().all(|line| !line.contains(" INFO ")), "RUST_LOG=warn kept info lines:\n{quiet}");
    let (_, debug) = serve(&[], &[("RUST_LOG", "debug")], &calls());
    assert!(debug.contains("settled (done)"), "{debug}");

    let dir = common::private_copy(&common::repo_root().join("examples/toolbox"));
    let refused = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("mcp")
        .arg(dir.path().join("manifest.json"))
        .env("RUST_LOG", "warden=[[")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is not a filter"), "{refused:?}");
}

#[test]
fn a_line_about_an_action_names_it_with_its_run_and_tool() {
    let payments = common::payments::Payments::start();
    let dir = payments.shop();
    let refund = call(1, "refund_order", json!({"order": "pi_1001", "amount": {"amount": "12.5", "currency": "USD"}}));
    let env = [("STRIPE_SECRET_KEY", "sk_test_logs"), ("RUST_LOG", "debug")];
    let (stdout, stderr) = serve_in(&dir, &["--log-format", "json"], &env, &[refund]);
    let answer: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let run = answer["result"]["_meta"]["dev.warden/run"]["run"].as_str().unwrap();
    let lines: Vec<Value> = stderr.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert!(lines.iter().all(|line| !line["action"].is_string()), "an action's number is a number: {stderr}");
    let actions: Vec<&Value> = lines.iter().filter(|line| line["action"].is_u64()).collect();
    // The program reads the payment intent, then refunds: one line for each, in order.
    let ops: Vec<u64> = actions.iter().map(|line| line["action"].as_u64().unwrap()).collect();
    assert_eq!(ops, [0, 1], "{stderr}");
    let host = format!("127.0.0.1:{}", payments.port);
    let kind = "payments.stripe.refund";
    let said = [format!("{kind} GET {host}: done (status 200) in "), format!("{kind} REFUND: done (status 200) in ")];
    for (line, says) in actions.iter().zip(said) {
        assert_eq!((line["run"].as_str(), line["tool"].as_str()), (Some(run), Some("refund_order")), "{line}");
        assert_eq!(line["level"], json!("DEBUG"), "{line}");
        let message = line["message"].as_str().unwrap();
        assert!(message.contains(&says), "{line}");
    }
    assert!(!stderr.contains("sk_test_logs"), "{stderr}");
}
