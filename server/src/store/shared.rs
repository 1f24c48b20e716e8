//! The ledger several instances share through PostgreSQL (issue 28,
//! `docs/design/several-instances.md`): the same events, the same checksummed lines and the same
//! fold (`ledger::State`) as `server.ledger`, kept in a table every instance appends to one at
//! a time (`env::StateDb::ledger_exchange`). Before it decides, an instance folds every line it
//! has not seen into its own copy of the state, under the ledger's lock, so a quota or a `once`
//! key holds across instances exactly as it holds across the calls of one. Events are stamped
//! with the database's time (never before the last event's), not an instance's clock: instances
//! may disagree about the time, never about the database's.

use std::cell::RefCell;
use std::rc::Rc;

use crate::env::{DbFailure, Env, LedgerLine, OwnerChange, PostgresTarget, LEDGER_LINE_BYTES_MAX};
use crate::store::ledger::{Event, State};
use crate::store::record;

/// Why an exchange with the shared ledger failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedError {
    /// The database failed or could not be reached; `may_have_committed` as `DbFailure` says
    /// (the next exchange folds the line if it was).
    Database(DbFailure),
    /// A line of the shared ledger does not read back or breaks the one-reserve rule.
    Damaged { seq: u64, problem: String },
}

impl std::fmt::Display for SharedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SharedError::Database(failure) if failure.may_have_committed => {
                write!(f, "{} (the line may have been appended)", failure.message)
            }
            SharedError::Database(failure) => write!(f, "{}", failure.message),
            SharedError::Damaged { seq, problem } => write!(f, "the shared ledger's line {seq}: {problem}"),
        }
    }
}

/// One instance's view of the shared ledger: the state folded from every line it has read.
pub struct SharedLedger {
    env: Env,
    target: PostgresTarget,
    folded: Rc<RefCell<Folded>>,
}

#[derive(Default)]
struct Folded {
    state: State,
    seen: u64,
}

impl Folded {
    /// Folds the lines not folded yet: an exchange that began before another of this
    /// instance's ended reads lines that one already folded (lines never change once written).
    fn fold(&mut self, lines: &[LedgerLine]) -> Result<(), SharedError> {
        let folded_up_to = self.seen;
        for LedgerLine { seq, line } in lines.iter().filter(|line| line.seq > folded_up_to) {
            let damaged = |problem: String| SharedError::Damaged { seq: *seq, problem };
            if *seq != self.seen + 1 {
                return Err(damaged(format!("it follows line {}: a line is missing", self.seen)));
            }
            let event: Event = record::decode(line).map_err(damaged)?;
            self.state.apply(&event).map_err(damaged)?;
            self.seen = *seq;
        }
        Ok(())
    }
}

impl SharedLedger {
    /// The shared ledger at `target`, read to its end.
    pub async fn open(env: &Env, target: PostgresTarget) -> Result<SharedLedger, SharedError> {
        let ledger = SharedLedger { env: env.clone(), target, folded: Rc::default() };
        ledger.decide(|_, _| None).await?;
        Ok(ledger)
    }

    /// The state as folded so far.
    pub fn state(&self) -> std::cell::Ref<'_, State> {
        std::cell::Ref::map(self.folded.borrow(), |folded| &folded.state)
    }

    /// How many lines of the shared ledger this instance has folded.
    pub fn seen(&self) -> u64 {
        self.folded.borrow().seen
    }

    /// Decides under the ledger's lock, with every instance's events folded in: `decide` gets
    /// the state and the time to stamp an event with (the database's, never before the last
    /// event's), and returns the event to append, if any. Returns the event appended.
    pub async fn decide(
        &self,
        decide: impl FnOnce(&State, u64) -> Option<Event> + 'static,
    ) -> Result<Option<Event>, SharedError> {
        let pending = Rc::new(RefCell::new(Some(decide)));
        loop {
            let outcome: Rc<RefCell<Option<Result<Option<Event>, SharedError>>>> = Rc::default();
            let (folded, told, decision) = (Rc::clone(&self.folded), Rc::clone(&outcome), Rc::clone(&pending));
            let exchange = Box::new(move |lines: &[LedgerLine], now: Option<u64>| {
                let mut folded = folded.borrow_mut();
                let chosen = folded.fold(lines).map(|()| {
                    // Decided only once the whole ledger is read (`now` is given then).
                    let decide = now.and_then(|_| decision.borrow_mut().take())?;
                    let stamp = now?.max(folded.state.last_at_ms);
                    decide(&folded.state, stamp)
                });
                let line = match &chosen {
                    Ok(Some(event)) => Some(line_of(&folded.state, event)),
                    _ => None,
                };
                *told.borrow_mut() = Some(chosen);
                line
            });
            let after = self.seen();
            let exchanged = self.env.state_db.ledger_exchange(&self.target, after, OwnerChange::Keep, exchange).await;
            let exchanged = exchanged.map_err(SharedError::Database)?;
            let chosen = outcome.borrow_mut().take().expect("the exchange called its decision")?;
            if let (Some(seq), Some(event)) = (exchanged.appended, &chosen) {
                // Another exchange of this instance, waiting on the lock behind this one, may
                // have read and folded the line already (the decision folded every line
                // before it, so the line is the next one or it is folded).
                let mut folded = self.folded.borrow_mut();
                if folded.seen < seq {
                    assert_eq!(seq, folded.seen + 1, "an appended line follows the lines read");
                    folded.state.apply(event).expect("checked before it was appended");
                    folded.seen = seq;
                }
            }
            if !exchanged.more {
                return Ok(chosen);
            }
            // A page was cut: nothing was decided yet; fold the next page and decide then.
            assert!(chosen.is_none(), "nothing is decided before the whole ledger is read");
        }
    }
}

/// The line `event` is appended as, once `state` is checked to take it (a second reserve,
/// settle or release for a run is a bug, refused before anything is written).
fn line_of(state: &State, event: &Event) -> Vec<u8> {
    if let Err(problem) = state.check(event) {
        panic!("refusing to append a ledger event that breaks the one-reserve rule: {problem}");
    }
    let mut line = record::encode(event);
    assert_eq!(line.pop(), Some(b'\n'), "an encoded record ends its line");
    assert!(line.len() <= LEDGER_LINE_BYTES_MAX, "a ledger line of {} bytes", line.len());
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an operator reads: the database's message, whether the line may be there, and a
    /// damaged line's number (mutants cargo-mutants found missed wrote nothing, or said a
    /// line may be there when it is not).
    #[test]
    fn an_error_says_what_the_database_said_and_whether_the_line_may_be_there() {
        let lost = SharedError::Database(DbFailure {
            message: "connection closed".into(),
            may_have_committed: true,
            untrusted: false,
        });
        assert_eq!(lost.to_string(), "connection closed (the line may have been appended)");
        let refused = SharedError::Database(DbFailure::rolled_back("connection refused"));
        assert_eq!(refused.to_string(), "connection refused");
        let damaged = SharedError::Damaged { seq: 7, problem: "checksum mismatch".into() };
        assert_eq!(damaged.to_string(), "the shared ledger's line 7: checksum mismatch");
    }
}
