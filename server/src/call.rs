//! The `tools/call` pipeline (seed 000 section 5), shared by both protocol eras.
//!
//! Steps: (1) find the tool, done by the caller because an unknown name is a protocol
//! error; (2) check the arguments by Warden's own rules; (3) look up `once`, (5) reserve
//! and (6) journal, which arrive with the durable-runs work; (4) take a concurrency slot;
//! run; (7) answer from the outcome. Everything after (1) is a tool result, so the model
//! sees it and can correct itself.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::{json, Map, Value};

use crate::catalog::{Catalog, Tool};
use crate::env::Env;
use crate::program::{self, FailureKind, Outcome, RunLimits};

/// The largest tool result sent, as JSON (seed 000 section 3).
pub const RESULT_BYTES_MAX: usize = 1024 * 1024;

/// Calls in progress beyond which a new call is answered busy at once (seed 000 section 5:
/// four times `server.max_concurrent_runs`, plus 16).
pub fn calls_in_progress_max(server_max_concurrent_runs: u64) -> usize {
    4 * server_max_concurrent_runs as usize + 16
}

/// A call's cancellation state, shared with the protocol layer.
#[derive(Default)]
pub struct CallControl {
    cancelled: Cell<bool>,
}

impl CallControl {
    pub fn cancel(&self) {
        self.cancelled.set(true);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.get()
    }
}

/// What the protocol layer sends for a call.
#[derive(Debug, PartialEq)]
pub enum CallReply {
    /// An era-neutral `CallToolResult` (content, structuredContent, isError).
    Result(Value),
    /// The call was cancelled: nothing more is sent for it.
    Silent,
}

/// Concurrency slots: runs in progress, server-wide and per tool. Not a queue: a call
/// that finds no slot is answered busy at once.
#[derive(Default)]
pub struct Slots {
    server: Cell<u64>,
    per_tool: RefCell<BTreeMap<String, u64>>,
}

pub struct Slot {
    slots: Rc<Slots>,
    tool: String,
}

impl Slots {
    fn take(self: &Rc<Self>, tool: &Tool, server_max: u64) -> Option<Slot> {
        let mut per_tool = self.per_tool.borrow_mut();
        let used = per_tool.entry(tool.config.name.clone()).or_insert(0);
        if self.server.get() >= server_max || *used >= tool.config.max_concurrent_runs {
            return None;
        }
        *used += 1;
        self.server.set(self.server.get() + 1);
        Some(Slot {
            slots: Rc::clone(self),
            tool: tool.config.name.clone(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut per_tool = self.slots.per_tool.borrow_mut();
        let used = per_tool
            .get_mut(&self.tool)
            .expect("a slot's tool is counted");
        assert!(
            *used > 0 && self.slots.server.get() > 0,
            "slot count underflow"
        );
        *used -= 1;
        self.slots.server.set(self.slots.server.get() - 1);
    }
}

/// Runs one call of a known tool to its reply.
pub async fn call_tool(
    env: &Env,
    catalog: &Catalog,
    slots: &Rc<Slots>,
    tool: &Tool,
    arguments: &Map<String, Value>,
    control: &CallControl,
) -> CallReply {
    let inputs = match tool.program.check_inputs(arguments) {
        Ok(inputs) => inputs,
        Err(problems) => {
            let text = format!("invalid arguments:\n- {}", problems.join("\n- "));
            return CallReply::Result(error_result(text));
        }
    };
    let Some(_slot) = slots.take(tool, catalog.manifest.server.max_concurrent_runs) else {
        return CallReply::Result(error_result(format!(
            "the server is busy: `{}` already has its maximum of runs in progress; nothing was run, try again later",
            tool.config.name
        )));
    };
    // The last point where cancellation stops the call: past it, the run has started.
    if control.is_cancelled() {
        env.log(&format!(
            "tool {}: call cancelled before its run started; nothing was run",
            tool.config.name
        ));
        return CallReply::Silent;
    }
    let run_id = env.new_run_id();
    env.log(&format!("tool {} run {run_id}: started", tool.config.name));
    let program = tool.program.clone();
    let limits = RunLimits {
        max_steps: tool.config.max_steps,
    };
    let job_inputs = inputs.clone();
    let execution = env
        .blocking(move || program::execute(&program, &job_inputs, limits))
        .await;
    let reply = match execution {
        Ok(execution) => {
            for line in &execution.prints {
                env.log(&format!(
                    "tool {} run {run_id}: print: {line}",
                    tool.config.name
                ));
            }
            if execution.prints_dropped > 0 {
                env.log(&format!(
                    "tool {} run {run_id}: {} more print lines dropped",
                    tool.config.name, execution.prints_dropped
                ));
            }
            outcome_result(env, tool, &run_id, &execution.outcome)
        }
        Err(panic) => {
            env.log(&format!(
                "tool {} run {run_id}: internal error: the program runtime panicked: {panic}",
                tool.config.name
            ));
            internal_result(&run_id)
        }
    };
    env.log(&format!("tool {} run {run_id}: ended", tool.config.name));
    if control.is_cancelled() {
        env.log(&format!(
            "tool {} run {run_id}: the call was cancelled while running; its answer is not sent",
            tool.config.name
        ));
        return CallReply::Silent;
    }
    CallReply::Result(bounded(reply, &run_id))
}

/// The outcome table of seed 000 section 5.
fn outcome_result(env: &Env, tool: &Tool, run_id: &str, outcome: &Outcome) -> Value {
    match outcome {
        Outcome::Done(result) => {
            let text = serde_json::to_string(result).expect("JSON values serialise");
            json!({
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"result": result},
                "isError": false
            })
        }
        Outcome::Failed(failure) if failure.kind == FailureKind::Internal => {
            env.log(&format!(
                "tool {} run {run_id}: internal error: {}",
                tool.config.name, failure.message
            ));
            internal_result(run_id)
        }
        Outcome::Failed(failure) if failure.kind == FailureKind::Capability => {
            error_result(failure.message.clone())
        }
        Outcome::Failed(failure) => {
            error_result(format!("{}: {}", failure.kind.name(), failure.message))
        }
    }
}

fn internal_result(run_id: &str) -> Value {
    error_result(format!(
        "an internal error happened in run {run_id}; the details are in the server's log"
    ))
}

pub fn error_result(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// A result over `RESULT_BYTES_MAX` is not sent; the call says so instead.
fn bounded(result: Value, run_id: &str) -> Value {
    let size = serde_json::to_vec(&result)
        .map(|bytes| bytes.len())
        .unwrap_or(usize::MAX);
    if size <= RESULT_BYTES_MAX {
        return result;
    }
    error_result(format!(
        "the result of run {run_id} is {size} bytes, over the limit of {RESULT_BYTES_MAX} bytes, so it was not sent"
    ))
}
