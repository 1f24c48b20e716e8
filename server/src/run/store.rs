//! The durable records of runs, behind one interface: the reserve and the release in the
//! ledger, the kept arguments and the journal, the waiting record, and the settle. `Runs` keeps them on disk; a
//! second store (PostgreSQL, for several instances sharing quotas and `once` keys) can come
//! later without touching the state machine (`machine.rs`) or its driver.

use serde_json::{Map, Value};

use crate::base::sync::MutexGuard;
use crate::broker::Action;
use crate::catalog::Tool;
use crate::env::{LocalBoxFuture, RecordKind};
use crate::run::runs::{InProgress, LineOf, Runs};
use crate::store::journal::{EndRecord, Journal, JournalRecord};
use crate::store::ledger::{Event, LedgerError};

/// A run cannot go on, and the server stops: why, and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatal {
    pub cause: FatalCause,
    pub message: String,
}

/// Why the server stops. The simulator tells them apart from an exit's message
/// (`FatalCause::of_exit`): a stop that is a bug is a violation, the others are what a
/// failing disk or a missing worker must cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FatalCause {
    /// A durable write or read failed, or a record does not read back: going on could lose
    /// or repeat what the record holds.
    Storage,
    /// Program executions cannot run now (no sandbox worker): the run resumes at the next start.
    Unavailable,
    /// The code broke one of its own invariants.
    Bug,
    /// Runs found at the start cannot go on as the server now is (their tool changed, or
    /// is gone): a person decides, as the message says.
    NeedsOperator,
}

impl FatalCause {
    const ALL: [FatalCause; 4] =
        [FatalCause::Storage, FatalCause::Unavailable, FatalCause::Bug, FatalCause::NeedsOperator];

    /// How an exit's message ends for this cause.
    fn mark(self) -> &'static str {
        match self {
            FatalCause::Storage => " (the journals could not be written or read safely)",
            FatalCause::Unavailable => " (programs cannot run now; the run resumes at the next start)",
            FatalCause::Bug => " (a bug)",
            FatalCause::NeedsOperator => " (an operator must act before the server starts)",
        }
    }

    /// The cause a server's exit message names, if it stopped for one.
    pub fn of_exit(message: &str) -> Option<FatalCause> {
        FatalCause::ALL.into_iter().find(|cause| message.ends_with(cause.mark()))
    }
}

impl Fatal {
    pub fn storage(message: String) -> Fatal {
        Fatal { cause: FatalCause::Storage, message }
    }

    pub fn unavailable(message: String) -> Fatal {
        Fatal { cause: FatalCause::Unavailable, message }
    }

    pub fn bug(message: String) -> Fatal {
        Fatal { cause: FatalCause::Bug, message }
    }

    pub fn needs_operator(message: String) -> Fatal {
        Fatal { cause: FatalCause::NeedsOperator, message }
    }
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.message, self.cause.mark())
    }
}

impl From<LedgerError> for Fatal {
    fn from(error: LedgerError) -> Fatal {
        Fatal::storage(error.to_string())
    }
}

/// How a run's execution ended for now.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    Ended(EndRecord),
    /// Stopped in doubt at action `op`, waiting for an operator (not settled).
    Stopped {
        op: u64,
    },
    /// Stopped between actions because the server is stopping (not settled): nothing is in
    /// doubt, and the run resumes at the next start as after a crash.
    Drained,
    /// Waiting for its client's answers to round `round` (these requests, by key) until
    /// `expires_at_ms` (not settled).
    Asking {
        round: u64,
        requests: Value,
        expires_at_ms: u64,
    },
}

/// What a waiting record says: the action in doubt (or the next one, for a halted run).
pub struct Waiting<'a> {
    pub op: u64,
    pub action: Option<&'a Action>,
    pub reason: &'a str,
    pub halted: bool,
    /// The run's arguments, shown to the person who decides (scrubbed with the record).
    pub arguments: &'a serde_json::Map<String, serde_json::Value>,
}

