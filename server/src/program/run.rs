//! One execution of a program's entry `def`: a pure function of (inputs, journal so far).
//!
//! Execution is synchronous and CPU-bound; the caller runs it off the reactor through
//! `Env::blocking`. Limits are deterministic (ticks), so a replay makes the same decision.

use std::cell::RefCell;

use serde_json::{Map, Value};
use starlark::environment::Module;
use starlark::eval::Evaluator;
use starlark::values::dict::AllocDict;
use starlark::values::list::AllocList;
use starlark::values::{Heap, Value as StarlarkValue};
use starlark::PrintHandler;

use super::capability::Capability;
use super::starlark_money::StarlarkMoney;
use super::types::ArgType;
use super::Program;
use crate::broker::{Action, Broker, Refusal};

/// Ticks allowed while loading a file or evaluating a default (top-level code only).
pub const LOAD_TICKS_MAX: u64 = 1_000_000;
/// The deepest Starlark call stack.
pub const CALLSTACK_MAX: usize = 50;
/// Best-effort heap bound of one execution (checked by Starlark every 1000 ticks).
pub const HEAP_BYTES_MAX: usize = 256 * 1024 * 1024;
/// The most `print` lines one execution keeps; later ones are counted, not kept.
pub const PRINTS_MAX: usize = 1000;
/// The longest `print` line kept.
pub const PRINT_CHARS_MAX: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLimits {
    pub max_steps: u64,
}

/// Why a run failed: seed 000 section 5's kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FailureKind {
    Validation,
    Action,
    Value,
    Provider,
    Budget,
    Deadline,
    Capability,
    Internal,
    /// Its client cancelled the task between actions (`tasks/cancel`).
    Cancelled,
}

impl FailureKind {
    pub const ALL: [FailureKind; 9] = [
        FailureKind::Validation,
        FailureKind::Action,
        FailureKind::Value,
        FailureKind::Provider,
        FailureKind::Budget,
        FailureKind::Deadline,
        FailureKind::Capability,
        FailureKind::Internal,
        FailureKind::Cancelled,
    ];

    pub fn parse(name: &str) -> Option<FailureKind> {
        FailureKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Validation => "validation",
            FailureKind::Action => "action",
            FailureKind::Value => "value",
            FailureKind::Provider => "provider",
            FailureKind::Budget => "budget",
            FailureKind::Deadline => "deadline",
            FailureKind::Capability => "capability",
            FailureKind::Internal => "internal",
            FailureKind::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    Done(Value),
    Failed(Failure),
    /// The program asked for an action the journal has not completed: perform it, then
    /// execute again.
    Suspended(Action),
    /// The program asked its client for input (`ask`) the journal has not answered: these
    /// requests, by key.
    Asking(Value),
}

/// What one execution produced.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Execution {
    pub outcome: Outcome,
    pub prints: Vec<String>,
    pub prints_dropped: usize,
    pub ticks: u64,
    /// What the program reported with `progress(...)`, in order.
    #[serde(default)]
    pub progress: Vec<crate::broker::ProgressReport>,
}

#[derive(Default)]
struct Prints {
    kept: RefCell<Vec<String>>,
    dropped: RefCell<usize>,
}

impl PrintHandler for Prints {
    fn println(&self, text: &str) -> starlark::Result<()> {
        let mut kept = self.kept.borrow_mut();
        if kept.len() < PRINTS_MAX {
            kept.push(text.chars().take(PRINT_CHARS_MAX).collect());
        } else {
            *self.dropped.borrow_mut() += 1;
        }
        Ok(())
    }
}

/// Runs the entry of a program without capabilities (tests, and tools with no grants).
pub fn execute(program: &Program, inputs: &Map<String, Value>, limits: RunLimits) -> Execution {
    let broker = Broker::new("", &Default::default(), Vec::new());
    execute_with(program, inputs, limits, &broker, &[])
}

/// Runs the entry with checked, normalised inputs; `capabilities` are (parameter, kind) of
/// the tool's grants, handed to the program through `broker`.
pub fn execute_with(
    program: &Program,
    inputs: &Map<String, Value>,
    limits: RunLimits,
    broker: &Broker,
    capabilities: &[(String, crate::broker::Kind)],
) -> Execution {
    let prints = Prints::default();
    let (outcome, ticks) = Module::with_temp_heap(|module| {
        let heap = module.heap();
        let mut eval = Evaluator::new(&module);
        eval.set_print_handler(&prints);
        eval.extra = Some(broker);
        let configured = eval
            .set_max_tick_count(limits.max_steps)
            .and_then(|_| eval.set_max_callstack_size(CALLSTACK_MAX))
            .and_then(|_| eval.set_max_heap_size(HEAP_BYTES_MAX));
        if let Err(e) = configured {
            return (internal(format!("configuring the evaluator: {e}")), 0);
        }
        let function = match program.module().get(&program.entry) {
            Ok(function) => heap.access_owned_frozen_value(&function),
            Err(e) => return (internal(format!("entry not found: {e}")), 0),
        };
        let mut named = Vec::with_capacity(program.inputs.len());
        for input in &program.inputs {
            let value = inputs.get(&input.name).cloned().unwrap_or(Value::Null);
            named.push((input.name.as_str(), to_starlark(&value, &input.ty, heap)));
        }
        for name in &program.capabilities {
            let Some((_, kind)) = capabilities.iter().find(|(param, _)| param == name) else {
                return (internal(format!("capability `{name}` has no grant")), 0);
            };
            named.push((
                name.as_str(),
                heap.alloc(Capability { name: name.clone(), kind: kind.name().to_string(), narrowed: None }),
            ));
        }
        let result = eval.eval_function(function, &[], &named);
        let ticks = eval.get_total_tick_count();
        let stopped = broker_stop(broker);
        let outcome = match result {
            Err(_) if stopped.is_some() => stopped.expect("checked"),
            Ok(value) => result_json(value, program.returns.as_ref()),
            Err(_) if ticks >= limits.max_steps => Outcome::Failed(Failure {
                kind: FailureKind::Budget,
                message: format!("the run exceeded limits.max_steps ({} steps)", limits.max_steps),
            }),
            Err(error) => Outcome::Failed(Failure { kind: FailureKind::Value, message: concise(&error.to_string()) }),
        };
        (outcome, ticks)
    });
    Execution {
        outcome,
        prints: prints.kept.into_inner(),
        prints_dropped: prints.dropped.into_inner(),
        ticks,
        progress: broker.progress.take(),
    }
}

