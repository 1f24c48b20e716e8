//! The table, cell by cell, and the machine driven without an executor through a crash after
//! every command, for every action kind, with and without a deadline passed at the restart.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use super::*;
use crate::base::money::Money;
use crate::broker::{Broker, Completed, Stop};
use crate::broker::{Kind, Method};
use crate::manifest::{CapabilityGrant, DbMode, Grant};
use crate::store::journal::{Journal, JournalRecord};
use crate::store::record;

fn action(op: u64, kind: crate::broker::Kind, method: Method, key: bool) -> Action {
    Action {
        op,
        grant: "g".into(),
        kind,
        method,
        target: "https://x.test/notes".into(),
        headers: BTreeMap::new(),
        body: String::new(),
        amount: None,
        idempotency_key: key.then(|| format!("warden-r-{op}")),
        narrowed: None,
    }
}

fn end(outcome: &str) -> EndRecord {
    let outcome = crate::store::journal::RunOutcome::parse(outcome).expect("an outcome's name");
    EndRecord { outcome, result: None, message: None, usage: json!({}), at_ms: 1 }
}

/// The kind of each command, for comparing a cell's commands.
fn kinds(commands: &[Command]) -> Vec<&'static str> {
    commands
        .iter()
        .map(|c| match c {
            Command::Execute => "Execute",
            Command::Journal(JournalRecord::Print { .. }) => "Journal(Print)",
            Command::Journal(JournalRecord::Begin { .. }) => "Journal(Begin)",
            Command::Journal(JournalRecord::Done { .. }) => "Journal(Done)",
            Command::Journal(JournalRecord::End(_)) => "Journal(End)",
            Command::Journal(JournalRecord::Resumed { .. }) => "Journal(Resumed)",
            Command::Journal(JournalRecord::Asked { .. }) => "Journal(Asked)",
            Command::Journal(JournalRecord::Answered { .. }) => "Journal(Answered)",
            Command::Journal(_) => "Journal(other)",
            Command::Perform { .. } => "Perform",
            Command::LookUp(_) => "LookUp",
            Command::Wait { .. } => "Wait",
            Command::Notify => "Notify",
            Command::Settle(_) => "Settle",
            Command::Log { .. } => "Log",
        })
        .collect()
}

