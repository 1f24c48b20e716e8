//! A raw-line client for end-to-end tests of the real `warden` binary. Every message the
//! server writes is validated against the official `schema.json` of its era, in every test
//! that uses this harness: a message that does not validate fails the test.

#![allow(dead_code)]

pub mod loopback;
pub mod payments;
pub mod postgres;
pub mod provider;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long a test waits for one message before failing (a hang is a failure, not a wait).
pub const MESSAGE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Era {
    Legacy,
    Modern,
}

impl Era {
    fn schema_dir(self) -> &'static str {
        match self {
            Era::Legacy => "2025-11-25",
            Era::Modern => "2026-07-28",
        }
    }
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("server/ has a parent").to_path_buf()
}

pub fn fixture(path: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(path)
}

/// The result definition each method's answer must match, per era.
fn result_definition(method: &str) -> Option<&'static str> {
    match method {
        "initialize" => Some("InitializeResult"),
        "tools/list" => Some("ListToolsResult"),
        "tools/call" => Some("CallToolResult"),
        "server/discover" => Some("DiscoverResult"),
        "ping" | "logging/setLevel" => Some("EmptyResult"),
        "resources/list" => Some("ListResourcesResult"),
        "resources/templates/list" => Some("ListResourceTemplatesResult"),
        "resources/read" => Some("ReadResourceResult"),
        "prompts/list" => Some("ListPromptsResult"),
        "prompts/get" => Some("GetPromptResult"),
        "completion/complete" => Some("CompleteResult"),
        _ => None,
    }
}

type Validators = Mutex<HashMap<(Era, &'static str), Arc<jsonschema::Validator>>>;

fn validator(era: Era, definition: &'static str) -> Arc<jsonschema::Validator> {
    static CACHE: OnceLock<Validators> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut cache = cache.lock().unwrap();
    cache
        .entry((era, definition))
        .or_insert_with(|| {
            let path = fixture(&format!("mcp-schema/{}/schema.json", era.schema_dir()));
            let mut schema: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            schema["$ref"] = json!(format!("#/$defs/{definition}"));
            Arc::new(jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("compiling {definition}: {e}")))
        })
        .clone()
}

/// Fails the test unless `message` is valid under `era` (and its result under `method`).
pub fn assert_valid(message: &Value, era: Era, method: Option<&str>) {
    let check = |definition: &'static str, instance: &Value| {
        let validator = validator(era, definition);
        let errors: Vec<String> =
            validator.iter_errors(instance).map(|e| format!("{e} at {}", e.instance_path)).collect();
        assert!(errors.is_empty(), "{era:?} {definition} rejects {instance}:\n{}", errors.join("\n"));
    };
    check("JSONRPCMessage", message);
    if let (Some(result), Some(definition)) = (message.get("result"), method.and_then(result_definition)) {
        // A call, read or prompt of 2026-07-28 may answer that it needs input first.
        let asks = era == Era::Modern && result.get("resultType") == Some(&json!("input_required"));
        check(if asks { "InputRequiredResult" } else { definition }, result);
    }
}

pub struct Wire {
    /// A private copy of the fixture folder, so each test has its own journals.
    pub dir: tempfile::TempDir,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// Told when stderr reaches its end: what the server logged is all read.
    stderr_ended: Receiver<()>,
    /// Request id (as JSON text) -> the era and method it was sent under.
    sent: HashMap<String, (Era, String)>,
    /// Every message received, for tests that inspect the whole transcript.
    pub received: Vec<Value>,
}

impl Wire {
    pub fn start(manifest: &Path) -> Wire {
        Wire::start_with(manifest, &[])
    }

    /// A client that never reads: the server's stdout pipe is closed at once.
    pub fn start_deaf(manifest: &Path) -> Wire {
        Wire::spawn(manifest, &[], false)
    }

    pub fn start_with(manifest: &Path, env: &[(&str, &str)]) -> Wire {
        Wire::spawn(manifest, env, true)
    }

    fn spawn(manifest: &Path, env: &[(&str, &str)], reading: bool) -> Wire {
        let dir = private_copy(manifest.parent().expect("a manifest lives in a folder"));
        let manifest = dir.path().join(manifest.file_name().unwrap());
        Wire::spawn_in(dir, &manifest, env, reading)
    }

    /// Starts another server on the same private folder (a restart, or a second server).
    pub fn restart(mut self) -> Wire {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        let manifest = dir.path().join("manifest.json");
        Wire::spawn_in(dir, &manifest, &[], true)
    }

    /// Starts another server on this one's folder and manifest, beside it (two servers on one
    /// manifest); the folder stays this one's.
    pub fn start_beside(&self, env: &[(&str, &str)]) -> Wire {
        let manifest = self.dir.path().join("manifest.json");
        Wire::spawn_in(tempfile::tempdir().unwrap(), &manifest, env, true)
    }

    /// Starts a server on a prepared folder holding `manifest.json`.
    pub fn start_dir(dir: tempfile::TempDir, env: &[(&str, &str)]) -> Wire {
        let manifest = dir.path().join("manifest.json");
        Wire::spawn_in(dir, &manifest, env, true)
    }

