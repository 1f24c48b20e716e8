//! A run's lifecycle from its journal's header to its settle (steps 4 to 6 of seed 000
//! section 7) as one pure state machine: `step(state, event)` returns the next state and the
//! commands to carry out, in order. The driver (`runs.rs`) carries them out through `Env`
//! and the run store and feeds back what the last one produced; the machine itself does no
//! I/O, so every cell of its table is tested without an executor.
//!
//! | state       | event                 | next        | commands                                      |
//! |-------------|-----------------------|-------------|-----------------------------------------------|
//! | Ready       | Start                 | Ready       | Execute                                       |
//! | Ready       | Resume                | Ready       | Journal(Resumed), Execute                     |
//! | Ready       | Executed(Act a)       | Begun(a)    | Journal(prints), Journal(Begin a), Perform a  |
//! | Ready       | Executed(End e)       | Settling(e) | Journal(prints), Journal(End e), Settle e     |
//! | Begun(a)    | Performed(Done r)     | Ready       | Journal(Done r), Execute                      |
//! | Begun(a)    | Performed(InDoubt), a SQL write | LookingUp | Log, LookUp a                       |
//! | Begun(a)    | Performed(InDoubt)    | Waiting     | Wait(a), Notify                               |
//! | InDoubt(a)  | Resume, a SQLite write| LookingUp   | Journal(Resumed), LookUp a                    |
//! | InDoubt(a)  | Resume, safe to resend| Begun(a)    | Journal(Resumed), Log, Perform a              |
//! | InDoubt(a)  | Resume, otherwise     | Waiting     | Journal(Resumed), Wait(a), Notify             |
//! | LookingUp(a)| LookedUp(committed)   | Ready       | Log, Journal(Done recovered), Execute         |
//! | LookingUp(a)| LookedUp(not)         | Begun(a)    | Log, Perform a                                |
//! | LookingUp(a)| LookUpFailed          | Waiting     | Wait(a), Notify                               |
//! | Settling(e) | Resume                | Settling(e) | Settle e                                      |
//! | Settling(e) | Settled               | Ended(e)    |                                               |
//! | Halted      | Resume                | Waiting     | Wait (halted), Notify                         |
//! | Ready       | Executed(Ask, sent)   | Awaiting    | Journal(prints), Journal(Asked)               |
//! | Ready       | Executed(Ask, none)   | Ready       | Journal(prints), Journal(Asked), Journal(Answered {}), Execute |
//! | Awaiting    | Resume                | Awaiting    |                                               |
//! | Awaiting(nothing sent) | Resume     | Ready       | Journal(Answered {}), Execute                 |
//! | Awaiting    | Answered(answers)     | Ready       | Journal(Answered), Execute                    |
//! | Awaiting    | Expired(e)            | Settling(e) | Journal(End e), Settle e                      |
//!
//! `Start` is a fresh run's first event; `Resume` a run's first event after a restart. Every
//! other cell is refused as a bug. A run's state is rebuilt from its journal
//! (`State::from_journal`): an end means Settling; a run that restarts twice in a row found
//! unfinished and got no further (it may be what crashes the server) is Halted: it is not
//! resumed a third time but waits for an operator (`warden resolve --resume`), unless its
//! action in doubt waits for a person's verdict (nothing is executed or sent then: no crash
//! loop, so it stays InDoubt and keeps its happened / did-not-happen question); an action
//! begun and not done means InDoubt; anything else Ready. The only way out of InDoubt is through its resolution (sent
//! again when safe, looked up, or waiting for an operator), and Execute is only ever issued
//! from Ready, so the program (and with it the deadline) never runs while an action is in
//! doubt: a deadline never cuts an action, it only refuses the next new one.
//!
//! A run that asked its client for input (`ask`) is Awaiting until the answers come with the
//! client's retry, or the wait expires (its end, settled as `deadline`). When no key was sent
//! (the client declared none of the kinds, or a resumed run has no client), the round is
//! answered with nothing at once. Awaiting writes no `Resumed` record at a restart: waiting
//! for a person is not a crash of the run.

use serde_json::{json, Value};

use crate::broker::{resend_is_safe, Action, Method, Performed};
use crate::store::journal::{EndRecord, Journal, JournalRecord, OpState};