/// Every (state, event) cell: the valid ones with their next state and commands, every
/// other one refused. A change to the table is a visible change to this list.
#[test]
fn the_table_cell_by_cell() {
    let post = action(0, Kind::HttpPost, Method::Post, false);
    let keyed = action(0, Kind::HttpPost, Method::Post, true);
    let sql = action(0, Kind::Sqlite, Method::Execute, false);
    let states = [
        State::Ready,
        State::Begun(post.clone()),
        State::InDoubt(post.clone()),
        State::InDoubt(keyed.clone()),
        State::InDoubt(sql.clone()),
        State::LookingUp(sql.clone()),
        State::Settling(end("done")),
        State::Ended(end("done")),
        State::Waiting { op: 0 },
        State::Halted { op: 0, action: None },
        State::Awaiting { round: 0, nothing_sent: false },
        State::Awaiting { round: 0, nothing_sent: true },
        State::Begun(sql.clone()),
    ];
    let ask = |sent: Vec<String>| Next::Ask { round: 0, requests: json!({"k": {}}), sent, at_ms: 3 };
    let events = [
        Event::Start,
        Event::Resume { at_ms: 5 },
        Event::Executed { prints: vec![(0, "p".into())], next: Next::Act(post.clone()) },
        Event::Executed { prints: vec![], next: Next::End(end("done")) },
        Event::Performed(Performed::Done(json!({"status": 201}))),
        Event::Performed(Performed::InDoubt("timed out".into())),
        Event::LookedUp { committed: true },
        Event::LookedUp { committed: false },
        Event::Settled,
        Event::Executed { prints: vec![], next: ask(vec!["k".into()]) },
        Event::Executed { prints: vec![], next: ask(vec![]) },
        Event::Answered { answers: json!({"k": {}}), at_ms: 4 },
        Event::Expired(end("deadline")),
        Event::LookUpFailed("connection refused".into()),
        Event::Cancelled(end("cancelled")),
    ];
    // (state index, event index) -> (next state, commands).
    let expected: Vec<((usize, usize), (&str, Vec<&str>))> = vec![
        ((0, 0), ("Ready", vec!["Execute"])),
        ((0, 1), ("Ready", vec!["Journal(Resumed)", "Execute"])),
        ((0, 2), ("Begun", vec!["Journal(Print)", "Journal(Begin)", "Perform"])),
        ((0, 3), ("Settling", vec!["Journal(End)", "Settle"])),
        ((1, 4), ("Ready", vec!["Journal(Done)", "Execute"])),
        ((1, 5), ("Waiting", vec!["Wait", "Notify"])),
        ((2, 1), ("Waiting", vec!["Journal(Resumed)", "Wait", "Notify"])),
        ((3, 1), ("Begun", vec!["Journal(Resumed)", "Log", "Perform"])),
        ((4, 1), ("LookingUp", vec!["Journal(Resumed)", "LookUp"])),
        ((5, 6), ("Ready", vec!["Log", "Journal(Done)", "Execute"])),
        ((5, 7), ("Begun", vec!["Log", "Perform"])),
        ((6, 1), ("Settling", vec!["Settle"])),
        ((6, 8), ("Ended", vec![])),
        ((9, 1), ("Waiting", vec!["Wait", "Notify"])),
        ((0, 9), ("Awaiting", vec!["Journal(Asked)"])),
        ((0, 10), ("Ready", vec!["Journal(Asked)", "Journal(Answered)", "Execute"])),
        ((10, 1), ("Awaiting", vec![])),
        ((10, 11), ("Ready", vec!["Journal(Answered)", "Execute"])),
        ((10, 12), ("Settling", vec!["Journal(End)", "Settle"])),
        ((11, 1), ("Ready", vec!["Journal(Answered)", "Execute"])),
        ((11, 11), ("Ready", vec!["Journal(Answered)", "Execute"])),
        ((11, 12), ("Settling", vec!["Journal(End)", "Settle"])),
        ((12, 4), ("Ready", vec!["Journal(Done)", "Execute"])),
        ((12, 5), ("LookingUp", vec!["Log", "LookUp"])),
        ((5, 13), ("Waiting", vec!["Wait", "Notify"])),
        // An operator's cancel ends a run with nothing in doubt, sending nothing.
        ((0, 14), ("Settling", vec!["Journal(End)", "Settle"])),
        ((9, 14), ("Settling", vec!["Journal(End)", "Settle"])),
        ((10, 14), ("Settling", vec!["Journal(End)", "Settle"])),
        ((11, 14), ("Settling", vec!["Journal(End)", "Settle"])),
    ];
    let mut valid = 0;
    for (s, state) in states.iter().enumerate() {
        for (e, event) in events.iter().enumerate() {
            let outcome = step(state.clone(), event.clone());
            match expected.iter().find(|(cell, _)| *cell == (s, e)) {
                Some((_, (next, commands))) => {
                    let (got, got_commands) = outcome.unwrap_or_else(|i| panic!("cell ({s}, {e}): {i}"));
                    assert_eq!((got.name(), kinds(&got_commands)), (*next, commands.clone()), "cell ({s}, {e})");
                    valid += 1;
                }
                None => {
                    assert!(outcome.is_err(), "cell ({s}, {e}) {} x {} must be refused", state.name(), event.name())
                }
            }
        }
    }
    assert_eq!(valid, expected.len());
    assert_eq!(states.len() * events.len(), 195, "every cell was visited");
}

