//! The `tools/call` pipeline (seed 000 section 5), shared by both protocol eras:
//!
//! 1. find the tool (the caller: an unknown name is a protocol error);
//! 2. check the arguments by Warden's own rules (a refusal is a tool result);
//! 3. find an earlier run by the `once` key;
//! 4. take a concurrency slot (busy is answered at once, never queued);
//! 5. reserve in the ledger (over quota is answered, nothing runs);
//! 6. run with a new journal (`runs.rs`: inputs, header, records, end);
//! 7. settle, then answer from the run's end.
//!
//! Steps 3 to 5 happen under the ledger's append lock, so two calls can never both find a
//! key absent, or both fit under a quota, before either's reservation is durable.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::{json, Map, Value};

use crate::answer::{answer, error_result, stopped_result};
use crate::catalog::Tool;
use crate::env::{LocalBoxFuture, Point};
use crate::ledger::{Event, MoneyRecord, OnceLookup, OnceRecord, RunEntry, RunPhase};
use crate::manifest::Grant;
use crate::money::Money;
use crate::runs::{self, sha256_hex, Runs};

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
    /// An era-neutral `CallToolResult` (content, structuredContent, isError), and the run
    /// it answers for, if one was reserved.
    Result(Value, Option<String>),
    /// The call was cancelled: nothing more is sent for it.
    Silent,
}

/// Told the run id when a run starts, so a client that asked for progress hears it.
pub type OnStart<'a> = &'a dyn Fn(&str) -> LocalBoxFuture<'a, ()>;

/// Concurrency slots: runs in progress, server-wide and per tool. Not a queue.
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
        Some(Slot { slots: Rc::clone(self), tool: tool.config.name.clone() })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut per_tool = self.slots.per_tool.borrow_mut();
        let used = per_tool.get_mut(&self.tool).expect("a slot's tool is counted");
        assert!(*used > 0 && self.slots.server.get() > 0, "slot count underflow");
        *used -= 1;
        self.slots.server.set(self.slots.server.get() - 1);
    }
}

/// JSON with object keys sorted at every level: the form keys and hashes are taken over.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(object) => {
                let mut keys: Vec<&String> = object.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&object[k]))).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string(&sorted(value)).expect("JSON values serialise")
}

/// The `once` key and arguments hash of a call, from its normalised inputs.
pub fn once_record(tool: &Tool, inputs: &Map<String, Value>) -> Option<OnceRecord> {
    let once = tool.config.once.as_ref()?;
    let named: Map<String, Value> =
        once.by.iter().map(|name| (name.clone(), inputs.get(name).cloned().unwrap_or(Value::Null))).collect();
    let key = sha256_hex(canonical_json(&json!([tool.config.name, named])).as_bytes());
    let arguments = sha256_hex(canonical_json(&Value::Object(inputs.clone())).as_bytes());
    Some(OnceRecord { key, arguments })
}

/// The most a run of `tool` can spend, per currency: for each money-limited grant, `max`,
/// or `each` times `uses` where there is no `max` (seed 000 section 6).
pub fn worst_case(tool: &Tool) -> Vec<Money> {
    let mut by_currency: BTreeMap<String, i64> = BTreeMap::new();
    for grant in tool.config.grants.values() {
        let Grant::Capability(grant) = grant else {
            continue;
        };
        let limit = match (&grant.max, &grant.each, grant.uses) {
            (Some(max), _, _) => Some(max.clone()),
            (None, Some(each), Some(uses)) => {
                Some(Money { minor: each.minor.saturating_mul(uses as i64), currency: each.currency.clone() })
            }
            _ => None,
        };
        if let Some(limit) = limit {
            *by_currency.entry(limit.currency).or_insert(0) += limit.minor;
        }
    }
    by_currency.into_iter().map(|(currency, minor)| Money { minor, currency }).collect()
}

