//! `ask(requests)`: a program asks the caller's client for input (its user through
//! elicitation, its model through sampling, its roots), in one round; several calls of `ask`
//! are several rounds. `requests` maps a key of the program's choosing to
//! `{"method": "elicitation/create" | "sampling/createMessage" | "roots/list", "params": {...}}`;
//! `ask` returns a dict from each key the client answered to its answer (an elicitation's
//! `{"action": "accept" | "decline" | "cancel", "content": {...}}`, a sampled message, a list
//! of roots). A key whose kind the client did not declare is not asked, and is absent from
//! the answers: a program reads them with `.get`.
//!
//! Like an action, a round is journaled: the question before the call answers
//! `input_required`, the answers before the program executes again, so a replay returns the
//! journaled answers and a restart loses nothing. It never decides an action in doubt: that
//! is the operator's (seed 000 section 7).

use serde_json::Value;
use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value as StarlarkValue;

use super::capability::refused;
use crate::broker::{Broker, Stop};

/// The methods a program may ask a client for.
pub const INPUT_METHODS: [&str; 3] = ["elicitation/create", "sampling/createMessage", "roots/list"];
/// The client capabilities that answer them.
pub const INPUT_KINDS: [&str; 3] = ["elicitation", "sampling", "roots"];
/// The most requests one round holds.
pub const ASK_REQUESTS_MAX: usize = 8;
/// The longest key of a request.
pub const ASK_KEY_BYTES_MAX: usize = 64;
/// The most bytes one round's requests take, as JSON.
pub const ASK_BYTES_MAX: usize = 64 * 1024;
/// The most rounds one run may ask.
pub const ASK_ROUNDS_MAX: usize = 16;

/// The client capability that answers `method` (`elicitation`, `sampling`, `roots`).
pub fn capability_of(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Checks one round's requests as a program gave them; the problem, in the program's terms.
pub fn check_requests(requests: &Value) -> Result<(), String> {
    // What the journal's record can hold (its writer asserts it; `VALUE_DEPTH_MAX`).
    let depth = crate::base::json::depth(requests);
    if depth > crate::limits::VALUE_DEPTH_MAX {
        return Err(format!(
            "ask(): the requests nest {depth} levels deep; the limit is {}",
            crate::limits::VALUE_DEPTH_MAX
        ));
    }
    let Value::Object(requests) = requests else {
        return Err("ask() takes a dict of requests, {key: {\"method\": ..., \"params\": {...}}}".to_string());
    };
    if requests.is_empty() || requests.len() > ASK_REQUESTS_MAX {
        return Err(format!("ask() takes 1 to {ASK_REQUESTS_MAX} requests, not {}", requests.len()));
    }
    for (key, request) in requests {
        let key_ok = !key.is_empty()
            && key.len() <= ASK_KEY_BYTES_MAX
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if !key_ok {
            return Err(format!(
                "ask(): key `{key}` must be 1 to {ASK_KEY_BYTES_MAX} letters, digits, `_`, `-` or `.`"
            ));
        }
        let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
        if !INPUT_METHODS.contains(&method) {
            return Err(format!("ask(): request `{key}` needs a method among {}", INPUT_METHODS.join(", ")));
        }
        if !request.get("params").is_some_and(Value::is_object) {
            return Err(format!("ask(): request `{key}` needs `params`, a dict"));
        }
        if request.as_object().is_some_and(|r| r.keys().any(|k| k != "method" && k != "params")) {
            return Err(format!("ask(): request `{key}` holds only `method` and `params`"));
        }
        let params = &request["params"];
        let shaped = match method {
            "elicitation/create" => params["message"].is_string() && params["requestedSchema"]["type"] == "object",
            "sampling/createMessage" => params["messages"].is_array() && params["maxTokens"].is_u64(),
            _ => true,
        };
        if !shaped {
            return Err(format!(
                "ask(): request `{key}`'s params lack what {method} needs (elicitation: `message` and an object \
                 `requestedSchema`; sampling: `messages` and `maxTokens`)"
            ));
        }
    }

    let bytes = serde_json::to_vec(requests).map_or(usize::MAX, |b| b.len());
    if bytes > ASK_BYTES_MAX {
        return Err(format!("ask(): the requests take {bytes} bytes; the limit is {ASK_BYTES_MAX}"));
    }
    Ok(())
}

/// Checks one answer by the shape its method's result has; the problem, in the client's terms.
pub fn check_answer(method: &str, answer: &Value) -> Result<(), String> {
    let object = answer.as_object().ok_or("an input response must be an object")?;
    match method {
        "elicitation/create" => {
            match object.get("action").and_then(Value::as_str) {
                Some("accept" | "decline" | "cancel") => {}
                _ => return Err("an elicitation's response needs `action`: accept, decline or cancel".to_string()),
            }
            if object.get("content").is_some_and(|content| !content.is_object() && !content.is_null()) {
                return Err("an elicitation's `content` must be an object".to_string());
            }
        }
        "sampling/createMessage" => {
            if !object.get("role").is_some_and(Value::is_string) || !object.contains_key("content") {
                return Err("a sampling response needs `role` and `content`".to_string());
            }
        }
        _ => {
            if !object.get("roots").is_some_and(Value::is_array) {
                return Err("a roots/list response needs `roots`, a list".to_string());
            }
        }
    }
    Ok(())
}

#[starlark_module]
pub fn ask_globals(builder: &mut GlobalsBuilder) {
    /// Asks the caller's client for input; returns a dict of the answers by key (see the
    /// module's documentation).
    fn ask<'v>(
        #[starlark(require = pos)] requests: StarlarkValue<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue<'v>> {
        let text = requests.to_json().map_err(|e| refused(format!("ask(): the requests are not JSON: {e}")))?;
        let requests: Value = serde_json::from_str(&text).map_err(|e| refused(format!("ask(): {e}")))?;
        check_requests(&requests).map_err(refused)?;
        let broker = eval
            .extra
            .and_then(|extra| extra.downcast_ref::<Broker>())
            .ok_or_else(|| refused("ask() is only available to a tool's run".to_string()))?;
        let answers = broker.ask(requests).map_err(starlark::Error::new_other)?;
        Ok(eval.heap().alloc(answers))
    }
}

impl Broker {
    /// The journaled answers of the next round, or the stop that asks it.
    pub fn ask(&self, requests: Value) -> Result<Value, Stop> {
        let round = {
            let mut next = self.next_round.borrow_mut();
            let round = *next;
            *next += 1;
            round
        };
        if round >= ASK_ROUNDS_MAX {
            *self.refused.borrow_mut() =
                Some(crate::broker::Refusal::Capability(format!("a run may ask at most {ASK_ROUNDS_MAX} rounds")));
            return Err(Stop::Refused);
        }
        if let Some(asked) = self.asked.get(round) {
            // The journal holds the program's requests as it asked them (before any was left
            // out for a client that cannot answer it).
            if asked.requests != requests {
                *self.mismatch.borrow_mut() = Some(format!(
                    "input round {round} differs from the one journaled: the program did not replay deterministically"
                ));
                return Err(Stop::Mismatch);
            }
            if let Some(answers) = &asked.answers {
                return Ok(answers.clone());
            }
        }
        *self.asking.borrow_mut() = Some(requests);
        Err(Stop::Suspend)
    }
}