#[test]
fn a_journal_gives_the_state_it_left() {
    let header = crate::store::journal::test_header();
    let post = action(0, Kind::HttpPost, Method::Post, false);
    let begin = JournalRecord::Begin { op: 0, action: serde_json::to_value(&post).unwrap(), at_ms: None };
    let done = JournalRecord::Done { op: 0, result: json!({}), at_ms: None };
    let parse = |records: &[&JournalRecord]| {
        let bytes: Vec<u8> = records.iter().flat_map(|r| record::encode(*r)).collect();
        State::from_journal(&Journal::parse(Path::new("j"), &bytes).unwrap()).unwrap()
    };
    assert_eq!(parse(&[&header]), State::Ready);
    assert_eq!(parse(&[&header, &begin]), State::InDoubt(post));
    assert_eq!(parse(&[&header, &begin, &done]), State::Ready);
    assert_eq!(parse(&[&header, &begin, &done, &JournalRecord::End(end("done"))]), State::Settling(end("done")));
    let asked = JournalRecord::Asked { round: 0, requests: json!({"k": {}}), sent: vec!["k".into()], at_ms: 2 };
    let answered = JournalRecord::Answered { round: 0, answers: json!({"k": {}}), at_ms: 3 };
    assert_eq!(parse(&[&header, &begin, &done, &asked]), State::Awaiting { round: 0, nothing_sent: false });
    assert_eq!(parse(&[&header, &asked, &answered]), State::Ready);
    // Waiting for a person is not a crash: restarts write no `Resumed` for it, and it is
    // never halted.
    assert_eq!(parse(&[&header, &asked]), State::Awaiting { round: 0, nothing_sent: false });
    // A round that asked nobody, its empty answers not yet journaled when the server stopped.
    let asked_nobody = JournalRecord::Asked { round: 0, requests: json!({"k": {}}), sent: vec![], at_ms: 2 };
    assert_eq!(parse(&[&header, &asked_nobody]), State::Awaiting { round: 0, nothing_sent: true });
}

/// The reader refuses what the writer never writes around input rounds.
#[test]
fn input_rounds_are_read_as_strictly_as_they_are_written() {
    let header = crate::store::journal::test_header();
    let asked = |round| JournalRecord::Asked { round, requests: json!({}), sent: vec![], at_ms: 2 };
    let answered = |round| JournalRecord::Answered { round, answers: json!({}), at_ms: 3 };
    let begin = JournalRecord::Begin { op: 0, action: json!({}), at_ms: None };
    let parse = |records: &[&JournalRecord]| {
        let bytes: Vec<u8> = records.iter().flat_map(|r| record::encode(*r)).collect();
        Journal::parse(Path::new("j"), &bytes)
    };
    let (a0, a1, n0, n1) = (asked(0), asked(1), answered(0), answered(1));
    assert!(parse(&[&header, &a0, &n0, &a1, &n1, &begin]).is_ok());
    assert!(parse(&[&header, &a0, &JournalRecord::End(end("deadline"))]).is_ok());
    for damaged in [
        vec![&header, &a1],
        vec![&header, &n0],
        vec![&header, &a0, &a1],
        vec![&header, &a0, &begin],
        vec![&header, &begin, &a0],
        vec![&header, &a0, &n0, &n0],
        vec![&header, &a0, &JournalRecord::Resumed { at_ms: 4 }],
    ] {
        let error = parse(&damaged).unwrap_err();
        assert!(error.contains("the journal is damaged"), "{error}");
    }
}

// --- The machine driven through crashes, without an executor. ---------------------------

/// The kinds of action a program can take, each behind a grant named `g`.
#[derive(Clone, Copy, Debug)]
enum Taken {
    Get,
    PlainPost,
    KeyedPost,
    SqlWrite,
    Refund,
}

const KINDS: [Taken; 5] = [Taken::Get, Taken::PlainPost, Taken::KeyedPost, Taken::SqlWrite, Taken::Refund];

fn grant(kind: Taken) -> CapabilityGrant {
    let plain = |cap: Kind| CapabilityGrant {
        cap,
        only: vec!["https://x.test/*".into()],
        each: None,
        max: None,
        uses: None,
        needs: BTreeMap::new(),
        idempotency_key: false,
        headers: BTreeMap::new(),
        path: None,
        mode: None,
        init: None,
        max_tokens: None,
        url_env: None,
    };
    match kind {
        Taken::Get => plain(Kind::HttpGet),
        Taken::PlainPost => plain(Kind::HttpPost),
        Taken::KeyedPost => CapabilityGrant { idempotency_key: true, ..plain(Kind::HttpPost) },
        Taken::SqlWrite => CapabilityGrant { only: vec![], mode: Some(DbMode::Write), ..plain(Kind::Sqlite) },
        Taken::Refund => {
            let mut needs = BTreeMap::new();
            needs.insert(
                "post".to_string(),
                Grant::Capability(CapabilityGrant { idempotency_key: true, ..plain(Kind::HttpPost) }),
            );
            needs.insert("get".to_string(), Grant::Capability(plain(Kind::HttpGet)));
            CapabilityGrant {
                only: vec![],
                each: Some(Money::parse("50", "USD").unwrap()),
                uses: Some(1),
                needs,
                ..plain(Kind::StripeRefund)
            }
        }
    }
}