/// Runs one call of a known tool to its reply.
pub async fn call_tool(
    runs: &Runs,
    slots: &Rc<Slots>,
    tool: &Tool,
    arguments: &Map<String, Value>,
    control: &CallControl,
    on_start: OnStart<'_>,
) -> CallReply {
    let name = &tool.config.name;
    let inputs = match tool.program.check_inputs(arguments) {
        Ok(inputs) => inputs,
        Err(problems) => {
            return CallReply::Result(error_result(format!("invalid arguments:\n- {}", problems.join("\n- "))), None)
        }
    };
    let once = once_record(tool, &inputs);
    let held = runs.ledger.lock().await;
    let now = runs.ledger.stamp();
    if let (Some(once), Some(config)) = (&once, &tool.config.once) {
        // Copy the entry out: the state's borrow must end before any await, or a concurrent
        // append would find the state borrowed.
        let found = match runs.ledger.state().once_lookup(&once.key, config.keep_ms, now) {
            OnceLookup::Found(earlier) => Some(earlier.clone()),
            OnceLookup::None => None,
        };
        if let Some(earlier) = found {
            drop(held);
            let reply = repeated(runs, tool, &earlier, once).await;
            return CallReply::Result(reply, Some(earlier.run));
        }
    }
    let Some(_slot) = slots.take(tool, runs.catalog.manifest.server.max_concurrent_runs) else {
        return CallReply::Result(
            error_result(format!(
                "the server is busy: `{name}` already has its maximum of runs in progress; nothing was run, try again later"
            )),
            None,
        );
    };
    let worst = worst_case(tool);
    if let Some(quota) = &tool.config.quota {
        let admitted =
            runs.ledger.state().quota_admits(name, quota.window_ms, quota.calls, quota.money.as_ref(), &worst, now);
        if let Err(refusal) = admitted {
            return CallReply::Result(error_result(refusal.message), None);
        }
    }
    // The last point where cancellation stops the call: nothing is reserved yet.
    if control.is_cancelled() {
        runs.env.log(&format!("tool {name}: call cancelled before its run started; nothing was reserved or run"));
        return CallReply::Silent;
    }
    let run = runs.env.new_run_id();
    let reserve = Event::Reserve {
        run: run.clone(),
        tool: name.clone(),
        at_ms: now,
        calls: 1,
        money: worst.iter().map(MoneyRecord::from).collect(),
        once,
    };
    if let Err(error) = runs.ledger.append(&held, reserve).await {
        drop(held);
        runs.stop(&error.clone().into());
        return CallReply::Result(
            error_result(format!("the server could not record the call durably ({error}); nothing was run")),
            None,
        );
    }
    // From the reserve on, a repeated `once` call finds this run in progress.
    let running = runs.running(&run);
    drop(held);
    runs.env.reached(Point::Reserved, &run);
    on_start(&run).await;
    let outcome = match runs.start_files(tool, &run, &inputs).await {
        Ok(()) => {
            runs.log_run(name, &run, "started").await;
            runs.execute_to_end(tool, &run, &inputs).await
        }
        Err(fatal) => Err(fatal),
    };
    drop(running);
    let reply = match outcome {
        Ok(runs::RunEnd::Ended(end)) => answer(&run, &end),
        Ok(runs::RunEnd::Stopped { .. }) => stopped_result(&run),
        Err(fatal) => {
            runs.stop(&fatal);
            error_result(format!(
                "run {run} could not be recorded durably and the server is stopping; it will be recovered at the next start"
            ))
        }
    };
    if control.is_cancelled() {
        runs.env.log(&format!("tool {name} run {run}: the call was cancelled while running; its answer is not sent"));
        return CallReply::Silent;
    }
    CallReply::Result(reply, Some(run))
}

/// The answer to a call whose `once` key an earlier run holds (seed 000 section 5).
async fn repeated(runs: &Runs, tool: &Tool, earlier: &RunEntry, once: &OnceRecord) -> Value {
    let run = &earlier.run;
    let same_arguments = earlier.once.as_ref().is_some_and(|o| o.arguments == once.arguments);
    if !same_arguments {
        return error_result(format!(
            "refused: run {run} already did this operation (the same {}) with different arguments; \
             a repeated operation must repeat its arguments",
            tool.config.once.as_ref().map(|o| o.by.join(", ")).unwrap_or_default()
        ));
    }
    match &earlier.phase {
        RunPhase::Open if runs.is_in_progress(run) => error_result(format!(
            "already in progress as run {run}; follow it with warden_run_status instead of calling again"
        )),
        RunPhase::Open => stopped_result(run),
        RunPhase::Settled { .. } => match runs.read_journal(&tool.config.name, run).await {
            Ok(Some(journal)) if journal.end.is_some() => answer(run, journal.end.as_ref().expect("checked")),
            Ok(_) => error_result(format!("run {run} already did this operation; its journal is no longer kept")),
            Err(problem) => {
                runs.env.log(&format!("reading the journal of run {run}: {problem}"));
                error_result(format!(
                    "run {run} already did this operation; its journal cannot be read (see the server's log)"
                ))
            }
        },
        RunPhase::Released { .. } => unreachable!("released runs hold no once key"),
    }
}