#[derive(Clone, Debug, PartialEq)]
pub enum State {
    /// No action in doubt, no end: the program executes against the journal next.
    Ready,
    /// The action's begin record is (or is about to be) durable: it is being sent.
    Begun(Action),
    /// The journal holds this action as begun and not done, from before a restart.
    InDoubt(Action),
    /// A `db.sqlite` write in doubt, being looked up in `warden_actions`.
    LookingUp(Action),
    /// The end is (or is about to be) durable: the ledger's settle is next.
    Settling(EndRecord),
    /// Settled. Terminal.
    Ended(EndRecord),
    /// Stopped in doubt at action `op`: waiting for an operator. Terminal in this process.
    Waiting { op: u64 },
    /// Crashed the server twice without progress; not resumed again automatically. `op` is
    /// the action in doubt, or the next one.
    Halted { op: u64, action: Option<Action> },
    /// Round `round` of input is asked (durable) and not answered: terminal in this call.
    /// `nothing_sent`: the round asked nobody (its answers, none, were not yet journaled
    /// when the server stopped): a resume answers it with nothing.
    Awaiting { round: u64, nothing_sent: bool },
}

/// A run whose attempts crashed the server this many times in a row, without progress, is
/// not resumed again automatically: its first attempt's crash, then each `Resumed` record
/// since it last made progress.
pub const CRASHES_BEFORE_HALT: u32 = 2;
// A model call's token reservation counts a send per start before its run is halted.
const _: () = assert!(CRASHES_BEFORE_HALT as u64 == crate::manifest::MODEL_SENDS_MAX);

/// What one execution of the program asks for next.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    Act(Action),
    End(EndRecord),
    /// Input from the client (`ask`): round `round`'s requests as the program gave them, and
    /// the keys of those sent.
    Ask {
        round: u64,
        requests: Value,
        sent: Vec<String>,
        at_ms: u64,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A fresh run starts.
    Start,
    /// A run found unfinished at start is taken up again, at `at_ms` (wall clock).
    Resume {
        at_ms: u64,
    },
    /// One execution ended: its new prints (index, text) and what it asks for next.
    Executed {
        prints: Vec<(u64, String)>,
        next: Next,
    },
    Performed(Performed),
    LookedUp {
        committed: bool,
    },
    /// `warden_actions` could not be read (the database is down): nobody can tell yet.
    LookUpFailed(String),
    Settled,
    /// The client's answers to the awaited round (the keys sent), at `at_ms`.
    Answered {
        answers: Value,
        at_ms: u64,
    },
    /// Nobody answered the awaited round in time: the run ends so.
    Expired(EndRecord),
    /// An operator cancelled the run (`warden runs cancel`) while nothing of it was in doubt:
    /// between actions, halted before its next action, or awaiting its client's input. It
    /// ends so, nothing further sent.
    Cancelled(EndRecord),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Execute the program against the journal (yields `Executed`).
    Execute,
    /// Append a record to the run's journal, durably.
    Journal(JournalRecord),
    /// Send the action (yields `Performed`). `resend`: it was begun before a crash and may
    /// have happened, so failing before it is sent again leaves it in doubt, never "not sent".
    Perform { action: Action, resend: bool },
    /// Look a `db.*` write up in `warden_actions` (yields `LookedUp` or `LookUpFailed`).
    LookUp(Action),
    /// Write the waiting record, durably (step 5). `action` is the one in doubt, if any;
    /// `halted` says the run waits for `warden resolve --resume`, not for an action's verdict.
    Wait { op: u64, action: Option<Action>, reason: String, halted: bool },
    /// Tell the operator (the notify command, retried in the background).
    Notify,
    /// Append the settle event; remove the kept arguments and any waiting record (yields `Settled`).
    Settle(EndRecord),
    /// A line for the run's log about action `op`.
    Log { op: u64, line: String },
}

/// A (state, event) cell the table does not have: a bug in the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub state: &'static str,
    pub event: &'static str,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the run's state machine has no transition for event {} in state {}", self.event, self.state)
    }
}