/// The action a program asks for (before the broker numbers it and adds its key).
fn asked(kind: Taken) -> Action {
    let mut action = match kind {
        Taken::Get => action(0, Kind::HttpGet, Method::Get, false),
        Taken::PlainPost | Taken::KeyedPost => action(0, Kind::HttpPost, Method::Post, false),
        Taken::SqlWrite => Action {
            target: "UPDATE t SET x = 1".into(),
            body: "[]".into(),
            ..action(0, Kind::Sqlite, Method::Execute, false)
        },
        Taken::Refund => Action {
            target: String::new(),
            body: "pi_1".into(),
            amount: Some(json!({"amount": "10.00", "currency": "USD"})),
            ..action(0, Kind::StripeRefund, Method::Refund, false)
        },
    };
    action.kind = grant(kind).cap;
    action
}

/// The outside world and the run's durable records, as a crash leaves them.
struct World {
    kind: Taken,
    journal: Vec<u8>,
    /// Requests that reached the service, and effects it made (a key dedups).
    sent: u32,
    effects: u32,
    keys_seen: Vec<String>,
    committed: bool,
    waiting: bool,
    settled: Option<EndRecord>,
    /// The next write's answer is lost (the service acted).
    lose_answer: bool,
    /// Attempts so far: the first is a fresh run's, later ones resume it.
    attempts: u32,
}

impl World {
    fn new(kind: Taken) -> World {
        let header = crate::store::journal::test_header();
        World {
            kind,
            journal: record::encode(&header),
            sent: 0,
            effects: 0,
            keys_seen: vec![],
            committed: false,
            waiting: false,
            settled: None,
            lose_answer: false,
            attempts: 0,
        }
    }

    fn read(&self) -> Journal {
        // The strict reader checks every journal the machine's commands write.
        Journal::parse(Path::new("j"), &self.journal).expect("the machine writes what the reader accepts")
    }

    /// The program: a read first, then one action of the kind under test, then the end.
    fn execute(&self, deadline_passed: bool) -> Event {
        let journal = self.read();
        let completed: Vec<Completed> = journal
            .completed()
            .into_iter()
            .map(|(action, result, happened)| Completed {
                action: serde_json::from_value(action).unwrap(),
                result,
                happened,
            })
            .collect();
        let mut grants = BTreeMap::new();
        grants.insert("g".to_string(), Grant::Capability(grant(self.kind)));
        grants.insert("read".to_string(), Grant::Capability(grant(Taken::Get)));
        let mut broker = Broker::new("r", &grants, completed);
        broker.deadline_passed = deadline_passed;
        broker.deadline_text = "1s".into();
        let read = Action { grant: "read".into(), ..asked(Taken::Get) };
        for wanted in [read, asked(self.kind)] {
            match broker.act(wanted) {
                Ok(_) => {}
                Err(Stop::Suspend) => {
                    let action = broker.suspended.borrow_mut().take().unwrap();
                    return Event::Executed { prints: vec![], next: Next::Act(action) };
                }
                Err(Stop::Refused) => {
                    return Event::Executed { prints: vec![], next: Next::End(end("deadline")) };
                }
                Err(Stop::Mismatch) => panic!("the program replays deterministically"),
            }
        }
        Event::Executed { prints: vec![], next: Next::End(end("done")) }
    }

    fn perform(&mut self, action: &Action) -> Event {
        self.sent += 1;
        if action.is_read() {
            return Event::Performed(Performed::Done(json!({"status": 200})));
        }
        match &action.idempotency_key {
            Some(key) if self.keys_seen.contains(key) => {}
            Some(key) => {
                self.keys_seen.push(key.clone());
                self.effects += 1;
            }
            None => self.effects += 1,
        }
        if is_sql_write(action) {
            self.committed = true;
        }
        if std::mem::take(&mut self.lose_answer) && !resend_is_safe(action) && !is_sql_write(action) {
            return Event::Performed(Performed::InDoubt("timed out after sending".into()));
        }
        Event::Performed(Performed::Done(json!({"status": 200})))
    }

