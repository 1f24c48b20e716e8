//! Input for a run from a 2025-11-25 client over stdio: the round's requests
//! (`elicitation/create`, `sampling/createMessage`, `roots/list`) sent as server requests on
//! the session, their responses gathered, and the run continued exactly as a 2026-07-28
//! client's retry continues it (`retry.rs`, with the state the server sealed). Only kinds the
//! client declared at `initialize` are asked, and only on a connection that can carry server
//! requests: stdio, or an HTTP exchange of a session whose answer is a live stream (the
//! client's responses arrive as POSTs of their own, routed here by the session).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use serde_json::{json, Map, Value};

use super::jsonrpc::RequestId;
use super::{Connection, PendingCall};
use crate::base::sync::{select, Either, Signal};
use crate::call::{CallControl, CallReply, Retry};
use crate::run::input::Claims;

/// A response awaited from the client.
#[derive(Default)]
pub(crate) struct Awaited {
    response: RefCell<Option<Map<String, Value>>>,
    arrived: Signal,
}

/// The kinds a 2025-11-25 client declares at `initialize` that the server can ask.
pub(crate) fn declared_kinds(capabilities: Option<&Value>) -> Vec<String> {
    ["elicitation", "sampling", "roots"]
        .into_iter()
        .filter(|kind| capabilities.and_then(|c| c.get(*kind)).is_some_and(Value::is_object))
        .map(str::to_string)
        .collect()
}

/// The input kinds a 2025-11-25 session's client declared, kept between its exchanges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kinds {
    elicitation: bool,
    sampling: bool,
    roots: bool,
}

impl Kinds {
    pub(crate) fn of(names: &[String]) -> Kinds {
        let has = |kind: &str| names.iter().any(|name| name == kind);
        Kinds { elicitation: has("elicitation"), sampling: has("sampling"), roots: has("roots") }
    }

    pub(crate) fn names(self) -> Vec<String> {
        [("elicitation", self.elicitation), ("sampling", self.sampling), ("roots", self.roots)]
            .into_iter()
            .filter(|(_, declared)| *declared)
            .map(|(kind, _)| kind.to_string())
            .collect()
    }
}

impl Connection {
    /// Whether a request of this connection's to the client waits for the response `id`.
    pub(crate) fn awaits(&self, id: &Value) -> bool {
        self.asked_client.borrow().contains_key(&id.to_string())
    }

    /// A response from the client: handed to the request it answers, if one waits for it.
    pub(crate) fn response(&self, id: &Value, body: Map<String, Value>) {
        match self.asked_client.borrow_mut().remove(&id.to_string()) {
            Some(awaited) => {
                *awaited.response.borrow_mut() = Some(body);
                awaited.arrived.set();
            }
            None => self.env.log("dropped a response from the client to no request of this server's"),
        }
    }

    /// Asks the client each request of `result` (an `input_required` result: `inputRequests`
    /// and `requestState`), then continues the run with the answers; again while it asks,
    /// up to the rounds a run may ask.
    pub(crate) async fn ask_client(
        self: &Rc<Self>,
        call: &PendingCall,
        mut result: Value,
        control: &CallControl,
        listening: (Option<Rc<dyn crate::run::notice::Listener>>, Option<&super::listener::Outbox>),
    ) -> CallReply {
        let (listener, outbox) = listening;
        let tool = self.catalog.callable(&call.tool).expect("routing checked the tool exists");
        for _ in 0..crate::program::ask::ASK_ROUNDS_MAX {
            // The call's notifications go out before its requests, as before its answer: a
            // call holds one write at a time on a client that reads slowly.
            if let Some(outbox) = outbox {
                outbox.drained().await;
            }
            let answers = match self.gather(&result).await {
                Gathered::Answers(answers) => answers,
                Gathered::Unanswered => {
                    let text =
                        "the client did not answer the run's request for input; it waits until its round expires";
                    return CallReply::Result(crate::call::answer::error_result(text.to_string()), None);
                }
                Gathered::Stopping => {
                    let text = "the server is stopping before the client answered the run's request for input; the \
                                run waits for its input until its round expires (warden_run_status tells how it went)";
                    return CallReply::Result(crate::call::answer::error_result(text.to_string()), None);
                }
                Gathered::RoundEnded(run) => {
                    // Worded as the refusal of answers a run cannot take, which it is: it
                    // depends on nothing durable (another call's retry took the round).
                    let text = format!(
                        "the run's request for input could not be answered: run {run} no longer waits for it \
                         (another call answered it with its requestState, or its round ended); \
                         warden_run_status tells how it went"
                    );
                    return CallReply::Result(crate::call::answer::error_result(text), None);
                }
            };
            let retry = Retry { request_state: result["requestState"].clone(), input_responses: Some(answers) };
            let caller = crate::call::Caller {
                principal: self.principal.as_ref(),
                input_kinds: &call.input.kinds,
                retry: Some(&retry),
                traceparent: call.traceparent.as_deref(),
            };
            let listener = listener.clone();
            let slots = &self.slots;
            match crate::call::call_tool(&self.runs, slots, tool, &call.arguments, control, listener, caller).await {
                CallReply::InputRequired(next, _) => result = next,
                // The state is the server's, not the client's: a round that expired before the
                // answers came, or answers the run cannot take, are the call's outcome, not an
                // invalid request (the message says which).
                CallReply::Invalid(message) => {
                    let text = format!("the run's request for input could not be answered: {message}");
                    return CallReply::Result(crate::call::answer::error_result(text), None);
                }
                other => return other,
            }
        }
        let text = "the run asked its client for input more rounds than a run may".to_string();
        CallReply::Result(crate::call::answer::error_result(text), None)
    }