pub trait RunStore {
    /// Step 1: the `reserve` event, durable, written under the ledger's lock (the caller
    /// looked up `once` and the quota under the same hold; the lock is released while the
    /// event's fsync is shared with others).
    fn reserve<'a>(&'a self, held: MutexGuard<'a>, event: Event) -> LocalBoxFuture<'a, Result<(), LedgerError>>;
    /// A run that never started (recovery): its files go, then its reservation is released.
    fn release<'a>(&'a self, tool: &'a str, run: &'a str) -> LocalBoxFuture<'a, Result<(), Fatal>>;
    /// Steps 2 and 3: the kept arguments, then the journal's header, each durable.
    fn start<'a>(
        &'a self,
        tool: &'a Tool,
        run: &'a str,
        inputs: &'a Map<String, Value>,
    ) -> LocalBoxFuture<'a, Result<(), Fatal>>;
    /// The run's journal as it is now.
    fn journal<'a>(&'a self, tool: &'a Tool, run: &'a str) -> LocalBoxFuture<'a, Result<Journal, Fatal>>;
    /// Appends one record, durably, before anything depends on it.
    fn append<'a>(
        &'a self,
        tool: &'a Tool,
        run: &'a str,
        record: &'a JournalRecord,
    ) -> LocalBoxFuture<'a, Result<(), Fatal>>;
    /// Step 5: the waiting record of a run stopped in doubt, or halted, durably.
    fn wait<'a>(&'a self, tool: &'a Tool, run: &'a str, waiting: Waiting<'a>) -> LocalBoxFuture<'a, Result<(), Fatal>>;
    /// Step 6: the settle event, then the run's kept arguments and waiting record go.
    fn settle<'a>(&'a self, tool: &'a Tool, run: &'a str, end: &'a EndRecord) -> LocalBoxFuture<'a, Result<(), Fatal>>;

    /// Held while a driver executes the run: no other driver takes it up meanwhile, and
    /// what the store keeps for an executing run (its journal in memory) goes when it drops.
    type Running<'a>
    where
        Self: 'a;
    fn running<'a>(&'a self, run: &str) -> Self::Running<'a>;
    /// The principal whose call made the run, if any.
    fn principal(&self, run: &str) -> Option<String>;
    /// Whether the server stops: a run begins no new action.
    fn draining(&self) -> bool;
    /// Whether the run's client cancelled it: it ends at its next point between actions.
    fn cancel_requested(&self, _run: &str) -> bool {
        false
    }
    /// An action of `kind` took `us` microseconds to perform (for metrics; a store may ignore it).
    fn observe_action(&self, _kind: &str, _us: u64) {}
    /// How long this instance's lease surely lasts still, on the PostgreSQL store (`None`: no
    /// other instance can take a run over from this store, so nothing bounds a send).
    fn lease_left_ms(&self) -> Option<u64> {
        None
    }
    /// Whether `run` is no longer this instance's, its lease having ended (another owns it, or
    /// ended it): only then can a run's records change under its driver. A store no other
    /// instance can take a run over from says no.
    fn taken_by_another<'a>(&'a self, _run: &'a str) -> LocalBoxFuture<'a, Option<String>> {
        Box::pin(async { None })
    }
    /// The action rule (issue 28): whether an action whose send may take `send_ms` may be sent
    /// now, with this instance's lease sure to outlast it. A store no other instance can take
    /// a run over from allows every send.
    fn lease_allows<'a>(&'a self, _send_ms: u64) -> LocalBoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
    /// Keeps one line of the run's log (about its action `action`, if any), scrubbed;
    /// returns the line as kept.
    fn log<'a>(&'a self, tool: &'a str, run: &'a str, action: Option<u64>, line: &'a str)
        -> LocalBoxFuture<'a, String>;
    /// Tells the operator that the run waits for a person (in the background, retried).
    fn notify(&self, tool: &Tool, run: &str);
    /// An action's result as a journal record can hold it.
    fn fitted_result(&self, op: u64, result: Value) -> Value;
    /// A run's end as a journal record can hold it.
    fn fitted_end(&self, end: EndRecord) -> EndRecord;
}

impl RunStore for Runs {
    fn reserve<'a>(&'a self, held: MutexGuard<'a>, event: Event) -> LocalBoxFuture<'a, Result<(), LedgerError>> {
        assert!(matches!(event, Event::Reserve { .. }), "reserve appends reserve events only");
        // Marked first: a repeated `once` call must find the run in progress while its
        // reserve waits for the fsync, or it would take the run up a second time.
        assert!(self.is_in_progress(event.run()), "a reserve for run {}, not marked in progress", event.run());
        Box::pin(self.ledger.append(held, event))
    }