    /// Carries out one command; returns the event it yields, if any.
    fn carry_out(&mut self, command: &Command, deadline_passed: bool) -> Option<Event> {
        match command {
            Command::Execute => Some(self.execute(deadline_passed)),
            Command::Journal(record) => {
                self.journal.extend(record::encode(record));
                None
            }
            Command::Perform { action, .. } => Some(self.perform(action)),
            Command::LookUp(_) => Some(Event::LookedUp { committed: self.committed }),
            Command::Wait { .. } => {
                self.waiting = true;
                None
            }
            Command::Notify | Command::Log { .. } => None,
            Command::Settle(end) => {
                self.settled = Some(end.clone());
                self.waiting = false;
                Some(Event::Settled)
            }
        }
    }

    /// Runs the machine from the journal until a terminal state, or until `crash_after`
    /// commands have been carried out (then everything not durable is lost). Returns the
    /// terminal state, or None after a crash.
    fn run(&mut self, crash_after: Option<usize>, deadline_passed: bool, carried: &mut usize) -> Option<State> {
        let mut state = State::from_journal(&self.read()).unwrap();
        let fresh = self.attempts == 0;
        self.attempts += 1;
        let mut event = if fresh { Event::Start } else { Event::Resume { at_ms: 2 } };
        for _ in 0..100 {
            let (next, commands) = step(state, event).unwrap_or_else(|i| panic!("{i}"));
            state = next;
            let mut produced = None;
            for command in &commands {
                if crash_after == Some(*carried) {
                    return None;
                }
                *carried += 1;
                if let Some(event) = self.carry_out(command, deadline_passed) {
                    assert!(produced.is_none(), "one event per transition");
                    produced = Some(event);
                }
            }
            if state.is_terminal() {
                return Some(state);
            }
            event = produced.expect("a non-terminal transition yields an event");
        }
        panic!("the run did not reach a terminal state");
    }
}

#[test]
fn a_crash_after_every_command_for_every_action_kind_with_and_without_the_deadline() {
    for kind in KINDS {
        for lose_answer in [false, true] {
            // The clean run, to count its commands.
            let mut clean = World::new(kind);
            clean.lose_answer = lose_answer;
            let mut total = 0;
            let finished = clean.run(None, false, &mut total).unwrap();
            for crash_after in 0..total {
                for deadline_passed in [false, true] {
                    let mut world = World::new(kind);
                    world.lose_answer = lose_answer;
                    let mut carried = 0;
                    assert!(world.run(Some(crash_after), false, &mut carried).is_none());
                    let journal = world.read();
                    let in_doubt = journal.begun_op();
                    let mut ignored = 0;
                    let last = world.run(None, deadline_passed, &mut ignored).unwrap();
                    let case =
                        format!("{kind:?} lose {lose_answer} crash after {crash_after} deadline {deadline_passed}");
                    // At most once: the service made the effect once at most (a key dedups).
                    assert!(world.effects <= 1, "{case}: {} effects", world.effects);
                    let unsafe_write = matches!(kind, Taken::PlainPost);
                    match &last {
                        State::Waiting { op } => {
                            // Only a write that cannot be resent or looked up waits.
                            assert!(unsafe_write, "{case}: a {kind:?} waited");
                            assert!(world.waiting && world.settled.is_none(), "{case}");
                            assert_eq!(world.read().begun_op(), Some(*op), "{case}");
                        }
                        State::Ended(end) => {
                            let journal = world.read();
                            assert!(journal.begun_op().is_none(), "{case}: ended with an action in doubt");
                            assert_eq!(world.settled.as_ref(), Some(end), "{case}");
                            // A begun action was resolved before the deadline could end the run.
                            if let Some(op) = in_doubt {
                                assert!(
                                    matches!(journal.ops.get(&op), Some(OpState::Done { .. })),
                                    "{case}: action {op} in doubt was not resolved"
                                );
                            }
                            if !deadline_passed {
                                assert_eq!(end.outcome.name(), "done", "{case}");
                                assert_eq!(world.effects, u32::from(!matches!(kind, Taken::Get)), "{case}");
                            }
                        }
                        other => panic!("{case}: not terminal: {other:?}"),
                    }
                    // An unsafe write begun before the crash is never sent again.
                    if unsafe_write && in_doubt == Some(1) {
                        assert_eq!(last, State::Waiting { op: 1 }, "{case}");
                        assert!(world.sent <= 2, "{case}: sent {} times", world.sent);
                    }
                }
            }
            assert!(matches!(finished, State::Ended(_) | State::Waiting { .. }));
        }
    }
}