impl State {
    /// The state a journal read back leaves a run in.
    pub fn from_journal(journal: &Journal) -> Result<State, String> {
        if let Some(end) = &journal.end {
            return Ok(State::Settling(end.clone()));
        }
        if let Some(round) = journal.awaiting_round() {
            let nothing_sent = journal.rounds[round as usize].sent.is_empty();
            return Ok(State::Awaiting { round, nothing_sent });
        }
        let in_doubt = match journal.begun_op().and_then(|op| journal.ops.get(&op)) {
            Some(OpState::Begun(recorded)) => Some(
                serde_json::from_value::<Action>(recorded.clone())
                    .map_err(|e| format!("the begin record of an action in doubt does not parse: {e}"))?,
            ),
            _ => None,
        };
        // A run whose action in doubt waits for a person's verdict executes nothing and sends
        // nothing at a start: it is not a crash loop, and stays waiting for its verdict however
        // often the server restarts. (A SQL write is looked up and may be sent again at a
        // start: it keeps the halt.)
        let waits_for_a_verdict =
            in_doubt.as_ref().is_some_and(|action| !resend_is_safe(action) && !is_sql_write(action));
        if journal.resumes_without_progress + 1 >= CRASHES_BEFORE_HALT && !waits_for_a_verdict {
            let op = in_doubt.as_ref().map(|action| action.op).unwrap_or(journal.ops.len() as u64);
            return Ok(State::Halted { op, action: in_doubt });
        }
        Ok(in_doubt.map(State::InDoubt).unwrap_or(State::Ready))
    }

    pub fn name(&self) -> &'static str {
        match self {
            State::Ready => "Ready",
            State::Begun(_) => "Begun",
            State::InDoubt(_) => "InDoubt",
            State::LookingUp(_) => "LookingUp",
            State::Settling(_) => "Settling",
            State::Ended(_) => "Ended",
            State::Waiting { .. } => "Waiting",
            State::Halted { .. } => "Halted",
            State::Awaiting { .. } => "Awaiting",
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, State::Ended(_) | State::Waiting { .. } | State::Awaiting { .. })
    }
}

impl Event {
    pub fn name(&self) -> &'static str {
        match self {
            Event::Start => "Start",
            Event::Resume { .. } => "Resume",
            Event::Executed { .. } => "Executed",
            Event::Performed(_) => "Performed",
            Event::LookedUp { .. } => "LookedUp",
            Event::LookUpFailed(_) => "LookUpFailed",
            Event::Settled => "Settled",
            Event::Answered { .. } => "Answered",
            Event::Expired(_) => "Expired",
            Event::Cancelled(_) => "Cancelled",
        }
    }
}

/// A `db.*` write: after a crash it is looked up, never guessed.
pub fn is_sql_write(action: &Action) -> bool {
    action.kind.is_database() && action.method == Method::Execute
}