    fn spawn_in(dir: tempfile::TempDir, manifest: &Path, env: &[(&str, &str)], reading: bool) -> Wire {
        let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
        command.arg("mcp").arg(manifest).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("starting warden");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        if !reading {
            drop(stdout);
        } else {
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let mut pipe = child.stderr.take().unwrap();
        let (stderr_ended, ended) = mpsc::channel::<()>();
        thread::spawn(move || {
            let mut buffer = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
            let _ = stderr_ended.send(());
        });
        let stdin = child.stdin.take();
        Wire { dir, stdin, child, lines, stderr, stderr_ended: ended, sent: HashMap::new(), received: Vec::new() }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(bytes).expect("writing to warden");
        stdin.flush().unwrap();
    }

    /// Like `send_raw`, but a closed pipe (the server exited) is not a failure.
    pub fn try_send_raw(&mut self, bytes: &[u8]) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = stdin.write_all(bytes).and_then(|_| stdin.flush());
        }
    }

    pub fn send_line(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// The request, with the 2026-07-28 envelope added when `era` is modern.
    pub fn request_message(era: Era, id: Value, method: &str, params: Value) -> Value {
        let mut params = if params.is_null() { json!({}) } else { params };
        if era == Era::Modern {
            let meta = params.as_object_mut().unwrap().entry("_meta").or_insert(json!({}));
            meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
            // A test may declare capabilities of its own (input kinds).
            let meta = meta.as_object_mut().unwrap();
            meta.entry("io.modelcontextprotocol/clientCapabilities").or_insert(json!({}));
        }
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// Sends a request and remembers its era, so its answer is validated under it.
    pub fn send_request(&mut self, era: Era, id: Value, method: &str, params: Value) {
        self.expect_era(&id, era, method);
        let message = Wire::request_message(era, id, method, params);
        self.send_line(&message);
    }

    pub fn expect_era(&mut self, id: &Value, era: Era, method: &str) {
        self.sent.insert(id.to_string(), (era, method.to_string()));
    }

    pub fn request(&mut self, era: Era, id: Value, method: &str, params: Value) -> Value {
        self.send_request(era, id.clone(), method, params);
        let message = self.recv();
        assert_eq!(message.get("id"), Some(&id), "expected the answer to {id}, got {message}");
        message
    }

    pub fn initialize(&mut self) -> Value {
        let answer = self.request(
            Era::Legacy,
            json!(0),
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "wire-test", "version": "1"}}),
        );
        self.send_line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        answer
    }

    /// The next message, validated against the schema of its era.
    pub fn recv(&mut self) -> Value {
        let line = match self.lines.recv_timeout(MESSAGE_TIMEOUT) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("no message within {MESSAGE_TIMEOUT:?}; stderr:\n{}", self.stderr())
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("warden closed stdout; stderr:\n{}", self.stderr())
            }
        };
        let message: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
        match message.get("id").map(|id| self.sent.get(&id.to_string()).cloned()) {
            Some(Some((era, method))) => assert_valid(&message, era, Some(&method)),
            // An error whose id cannot be read, or a reply to a raw line: valid in both eras.
            _ => {
                assert_valid(&message, Era::Legacy, None);
                assert_valid(&message, Era::Modern, None);
            }
        }
        self.received.push(message.clone());
        message
    }

    /// Asserts the next message is an error with `code` (and, when given, for `id`).
    pub fn expect_error(&mut self, code: i64, id: Option<Value>) -> Value {
        let message = self.recv();
        assert_eq!(message["error"]["code"], json!(code), "expected error {code}, got {message}");
        assert_eq!(message.get("id").cloned(), id, "wrong id on {message}");
        message
    }

    /// Proves the server is still serving: a modern discover must be answered next.
    pub fn assert_serving(&mut self, id: i64) {
        let answer = self.request(Era::Modern, json!(id), "server/discover", json!({}));
        assert_eq!(answer["result"]["resultType"], json!("complete"), "{answer}");
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Waits for the process to exit, failing the test after `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The exit can be seen before the last lines it logged are read.
                let _ = self.stderr_ended.recv_timeout(MESSAGE_TIMEOUT);
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("warden did not exit within {limit:?}; stderr:\n{}", self.stderr());
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the process with SIGKILL (no chance to clean up); true when it was still running.
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill_now(&mut self) -> bool {
        let running = self.child.try_wait().unwrap().is_none();
        let _ = self.child.kill();
        let _ = self.child.wait();
        running
    }

    /// Every line left on stdout until it closes (call after `wait_exit`).
    pub fn drain(&mut self) -> Vec<Value> {
        let mut rest = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            let message: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
            rest.push(message);
        }
        rest
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

/// Every regular file under `dir` (none when it is absent), to search them all: a live
/// server's admin socket is not a file to read.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else if path.is_file() {
            files.push(path);
        }
    }
    files
}

/// Copies a fixture folder's files (not its subfolders) into a new temporary folder.
pub fn private_copy(from: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    dir
}

impl Drop for Wire {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `warden mcp status` prints for the server whose manifest is in `dir`.
/// The journal a waiting run's report (`warden mcp status`, `warden runs show`) names, on its
/// `journal:` line.
pub fn printed_journal(report: &str) -> String {
    let line = report.lines().find_map(|line| line.trim().strip_prefix("journal:"));
    line.unwrap_or_else(|| panic!("no journal named: {report}")).trim().to_string()
}

pub fn status_report(dir: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["mcp", "status"])
        .arg(dir.join("manifest.json"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}