#[test]
fn invalid_cells_name_their_state_and_event() {
    let refused = step(State::Waiting { op: 3 }, Event::Start).unwrap_err();
    assert_eq!(refused.to_string(), "the run's state machine has no transition for event Start in state Waiting");
    assert!(step(State::Ended(end("done")), Event::Settled).is_err());
}

#[test]
fn a_run_that_crashed_the_server_twice_without_progress_is_halted_until_the_operator_resumes_it() {
    let mut world = World::new(Taken::KeyedPost);
    // First attempt: the program executes, the server dies before anything is journaled.
    assert!(world.run(Some(1), false, &mut 0).is_none());
    // Second attempt: it is resumed (journaled), and the server dies again.
    assert!(world.run(Some(1), false, &mut 0).is_none());
    assert_eq!(world.read().resumes_without_progress, 1);
    assert!(matches!(State::from_journal(&world.read()).unwrap(), State::Halted { op: 0, action: None }));
    // Third start: not resumed, waiting for an operator; nothing was sent.
    assert_eq!(world.run(None, false, &mut 0), Some(State::Waiting { op: 0 }));
    assert!(world.waiting);
    assert_eq!(world.sent, 0);
    // A restart leaves it halted.
    assert_eq!(world.run(None, false, &mut 0), Some(State::Waiting { op: 0 }));
    // The operator asks for it to be resumed: the next start runs it to its end.
    world.journal.extend(record::encode(&JournalRecord::Retried { at_ms: 3 }));
    assert!(matches!(world.run(None, false, &mut 0), Some(State::Ended(_))));
    assert_eq!(world.effects, 1);
}

#[test]
fn progress_between_crashes_keeps_a_run_resuming() {
    let mut world = World::new(Taken::KeyedPost);
    let mut carried = 0;
    // Crash right after the read's begin record: progress was made.
    assert!(world.run(Some(2), false, &mut carried).is_none());
    // Resumed: the read is resent and done (progress), then a crash after the write's begin.
    assert!(world.run(Some(6), false, &mut 0).is_none());
    assert_eq!(world.read().resumes_without_progress, 0);
    assert!(matches!(world.run(None, false, &mut 0), Some(State::Ended(_))));
}

/// Issue 23 item 12: a run whose action waits for a person's verdict is not a crash loop:
/// however many starts found it (each a `Resumed` record), it stays InDoubt with its question.
/// A SQL write, looked up and perhaps sent again at each start, keeps the halt.
#[test]
fn an_action_waiting_for_a_verdict_is_never_halted_but_a_sql_write_is() {
    let journal_of = |action: &Action, resumes: u64| {
        let mut bytes = record::encode(&crate::store::journal::test_header());
        let begun = serde_json::to_value(action).unwrap();
        bytes.extend(record::encode(&JournalRecord::Begin { op: 0, action: begun, at_ms: None }));
        for at_ms in 0..resumes {
            bytes.extend(record::encode(&JournalRecord::Resumed { at_ms }));
        }
        Journal::parse(Path::new("j"), &bytes).unwrap()
    };
    let post = action(0, Kind::HttpPost, Method::Post, false);
    for resumes in [1, 2, 5] {
        assert!(matches!(State::from_journal(&journal_of(&post, resumes)).unwrap(), State::InDoubt(_)), "{resumes}");
    }
    let mut write = action(0, Kind::Sqlite, Method::Execute, false);
    write.target = "UPDATE t SET a = 1".into();
    assert!(matches!(State::from_journal(&journal_of(&write, 1)).unwrap(), State::Halted { .. }));
}

/// Only a database write records itself in `warden_actions`, so only a write is looked up
/// there after a crash; a read begun before a crash is sent again (it changes nothing), and
/// an HTTP action is never looked up in a database (a mutant cargo-mutants found missed:
/// `&&` read as `||` sent a read to a lookup that could never find it).
#[test]
fn a_database_read_begun_before_a_crash_is_sent_again_not_looked_up() {
    let mut read = action(0, Kind::Sqlite, Method::Query, false);
    read.target = "SELECT a FROM t".into();
    assert!(!is_sql_write(&read));
    assert!(!is_sql_write(&action(0, Kind::HttpPost, Method::Post, false)));
    let (state, commands) = step(State::InDoubt(read), Event::Resume { at_ms: 1 }).unwrap();
    assert_eq!((state.name(), kinds(&commands)), ("Begun", vec!["Journal(Resumed)", "Log", "Perform"]));
}