/// The table. Long because it is the table: one arm per cell of the module's table, in its
/// order, so the two can be read side by side.
pub fn step(state: State, event: Event) -> Result<(State, Vec<Command>), Invalid> {
    let invalid = Invalid { state: state.name(), event: event.name() };
    Ok(match (state, event) {
        (State::Ready, Event::Start) => (State::Ready, vec![Command::Execute]),
        (State::Ready, Event::Resume { at_ms }) => (State::Ready, vec![resumed(at_ms), Command::Execute]),
        (State::Ready, Event::Executed { prints, next }) => {
            let mut commands: Vec<Command> = prints
                .into_iter()
                .map(|(index, text)| Command::Journal(JournalRecord::Print { index, text }))
                .collect();
            match next {
                Next::Act(action) => {
                    let recorded = serde_json::to_value(&action).expect("actions serialise");
                    commands.push(Command::Journal(JournalRecord::Begin {
                        op: action.op,
                        action: recorded,
                        at_ms: None,
                    }));
                    commands.push(Command::Perform { action: action.clone(), resend: false });
                    (State::Begun(action), commands)
                }
                Next::End(end) => {
                    commands.push(Command::Journal(JournalRecord::End(end.clone())));
                    commands.push(Command::Settle(end.clone()));
                    (State::Settling(end), commands)
                }
                Next::Ask { round, requests, sent, at_ms } => {
                    let nothing_sent = sent.is_empty();
                    commands.push(Command::Journal(JournalRecord::Asked { round, requests, sent, at_ms }));
                    if !nothing_sent {
                        return Ok((State::Awaiting { round, nothing_sent }, commands));
                    }
                    let answers = Value::Object(Default::default());
                    commands.push(Command::Journal(JournalRecord::Answered { round, answers, at_ms }));
                    commands.push(Command::Execute);
                    (State::Ready, commands)
                }
            }
        }
        (State::Awaiting { round, nothing_sent: true }, Event::Resume { at_ms }) => {
            let answers = Value::Object(Default::default());
            (State::Ready, vec![Command::Journal(JournalRecord::Answered { round, answers, at_ms }), Command::Execute])
        }
        (State::Awaiting { round, nothing_sent }, Event::Resume { .. }) => {
            (State::Awaiting { round, nothing_sent }, vec![])
        }
        (State::Awaiting { round, .. }, Event::Answered { answers, at_ms }) => {
            (State::Ready, vec![Command::Journal(JournalRecord::Answered { round, answers, at_ms }), Command::Execute])
        }
        (State::Awaiting { .. }, Event::Expired(end))
        | (State::Ready | State::Halted { action: None, .. } | State::Awaiting { .. }, Event::Cancelled(end)) => {
            let commands = vec![Command::Journal(JournalRecord::End(end.clone())), Command::Settle(end.clone())];
            (State::Settling(end), commands)
        }
        (State::Begun(action), Event::Performed(Performed::Done(result))) => (
            State::Ready,
            vec![Command::Journal(JournalRecord::Done { op: action.op, result, at_ms: None }), Command::Execute],
        ),
        // A database write whose COMMIT got no answer: its own transaction tells whether it
        // happened, so ask the database before asking a person.
        (State::Begun(action), Event::Performed(Performed::InDoubt(problem))) if is_sql_write(&action) => {
            let line = format!("action {}: {problem}; looking it up in warden_actions", action.op);
            let log = Command::Log { op: action.op, line };
            (State::LookingUp(action.clone()), vec![log, Command::LookUp(action)])
        }
        (State::Begun(action), Event::Performed(Performed::InDoubt(problem))) => {
            let reason = format!(
                "action {} ({} {}) may have reached the service: {problem}",
                action.op, action.method, action.kind
            );
            wait(action, reason)
        }
        (State::InDoubt(action), Event::Resume { at_ms }) if is_sql_write(&action) => {
            (State::LookingUp(action.clone()), vec![resumed(at_ms), Command::LookUp(action)])
        }
        (State::InDoubt(action), Event::Resume { at_ms }) if resend_is_safe(&action) => {
            let line = format!("action {}: begun before a crash; sending it again (safe)", action.op);
            let log = Command::Log { op: action.op, line };
            let perform = Command::Perform { action: action.clone(), resend: true };
            (State::Begun(action), vec![resumed(at_ms), log, perform])
        }
        (State::InDoubt(action), Event::Resume { at_ms }) => {
            let reason = format!(
                "action {} ({} {}) was begun before a crash and may have happened",
                action.op, action.method, action.kind
            );
            let (state, commands) = wait(action, reason);
            (state, [vec![resumed(at_ms)], commands].concat())
        }
        (State::Halted { op, action }, Event::Resume { .. }) => {
            let reason = format!(
                "the run was found unfinished at {CRASHES_BEFORE_HALT} starts in a row without getting further; \
                 it may be what stops the server, so it is not resumed again automatically"
            );
            let wait = Command::Wait { op, action, reason, halted: true };
            (State::Waiting { op }, vec![wait, Command::Notify])
        }
        (State::LookingUp(action), Event::LookedUp { committed: true }) => {
            let op = action.op;
            let recovered = json!({"rows": [], "changes": Value::Null, "recovered": true});
            let commands = vec![
                Command::Log { op, line: format!("action {op}: found in warden_actions; not repeated") },
                Command::Journal(JournalRecord::Done { op, result: recovered, at_ms: None }),
                Command::Execute,
            ];
            (State::Ready, commands)
        }
        (State::LookingUp(action), Event::LookedUp { committed: false }) => {
            let line = format!("action {}: not in warden_actions; performing it", action.op);
            let log = Command::Log { op: action.op, line };
            let perform = Command::Perform { action: action.clone(), resend: false };
            (State::Begun(action), vec![log, perform])
        }
        (State::LookingUp(action), Event::LookUpFailed(problem)) => {
            let reason = format!(
                "action {} ({} {}) may have committed, and warden_actions could not be read: {problem}",
                action.op, action.method, action.kind
            );
            wait(action, reason)
        }
        (State::Settling(end), Event::Resume { .. }) => (State::Settling(end.clone()), vec![Command::Settle(end)]),
        (State::Settling(end), Event::Settled) => (State::Ended(end), vec![]),
        _ => return Err(invalid),
    })
}

fn wait(action: Action, reason: String) -> (State, Vec<Command>) {
    let op = action.op;
    (State::Waiting { op }, vec![Command::Wait { op, action: Some(action), reason, halted: false }, Command::Notify])
}

fn resumed(at_ms: u64) -> Command {
    Command::Journal(JournalRecord::Resumed { at_ms })
}

#[cfg(test)]
mod tests;