    fn release<'a>(&'a self, tool: &'a str, run: &'a str) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        Box::pin(async move {
            self.remove_record(tool, run, RecordKind::Inputs, true).await?;
            self.remove_record(tool, run, RecordKind::Journal, true).await?;
            let held = self.ledger.lock().await;
            let at_ms = self.ledger.stamp();
            self.ledger.append(held, Event::Release { run: run.to_string(), at_ms }).await?;
            Ok(())
        })
    }

    fn start<'a>(
        &'a self,
        tool: &'a Tool,
        run: &'a str,
        inputs: &'a Map<String, Value>,
    ) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        Box::pin(self.start_files(tool, run, inputs))
    }

    fn journal<'a>(&'a self, tool: &'a Tool, run: &'a str) -> LocalBoxFuture<'a, Result<Journal, Fatal>> {
        Box::pin(async move {
            self.executing_journal(&tool.config.name, run)
                .await
                .map_err(Fatal::storage)?
                .ok_or_else(|| Fatal::storage(format!("the journal of run {run} is missing")))
        })
    }

    fn append<'a>(
        &'a self,
        tool: &'a Tool,
        run: &'a str,
        record: &'a JournalRecord,
    ) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        Box::pin(async move { self.append_record(&tool.config.name, record, run).await })
    }

    fn wait<'a>(&'a self, tool: &'a Tool, run: &'a str, waiting: Waiting<'a>) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        Box::pin(self.write_waiting(tool, run, waiting))
    }

    fn settle<'a>(&'a self, tool: &'a Tool, run: &'a str, end: &'a EndRecord) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        Box::pin(Runs::settle(self, tool, run, end))
    }

    type Running<'a> = InProgress<'a>;

    fn running<'a>(&'a self, run: &str) -> InProgress<'a> {
        Runs::running(self, run)
    }

    fn principal(&self, run: &str) -> Option<String> {
        self.ledger.state().run(run).and_then(|entry| entry.principal.clone())
    }

    fn observe_action(&self, kind: &str, us: u64) {
        self.metrics.observe_action(kind, us);
    }

    fn lease_left_ms(&self) -> Option<u64> {
        let until = self.lease_lasts_until.get()?;
        Some(until.saturating_sub(self.env.clock.monotonic_ms()))
    }

    /// Read only on the path of a step the machine has no transition for: the owners listed.
    fn taken_by_another<'a>(&'a self, run: &'a str) -> LocalBoxFuture<'a, Option<String>> {
        Box::pin(async move {
            let target = self.records.store().filter(|_| self.lease_left_ms() == Some(0))?;
            let owners = crate::store::owners::listed(&self.env, target).await.ok()?;
            match owners.get(run) {
                Some(owner) if owner == crate::store::owners::me(target) => None,
                Some(owner) => Some(format!("instance `{owner}`")),
                None => Some("ended by another instance".to_string()),
            }
        })
    }

    /// Allowed while the lease, as last confirmed, outlasts the send and its margin; otherwise
    /// waited for one renewal (a third of the lease), and then refused: the action is not sent
    /// (the run hears why; if the lease is gone, the write of that fails on its fence).
    fn lease_allows<'a>(&'a self, send_ms: u64) -> LocalBoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let needed = send_ms.saturating_add(crate::limits::LEASE_SEND_MARGIN_MS);
            let left = || self.lease_left_ms();
            if left().is_none_or(|left| left >= needed) {
                return Ok(());
            }
            let lease_ms = self.catalog.manifest.server.store_lease_ms;
            self.env.clock.sleep(lease_ms / crate::store::lease::RENEWALS_PER_LEASE).await;
            match left() {
                Some(left) if left < needed => Err(format!(
                    "this instance's lease on the PostgreSQL store is sure for {left} ms more, too short to send an \
                     action that may take {send_ms} ms (and a margin of {} ms): nothing was sent",
                    crate::limits::LEASE_SEND_MARGIN_MS
                )),
                _ => Ok(()),
            }
        })
    }

    fn draining(&self) -> bool {
        self.is_draining()
    }

    fn cancel_requested(&self, run: &str) -> bool {
        Runs::cancel_requested(self, run)
    }

    fn log<'a>(
        &'a self,
        tool: &'a str,
        run: &'a str,
        action: Option<u64>,
        line: &'a str,
    ) -> LocalBoxFuture<'a, String> {
        Box::pin(self.keep_log_line_at(crate::env::Level::Info, LineOf { tool, run, action }, line))
    }

    fn notify(&self, tool: &Tool, run: &str) {
        let manifest = &self.catalog.manifest;
        let folder = crate::base::layout::folder_of(&manifest.path).to_path_buf();
        let owed = self.notifications_owed.enter();
        let waiting = self.records.reader(&tool.config.name, run, RecordKind::Waiting);
        crate::run::notify::spawn(&self.env, &manifest.server, &folder, run, Box::new(waiting), owed);
    }

    fn fitted_result(&self, op: u64, result: Value) -> Value {
        Runs::fitted_result(self, op, result)
    }

    fn fitted_end(&self, end: EndRecord) -> EndRecord {
        Runs::fitted_end(self, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_message_names_its_cause() {
        for cause in FatalCause::ALL {
            let fatal = Fatal { cause, message: "run ab12: something".into() };
            assert_eq!(FatalCause::of_exit(&fatal.to_string()), Some(cause), "{fatal}");
        }
        assert_eq!(FatalCause::of_exit("stdin closed"), None);
    }
}
