//! A run's lifecycle from its journal's header to its settle (steps 4 to 6 of seed 000
//! section 7) as one pure state machine: `step(state, event)` returns the next state and the
//! commands to carry out, in order. The driver (`runs.rs`) carries them out through `Env`
//! and the run store and feeds back what the last one produced; the machine itself does no
//! I/O, so every cell of its table is tested without an executor.
//!
//! | state       | event                 | next        | commands                                      |
//! |-------------|-----------------------|-------------|-----------------------------------------------|
//! | Ready       | Start                 | Ready       | Execute                                       |
//! | Ready       | Executed(Act a)       | Begun(a)    | Journal(prints), Journal(Begin a), Perform a  |
//! | Ready       | Executed(End e)       | Settling(e) | Journal(prints), Journal(End e), Settle e     |
//! | Begun(a)    | Performed(Done r)     | Ready       | Journal(Done r), Execute                      |
//! | Begun(a)    | Performed(InDoubt)    | Waiting     | Wait(a), Notify                               |
//! | InDoubt(a)  | Start, a SQLite write | LookingUp   | LookUp a                                      |
//! | InDoubt(a)  | Start, safe to resend | Begun(a)    | Log, Perform a                                |
//! | InDoubt(a)  | Start, otherwise      | Waiting     | Wait(a), Notify                               |
//! | LookingUp(a)| LookedUp(committed)   | Ready       | Log, Journal(Done recovered), Execute         |
//! | LookingUp(a)| LookedUp(not)         | Begun(a)    | Log, Perform a                                |
//! | Settling(e) | Start                 | Settling(e) | Settle e                                      |
//! | Settling(e) | Settled               | Ended(e)    |                                               |
//!
//! Every other cell is refused as a bug. A run's state is rebuilt from its journal
//! (`State::from_journal`): an end means Settling, an action begun and not done means
//! InDoubt, anything else Ready. The only way out of InDoubt is through its resolution (sent
//! again when safe, looked up, or waiting for an operator), and Execute is only ever issued
//! from Ready, so the program (and with it the deadline) never runs while an action is in
//! doubt: a deadline never cuts an action, it only refuses the next new one.

use serde_json::{json, Value};

use crate::broker::perform::{resend_is_safe, Performed};
use crate::broker::{Action, Kind, Method};
use crate::journal::{EndRecord, Journal, JournalRecord, OpState};

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
}

/// What one execution of the program asks for next.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    Act(Action),
    End(EndRecord),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The run is (re)started in this process.
    Start,
    /// One execution ended: its new prints (index, text) and what it asks for next.
    Executed {
        prints: Vec<(u64, String)>,
        next: Next,
    },
    Performed(Performed),
    LookedUp {
        committed: bool,
    },
    Settled,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Execute the program against the journal (yields `Executed`).
    Execute,
    /// Append a record to the run's journal, durably.
    Journal(JournalRecord),
    /// Send the action (yields `Performed`).
    Perform(Action),
    /// Look a `db.sqlite` write up in `warden_actions` (yields `LookedUp`).
    LookUp(Action),
    /// Write the waiting record, durably (step 5).
    Wait { action: Action, reason: String },
    /// Tell the operator (the notify command, retried in the background).
    Notify,
    /// Append the settle event; remove the kept arguments and any waiting record (yields `Settled`).
    Settle(EndRecord),
    /// A line for the run's log.
    Log(String),
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
        match journal.begun_op().and_then(|op| journal.ops.get(&op)) {
            Some(OpState::Begun(recorded)) => serde_json::from_value(recorded.clone())
                .map(State::InDoubt)
                .map_err(|e| format!("the begin record of an action in doubt does not parse: {e}")),
            _ => Ok(State::Ready),
        }
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
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, State::Ended(_) | State::Waiting { .. })
    }
}

impl Event {
    pub fn name(&self) -> &'static str {
        match self {
            Event::Start => "Start",
            Event::Executed { .. } => "Executed",
            Event::Performed(_) => "Performed",
            Event::LookedUp { .. } => "LookedUp",
            Event::Settled => "Settled",
        }
    }
}

/// A `db.sqlite` write: after a crash it is looked up, never guessed.
pub fn is_sql_write(action: &Action) -> bool {
    action.kind == Kind::Sqlite && action.method == Method::Execute
}

/// The table.
pub fn step(state: State, event: Event) -> Result<(State, Vec<Command>), Invalid> {
    let invalid = Invalid { state: state.name(), event: event.name() };
    Ok(match (state, event) {
        (State::Ready, Event::Start) => (State::Ready, vec![Command::Execute]),
        (State::Ready, Event::Executed { prints, next }) => {
            let mut commands: Vec<Command> = prints
                .into_iter()
                .map(|(index, text)| Command::Journal(JournalRecord::Print { index, text }))
                .collect();
            match next {
                Next::Act(action) => {
                    let recorded = serde_json::to_value(&action).expect("actions serialise");
                    commands.push(Command::Journal(JournalRecord::Begin { op: action.op, action: recorded }));
                    commands.push(Command::Perform(action.clone()));
                    (State::Begun(action), commands)
                }
                Next::End(end) => {
                    commands.push(Command::Journal(JournalRecord::End(end.clone())));
                    commands.push(Command::Settle(end.clone()));
                    (State::Settling(end), commands)
                }
            }
        }
        (State::Begun(action), Event::Performed(Performed::Done(result))) => {
            (State::Ready, vec![Command::Journal(JournalRecord::Done { op: action.op, result }), Command::Execute])
        }
        (State::Begun(action), Event::Performed(Performed::InDoubt(problem))) => {
            let reason = format!(
                "action {} ({} {}) may have reached the service: {problem}",
                action.op, action.method, action.kind
            );
            wait(action, reason)
        }
        (State::InDoubt(action), Event::Start) if is_sql_write(&action) => {
            (State::LookingUp(action.clone()), vec![Command::LookUp(action)])
        }
        (State::InDoubt(action), Event::Start) if resend_is_safe(&action) => {
            let log = format!("action {}: begun before a crash; sending it again (safe)", action.op);
            (State::Begun(action.clone()), vec![Command::Log(log), Command::Perform(action)])
        }
        (State::InDoubt(action), Event::Start) => {
            let reason = format!(
                "action {} ({} {}) was begun before a crash and may have happened",
                action.op, action.method, action.kind
            );
            wait(action, reason)
        }
        (State::LookingUp(action), Event::LookedUp { committed: true }) => {
            let op = action.op;
            let recovered = json!({"rows": [], "changes": Value::Null, "recovered": true});
            let commands = vec![
                Command::Log(format!("action {op}: found in warden_actions; not repeated")),
                Command::Journal(JournalRecord::Done { op, result: recovered }),
                Command::Execute,
            ];
            (State::Ready, commands)
        }
        (State::LookingUp(action), Event::LookedUp { committed: false }) => {
            let log = format!("action {}: not in warden_actions; performing it", action.op);
            (State::Begun(action.clone()), vec![Command::Log(log), Command::Perform(action)])
        }
        (State::Settling(end), Event::Start) => (State::Settling(end.clone()), vec![Command::Settle(end)]),
        (State::Settling(end), Event::Settled) => (State::Ended(end), vec![]),
        _ => return Err(invalid),
    })
}

fn wait(action: Action, reason: String) -> (State, Vec<Command>) {
    let op = action.op;
    (State::Waiting { op }, vec![Command::Wait { action, reason }, Command::Notify])
}

#[cfg(test)]
mod tests;