/// Starlark's rendering of an error (traceback, snippet, caret) cut to what a model needs:
/// the error line and its location.
fn concise(rendered: &str) -> String {
    let mut lines = rendered.lines();
    let Some(error) = lines.by_ref().find_map(|line| line.strip_prefix("error: ")) else {
        return rendered.trim().to_string();
    };
    match lines.find_map(|line| line.trim_start().strip_prefix("--> ")) {
        Some(location) => format!("{error} (at {location})"),
        None => error.to_string(),
    }
}

/// What the broker stopped the program for, if it did.
fn broker_stop(broker: &Broker) -> Option<Outcome> {
    if let Some(action) = broker.suspended.borrow().clone() {
        return Some(Outcome::Suspended(action));
    }
    if let Some(requests) = broker.asking.borrow().clone() {
        return Some(Outcome::Asking(requests));
    }
    if let Some(refusal) = broker.refused.borrow().clone() {
        return Some(Outcome::Failed(match refusal {
            Refusal::Capability(message) => Failure { kind: FailureKind::Capability, message },
            Refusal::Deadline(message) => Failure { kind: FailureKind::Deadline, message },
        }));
    }
    broker.mismatch.borrow().clone().map(internal)
}

fn internal(message: String) -> Outcome {
    Outcome::Failed(Failure { kind: FailureKind::Internal, message })
}

fn result_json(value: StarlarkValue, returns: Option<&ArgType>) -> Outcome {
    let json = match value.to_json() {
        Ok(text) => serde_json::from_str::<Value>(&text),
        Err(e) => {
            return Outcome::Failed(Failure {
                kind: FailureKind::Validation,
                message: format!("the result has no JSON form: {e}"),
            })
        }
    };
    let json = match json {
        Ok(json) => json,
        Err(e) => return internal(format!("the result's JSON could not be read back: {e}")),
    };
    let deep = crate::base::json::depth(&json);
    if deep > crate::limits::VALUE_DEPTH_MAX {
        return Outcome::Failed(Failure {
            kind: FailureKind::Validation,
            message: format!("the result nests {deep} levels deep; the limit is {}", crate::limits::VALUE_DEPTH_MAX),
        });
    }
    let Some(returns) = returns else {
        return Outcome::Done(json);
    };
    let mut problems = Vec::new();
    let normalised = returns.check(&json, "result", &mut problems);
    if problems.is_empty() {
        Outcome::Done(normalised)
    } else {
        Outcome::Failed(Failure {
            kind: FailureKind::Validation,
            message: format!(
                "the result does not match the return annotation: {}",
                problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
            ),
        })
    }
}

/// Converts checked JSON to a Starlark value, guided by the declared type (so money
/// arrives as `money`, and a float input given as `2` arrives as `2.0`).
fn to_starlark<'v>(value: &Value, ty: &ArgType, heap: Heap<'v>) -> StarlarkValue<'v> {
    match (ty, value) {
        (ArgType::Optional(inner), value) if !value.is_null() => to_starlark(value, inner, heap),
        (ArgType::Money, Value::Object(object)) => heap.alloc(StarlarkMoney {
            amount: object.get("amount").and_then(Value::as_str).unwrap_or_default().to_string(),
            currency: object.get("currency").and_then(Value::as_str).unwrap_or_default().to_string(),
        }),
        (ArgType::Float, Value::Number(n)) => heap.alloc(n.as_f64().unwrap_or(0.0)),
        (ArgType::List(item), Value::Array(items)) => {
            heap.alloc(AllocList(items.iter().map(|v| to_starlark(v, item, heap)).collect::<Vec<_>>()))
        }
        (ArgType::Dict(item), Value::Object(object)) => heap.alloc(AllocDict(
            object.iter().map(|(k, v)| (heap.alloc(k.as_str()), to_starlark(v, item, heap))).collect::<Vec<_>>(),
        )),
        _ => heap.alloc(value.clone()),
    }
}
