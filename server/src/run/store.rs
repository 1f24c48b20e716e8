//! The durable records of runs, behind one interface: the reserve and the release in the
//! ledger, the kept arguments and the journal, the waiting record, and the settle. `Runs` keeps them on disk; a
//! second store (PostgreSQL, for several instances sharing quotas and `once` keys) can come
//! later without touching the state machine (`machine.rs`) or its driver.

use serde_json::{Map, Value};

use crate::base::sync::MutexGuard;
use crate::catalog::Tool;
use crate::env::LocalBoxFuture;
use crate::run::runs::{Fatal, Runs, Waiting};
use crate::store::journal::{EndRecord, Journal, JournalRecord};
use crate::store::ledger::{Event, LedgerError};

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
}

impl RunStore for Runs {
    fn reserve<'a>(&'a self, held: MutexGuard<'a>, event: Event) -> LocalBoxFuture<'a, Result<(), LedgerError>> {
        assert!(matches!(event, Event::Reserve { .. }), "reserve appends reserve events only");
        Box::pin(self.ledger.append(held, event))
    }

    fn release<'a>(&'a self, tool: &'a str, run: &'a str) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        Box::pin(async move {
            let paths = self.files(tool, run);
            self.remove_if_present(&paths.inputs).await?;
            self.remove_if_present(&paths.journal).await?;
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
                .map_err(Fatal)?
                .ok_or_else(|| Fatal(format!("the journal of run {run} is missing")))
        })
    }

    fn append<'a>(
        &'a self,
        tool: &'a Tool,
        run: &'a str,
        record: &'a JournalRecord,
    ) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        Box::pin(async move { self.append_record(&self.files(&tool.config.name, run).journal, record, run).await })
    }

    fn wait<'a>(&'a self, tool: &'a Tool, run: &'a str, waiting: Waiting<'a>) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        Box::pin(self.write_waiting(tool, run, waiting))
    }

    fn settle<'a>(&'a self, tool: &'a Tool, run: &'a str, end: &'a EndRecord) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        Box::pin(Runs::settle(self, tool, run, end))
    }
}