    /// Sends each request and waits for every response: within a round's wait, while the
    /// client is there, and while the run still awaits the round (another call may take it
    /// with the run's `requestState`). An error response answers as a decline would (no
    /// content).
    async fn gather(&self, result: &Value) -> Gathered {
        let Some(requests) = result["inputRequests"].as_object() else { return Gathered::Unanswered };
        let round = result["requestState"].as_str().and_then(|state| self.runs.inputs.open(state).ok());
        let mut waiting = Vec::new();
        for (key, request) in requests {
            let number = self.next_request.get();
            self.next_request.set(number + 1);
            let id: RequestId = json!(format!("{}{number}", self.request_prefix.borrow()));
            let awaited = Rc::new(Awaited::default());
            self.asked_client.borrow_mut().insert(id.to_string(), Rc::clone(&awaited));
            let method = request["method"].clone();
            self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": request["params"]})).await;
            waiting.push((key.clone(), id, awaited, method));
        }
        let gathered = self.responses(&waiting, round.as_ref()).await;
        let client_there = !self.client_gone.is_set() && !self.reading_ended.is_set();
        for (_, id, _, _) in &waiting {
            let unanswered = self.asked_client.borrow_mut().remove(&id.to_string()).is_some();
            // A request left unanswered is withdrawn, so the client can close what it shows
            // its user (an elicitation's dialog) rather than ask for an answer nobody reads.
            if unanswered && client_there {
                let reason = match gathered {
                    Gathered::RoundEnded(_) => "the run no longer waits for this input",
                    _ => "the run's request for input was not answered in time",
                };
                let params = json!({"requestId": id, "reason": reason});
                self.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})).await;
            }
        }
        gathered
    }

    /// The responses to `waiting`, in order, or why they stopped coming.
    async fn responses(&self, waiting: &[(String, RequestId, Rc<Awaited>, Value)], round: Option<&Claims>) -> Gathered {
        let mut answers = Map::new();
        let ends_at = self.env.clock.monotonic_ms().saturating_add(crate::limits::INPUT_WAIT_MS);
        for (key, _, awaited, method) in waiting {
            let left = ends_at.saturating_sub(self.env.clock.monotonic_ms());
            let ended: Pin<Box<dyn Future<Output = ()> + '_>> = match round {
                Some(claims) => Box::pin(self.runs.inputs.round_ended(&claims.run, claims.round)),
                None => Box::pin(std::future::pending()),
            };
            let gone = Box::pin(select(self.client_gone.wait(), self.reading_ended.wait()));
            let arrived = Box::pin(select(awaited.arrived.wait(), Box::pin(select(gone, ended))));
            // The drain does not wait for a person's answer: the run waits for it durably.
            let out_of_time = Box::pin(select(self.env.clock.sleep(left), self.runs.stopping.wait()));
            let mut body = match select(arrived, out_of_time).await {
                Either::Left(Either::Left(())) => match awaited.response.borrow_mut().take() {
                    Some(body) => body,
                    None => return Gathered::Unanswered,
                },
                Either::Left(Either::Right(Either::Right(()))) => {
                    return Gathered::RoundEnded(round.map(|claims| claims.run.clone()).unwrap_or_default())
                }
                Either::Right(Either::Right(())) => return Gathered::Stopping,
                Either::Left(Either::Right(Either::Left(_))) | Either::Right(Either::Left(())) => {
                    return Gathered::Unanswered
                }
            };
            let answer = match body.remove("result") {
                Some(result) => result,
                None if method == "elicitation/create" => json!({"action": "decline"}),
                None => continue,
            };
            answers.insert(key.clone(), answer);
        }
        Gathered::Answers(Value::Object(answers))
    }
}

/// How asking the client for a round's answers ended.
enum Gathered {
    Answers(Value),
    /// The client left a request unanswered within the wait, or went away.
    Unanswered,
    /// The run no longer awaits the round (its id): another call took it, or it expired.
    RoundEnded(String),
    /// The server began to drain: the run waits for its input, and the call is answered.
    Stopping,
}
