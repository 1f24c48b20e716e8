//! Durable runs: the steps of seed 000 section 7, each made durable before the next begins.
//!
//! | step | durable record                  |
//! |------|---------------------------------|
//! | 1    | `reserve` in the ledger          |
//! | 2    | `<run>.inputs.json`              |
//! | 3    | the journal's header             |
//! | 4    | the journal's records (prints, actions, end) |
//! | 5    | `waiting/<run>.json` (a stopped run) |
//! | 6    | `settle` in the ledger; then the inputs file is removed |
//! | 7    | the answer (nothing to record)   |
//!
//! Steps 1 and 6 are the ledger's (`ledger.rs`). This module owns the run's files and
//! writes them (steps 2 to 6, behind `store::RunStore`); what happens when is the state
//! machine's (`machine.rs`), carried out by `driver.rs`.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::base::json::{depth, sha256_hex};
use serde_json::{json, Map, Value};

use crate::base::layout::RunFiles;
use crate::base::sync::Signal;
use crate::broker::{scrub, scrub_value};
use crate::catalog::{Catalog, Tool};
use crate::env::{Env, Point, RecordKind};
use crate::limits::{RECORD_LINE_BYTES_MAX, VALUE_DEPTH_MAX};
use crate::program::FailureKind;
use crate::run::perform;
use crate::run::store::{Fatal, Waiting};
use crate::store::journal::{self, Binding, EndRecord, InputsRecord, Journal, JournalRecord};
use crate::store::ledger::{Event, Ledger, MoneyRecord};
use crate::store::record::{self};
use crate::store::records::RunRecords;

/// Everything durable the server owns while it holds `server.lock`.
pub struct Runs {
    pub env: Env,
    pub catalog: Rc<Catalog>,
    pub journals: PathBuf,
    pub ledger: Ledger,
    /// Where each run's kept arguments, journal and waiting record are (files or the database).
    pub records: RunRecords,
    /// Runs executing in this process now.
    /// (Counted: a takeover holds its runs in progress while it recovers them one by one, and
    /// each one's driver holds it again.)
    in_progress: RefCell<BTreeMap<String, u32>>,
    /// The journals of runs executing in this process, as read once from disk and then grown
    /// by each record once its append is durable: the driver reads a run's journal before
    /// every execution without going to disk. Dropped when the run stops executing.
    journals_executing: RefCell<BTreeMap<String, Journal>>,
    /// Runs this process started that have written no waiting record: settling one need not
    /// look for a record (a waiting record is written only by the process running the run).
    never_waited: RefCell<BTreeSet<String>>,
    /// Set when a durable write failed: the server stops serving.
    pub fatal: Signal,
    /// Set when the server stops (a signal, the end of stdin): no new run is admitted, and
    /// runs stop at their next point between actions (`run::drain`).
    draining: std::cell::Cell<bool>,
    /// Set when the drain begins: what waits on a client (a 2025-11-25 call asking it for
    /// input) stops waiting, so the drain is not held up by a person's answer.
    pub stopping: crate::base::sync::Signal,
    /// Drivers executing runs (and admissions holding a run): a drain waits for none left.
    pub executing: crate::base::sync::WaitGroup,
    /// Notify commands not yet delivered: an exiting server waits for them (`notify.rs`).
    pub notifications_owed: crate::base::sync::WaitGroup,
    fatal_message: RefCell<Option<String>>,
    /// On the PostgreSQL store: until when, on the monotonic clock, this instance's lease surely
    /// lasts, as last confirmed (the action rule, `RunStore::lease_allows`).
    pub lease_lasts_until: std::cell::Cell<Option<u64>>,
    /// Every secret value any grant can attach: scrubbed at every output boundary.
    pub secrets: Vec<String>,
    /// The callers listening to runs in progress (progress and log messages).
    pub listeners: crate::run::notice::Listeners,
    /// The runs waiting for their clients' input, and the key of their `requestState`s.
    pub inputs: crate::run::input::Inputs,
    /// What `/metrics` reports (`run::metrics`).
    pub metrics: crate::run::metrics::Metrics,
    /// Runs in progress whose client cancelled them (`tasks/cancel`): each ends at its next
    /// point between actions, as `cancelled`. At most the runs in progress; one leaves at its settle.
    cancelled: RefCell<BTreeSet<String>>,
}

/// The binding of a tool's current code: what a journal written now will carry.
pub fn binding(tool: &Tool) -> Binding {
    Binding {
        program: tool.program.hash.clone(),
        config: sha256_hex(tool.config.config_json.as_bytes()),
        version: crate::VERSION.to_string(),
    }
}

impl Runs {
    pub fn new(env: Env, catalog: Rc<Catalog>, ledger: Ledger, records: RunRecords) -> Runs {
        let journals = catalog.manifest.server.journals.clone();
        let mut secrets: Vec<String> =
            catalog.tools.iter().flat_map(|tool| perform::secret_values(&env, &tool.config.grants)).collect();
        if let Some(model) = &catalog.manifest.model {
            secrets.extend(env.process.var(&model.api_key_env).filter(|key| !key.is_empty()));
        }
        Runs {
            cancelled: RefCell::new(BTreeSet::new()),
            secrets,
            env,
            catalog,
            journals,
            ledger,
            records,
            in_progress: RefCell::new(BTreeMap::new()),
            lease_lasts_until: std::cell::Cell::new(None),
            journals_executing: RefCell::new(BTreeMap::new()),
            never_waited: RefCell::new(BTreeSet::new()),
            fatal: Signal::new(),
            draining: std::cell::Cell::new(false),
            stopping: crate::base::sync::Signal::new(),
            executing: crate::base::sync::WaitGroup::new(),
            notifications_owed: crate::base::sync::WaitGroup::new(),
            fatal_message: RefCell::new(None),
            listeners: Default::default(),
            inputs: Default::default(),
            metrics: Default::default(),
        }
    }

    pub fn files(&self, tool: &str, run: &str) -> RunFiles {
        RunFiles::new(&self.journals, tool, run)
    }

    pub fn is_in_progress(&self, run: &str) -> bool {
        self.in_progress.borrow().contains_key(run)
    }

    /// Records a fatal failure once; the connection stops reading when it sees it.
    pub fn stop(&self, fatal: &Fatal) {
        if self.fatal_message.borrow().is_none() {
            self.env.log_at(crate::env::Level::Error, &format!("stopping: {fatal}"), &[]);
            *self.fatal_message.borrow_mut() = Some(fatal.to_string());
        }
        self.fatal.set();
    }

    /// From now on no run is admitted and runs stop between actions; said once in the log.
    pub fn start_draining(&self, why: &str) {
        self.stopping.set();
        if !self.draining.replace(true) {
            let executing = self.runs_executing();
            let grace = crate::store::ledger::duration_text(self.catalog.manifest.server.shutdown_grace_ms);
            self.env.log(&format!(
                "stopping ({why}): no new calls are admitted; {executing} run(s) in progress stop at their next point \
                 between actions, within the grace of {grace}"
            ));
        }
    }

    /// How many runs execute in this process now.
    pub fn runs_executing(&self) -> usize {
        self.in_progress.borrow().len()
    }

    /// Whether the server stops: draining, or a shutdown signal came (during recovery,
    /// before the drain began, runs already stop between actions).
    pub fn is_draining(&self) -> bool {
        self.draining.get() || self.env.process.shutdown_signals() > 0
    }

    pub fn fatal_message(&self) -> Option<String> {
        self.fatal_message.borrow().clone()
    }

    /// A journal record as it is written: scrubbed of secrets in every form a reader decodes.
    fn encoded(&self, record: &JournalRecord) -> Vec<u8> {
        let value = serde_json::to_value(record).expect("records serialise");
        record::encode(&scrub_value(&value, &self.secrets))
    }

    /// Appends one record durably. The caller made it fit (`fitted_done`, `fitted_end`; the
    /// other records are bounded where their contents enter): a writer never writes a line
    /// its reader refuses, or recovery could never read the journal again.
    pub(crate) async fn append_record(&self, tool: &str, record: &JournalRecord, run: &str) -> Result<(), Fatal> {
        let value = scrub_value(&serde_json::to_value(record).expect("records serialise"), &self.secrets);
        assert!(
            crate::base::json::depth(&value) <= 2 * crate::limits::VALUE_DEPTH_MAX - 8,
            "run {run}: a journal record nested too deep"
        );
        let line = record::encode(&value);
        assert!(line.len() <= RECORD_LINE_BYTES_MAX, "run {run}: a journal record of {} bytes", line.len());
        // A file appends at its end; the database is told the line's place, which refuses a
        // second writer of the same place.
        let seq = match self.records.in_files_here() {
            true => 0,
            false => self.journal_lines(tool, run).await? + 1,
        };
        let span = tracing::info_span!(target: "warden", "journal.append", bytes = line.len());
        tracing::Instrument::instrument(self.records.append(tool, run, seq, line.clone()), span)
            .await
            .map_err(|e| Fatal::storage(format!("journaling a record of run {run} failed: {e}")))?;
        self.remember_record(run, &line);
        Ok(())
    }

    /// How many lines the run's journal holds (from memory while the run executes here).
    async fn journal_lines(&self, tool: &str, run: &str) -> Result<u64, Fatal> {
        if let Some(journal) = self.journals_executing.borrow().get(run) {
            return Ok(journal.records as u64);
        }
        let journal = self.read_journal(tool, run).await.map_err(Fatal::storage)?;
        Ok(journal.map_or(0, |journal| journal.records as u64))
    }

    /// Grows the journal kept in memory for an executing run by a record now durable, as
    /// read back (scrubbed). A record the reader would refuse drops the copy: the next read
    /// goes to disk and reports it.
    fn remember_record(&self, run: &str, line: &[u8]) {
        let mut executing = self.journals_executing.borrow_mut();
        let Some(journal) = executing.get_mut(run) else { return };
        let line_without_newline = line.strip_suffix(b"\n").unwrap_or(line);
        let applied = record::decode::<JournalRecord>(line_without_newline)
            .map_err(|problem| (0, problem))
            .and_then(|record| journal.apply(record));
        match applied {
            Ok(()) => journal.intact_len += line.len(),
            Err(_) => {
                executing.remove(run);
            }
        }
    }

    /// A run's journal for its driver: from memory while it executes here, else from disk
    /// (and kept in memory from then on, while it executes).
    pub(crate) async fn executing_journal(&self, tool: &str, run: &str) -> Result<Option<Journal>, String> {
        if let Some(journal) = self.journals_executing.borrow().get(run) {
            return Ok(Some(journal.clone()));
        }
        let journal = self.read_journal(tool, run).await?;
        if let Some(journal) = &journal {
            if self.is_in_progress(run) {
                self.journals_executing.borrow_mut().insert(run.to_string(), journal.clone());
            }
        }
        Ok(journal)
    }

    /// An action's result, fitting its done record in a journal line: a result too large to
    /// keep is replaced by an error saying so (the action happened; its answer is not kept).
    pub(crate) fn fitted_result(&self, op: u64, result: Value) -> Value {
        if crate::base::json::depth(&result) > crate::limits::VALUE_DEPTH_MAX {
            let error = format!(
                "the result of action {op} nests deeper than {} levels; the action happened but its result was \
                 not kept",
                crate::limits::VALUE_DEPTH_MAX
            );
            return json!({"status": result.get("status"), "error": error});
        }
        // Measured as the driver writes it: with the latest stamp there can be.
        let stamped = JournalRecord::Done { op, result: result.clone(), at_ms: Some(u64::MAX) };
        let size = self.encoded(&stamped).len();
        if size <= RECORD_LINE_BYTES_MAX {
            return result;
        }
        let error = format!(
            "the result of action {op} is {size} bytes as a journal record, over the limit of \
             {RECORD_LINE_BYTES_MAX}; the action happened but its result was not kept"
        );
        json!({"status": result.get("status"), "error": error})
    }

    /// A run's end record, fitting a journal line: a result or message too large to keep
    /// ends the run as `budget`, saying so.
    pub(crate) fn fitted_end(&self, end: EndRecord) -> EndRecord {
        let size = self.encoded(&JournalRecord::End(end.clone())).len();
        let shallow = end.result.as_ref().is_none_or(|result| depth(result) <= VALUE_DEPTH_MAX);
        if size <= RECORD_LINE_BYTES_MAX && shallow {
            return end;
        }
        let what = if end.result.is_some() { "result" } else { "failure message" };
        let why = match shallow {
            true => format!("is {size} bytes as a journal record, over the limit of {RECORD_LINE_BYTES_MAX}"),
            false => format!("nests deeper than {} levels", crate::limits::VALUE_DEPTH_MAX),
        };
        EndRecord {
            outcome: journal::RunOutcome::Failed(FailureKind::Budget),
            result: None,
            message: Some(format!("the run's {what} {why}; it was not kept")),
            usage: end.usage,
            at_ms: end.at_ms,
        }
    }

    /// Appends one line to the run's log (best effort: the log is for people, and the
    /// journal is the record). The caller does not hear it: lines for the operator name
    /// server paths, commands and service errors (see `log_run_at`).
    pub async fn log_run(&self, tool: &str, run: &str, line: &str) {
        self.log_run_at(tool, run, line, None).await;
    }

    /// `log_run`, and a caller listening at `level` (of `notice::LOG_LEVELS`) hears the line
    /// too: a program's prints (`info`), its run's start and end (`debug`).
    pub async fn log_run_at(&self, tool: &str, run: &str, line: &str, level: Option<usize>) {
        let line = self.keep_log_line(tool, run, line).await;
        if let Some(level) = level {
            self.listeners.tell(run, crate::run::notice::Notice::Log { level, text: line }).await;
        }
    }

    /// Writes one line of the run's log, scrubbed, to the server's log and the run's file;
    /// returns the line as written.
    pub(crate) async fn keep_log_line(&self, tool: &str, run: &str, line: &str) -> String {
        self.keep_log_line_at(crate::env::Level::Info, LineOf { tool, run, action: None }, line).await
    }

    /// `keep_log_line` at `level` in the server's log, with the fields of what it is about.
    pub(crate) async fn keep_log_line_at(&self, level: crate::env::Level, of: LineOf<'_>, line: &str) -> String {
        let line = scrub(line, &self.secrets);
        let principal = self.ledger.state().run(of.run).and_then(|entry| entry.principal.clone());
        let action = of.action.map(|op| op.to_string());
        self.env.log_at(level, &line, &of.fields(principal.as_deref(), action.as_deref()));
        let (tool, run) = (of.tool, of.run);
        let entry = json!({"at_ms": self.env.clock.now_ms(), "line": line});
        let mut bytes = serde_json::to_vec(&entry).expect("JSON values serialise");
        bytes.push(b'\n');
        // Logs stay files under the journals folder whichever store keeps the records: they
        // are for people, not recovery.
        if let Err(error) = self.append_log(tool, run, bytes).await {
            self.env.log(&format!("tool {tool} run {run}: writing the run's log failed: {error}"));
        }
        line
    }

    /// A line of a run's log, appended to its file (the directory made first when the
    /// records are not files beside it).
    async fn append_log(&self, tool: &str, run: &str, bytes: Vec<u8>) -> std::io::Result<()> {
        let log = self.files(tool, run).log;
        if !self.records.in_files_here() {
            self.env.disk.create_dir_all(log.parent().expect("logs live in directories")).await?;
        }
        self.env.disk.append(&log, bytes).await
    }

    /// Step 2 and 3: the kept arguments, then the journal's header, each durable.
    pub async fn start_files(&self, tool: &Tool, run: &str, inputs: &Map<String, Value>) -> Result<(), Fatal> {
        self.never_waited.borrow_mut().insert(run.to_string());
        let kept = record::encode(&InputsRecord { run: run.to_string(), inputs: inputs.clone() });
        (self.records.create(&tool.config.name, run, RecordKind::Inputs, kept).await)
            .map_err(|e| Fatal::storage(format!("keeping the arguments of run {run} failed: {e}")))?;
        self.env.reached(Point::InputsKept, run);
        self.write_header(tool, run, inputs).await?;
        self.env.reached(Point::JournalCreated, run);
        Ok(())
    }

    async fn write_header(&self, tool: &Tool, run: &str, inputs: &Map<String, Value>) -> Result<(), Fatal> {
        let header = JournalRecord::Header {
            run: run.to_string(),
            tool: tool.config.name.clone(),
            binding: binding(tool),
            inputs: sha256_hex(&serde_json::to_vec(inputs).expect("JSON values serialise")),
            at_ms: self.env.clock.now_ms(),
            // The ledger's reserve is the authority on whom the run is for; the header says it too.
            principal: self.ledger.state().run(run).and_then(|entry| entry.principal.clone()),
        };
        (self.records.create(&tool.config.name, run, RecordKind::Journal, record::encode(&header)).await)
            .map_err(|e| Fatal::storage(format!("creating the journal of run {run} failed: {e}")))
    }

    /// Reads a run's journal, if it exists.
    pub async fn read_journal(&self, tool: &str, run: &str) -> Result<Option<Journal>, String> {
        self.read_journal_telling(tool, run).await.map_err(|(_, problem)| problem)
    }

    /// `read_journal`, its error telling whether reading again may succeed (`true`: the
    /// record could not be read now) or not (`false`: it reads back damaged).
    pub async fn read_journal_telling(&self, tool: &str, run: &str) -> Result<Option<Journal>, (bool, String)> {
        let name = self.records.name(tool, run, RecordKind::Journal);
        match self.records.read(tool, run, RecordKind::Journal).await.map_err(|problem| (true, problem))? {
            Some(bytes) => Journal::parse(Path::new(&name), &bytes).map(Some).map_err(|problem| (false, problem)),
            None => Ok(None),
        }
    }

    pub async fn read_inputs(&self, tool: &str, run: &str) -> Result<Option<Map<String, Value>>, String> {
        let Some(bytes) = self.records.read(tool, run, RecordKind::Inputs).await? else {
            return Ok(None);
        };
        let line = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let name = || self.records.name(tool, run, RecordKind::Inputs);
        let kept: InputsRecord = record::decode(line).map_err(|e| format!("{}: {e}", name()))?;
        Ok(Some(kept.inputs))
    }

    /// Marks `run` as executing in this process until the guard drops.
    pub fn running(&self, run: &str) -> InProgress<'_> {
        *self.in_progress.borrow_mut().entry(run.to_string()).or_insert(0) += 1;
        InProgress { runs: self, run: run.to_string(), _executing: self.executing.enter() }
    }

    /// Step 5: the waiting record, durable; the run keeps its whole reservation.
    pub(crate) async fn write_waiting(&self, tool: &Tool, run: &str, waiting: Waiting<'_>) -> Result<(), Fatal> {
        let Waiting { op, action, reason, halted, arguments } = waiting;
        self.never_waited.borrow_mut().remove(run);
        let name = &tool.config.name;
        let journal = self.records.address(name, run);
        // By the manifest and the run's id: pasted from any directory, it finds the run.
        let manifest = crate::base::text::shell_word(&self.catalog.manifest.path.display().to_string());
        let command = match halted {
            true => format!("warden resolve {manifest} {run} --resume"),
            false => format!(
                "warden resolve {manifest} {run} --op {op} (--happened '{}' | --did-not-happen)",
                action.map_or_else(|| "<result json>".to_string(), crate::broker::resolution::example)
            ),
        };
        let command = match self.records.in_files_here() {
            true => command,
            false => format!(
                "{command} (while the server runs: a run kept in the PostgreSQL store is resolved through the \
                 running server's admin channel)"
            ),
        };
        // A record for the same stop is kept as first written; one for another stop (a
        // later action, or a halt) is replaced.
        let same = self.waiting_record(name, run).await?.is_some_and(|w| w.op == op && w.halted == halted);
        if !same {
            let arguments = Some(arguments_for_a_person(arguments));
            let grant = action.and_then(|action| tool.config.grants.get(&action.grant));
            let described = action.map(|action| crate::broker::shown::described(action, grant));
            let record = WaitingRecord {
                run: run.to_string(),
                tool: name.clone(),
                op,
                action: serde_json::to_value(action).expect("actions serialise"),
                reason: reason.to_string(),
                journal,
                resolve: command.clone(),
                at_ms: self.env.clock.now_ms(),
                halted,
                arguments,
                described,
            };
            let record = scrub_value(&serde_json::to_value(&record).expect("records serialise"), &self.secrets);
            (self.records.replace(name, run, RecordKind::Waiting, record::encode(&record)).await)
                .map_err(|e| Fatal::storage(format!("writing the waiting record of run {run} failed: {e}")))?;
        }
        self.env.reached(Point::WaitingRecorded, run);
        let line = format!("stopped, waiting for an operator: {reason}; resolve with: {command}");
        let of = LineOf { tool: name, run, action: action.map(|_| op) };
        self.keep_log_line_at(crate::env::Level::Warn, of, &line).await;
        Ok(())
    }

    /// Whether a run has a waiting record (it stopped for an operator).
    pub async fn has_waiting_record(&self, tool: &str, run: &str) -> Result<bool, String> {
        self.records.exists(tool, run, RecordKind::Waiting).await
    }

    /// A run's waiting record, if it has one.
    async fn waiting_record(&self, tool: &str, run: &str) -> Result<Option<WaitingRecord>, Fatal> {
        self.read_waiting(tool, run).await.map_err(Fatal::storage)
    }

    /// A run's waiting record, read and checked, if it has one.
    pub async fn read_waiting(&self, tool: &str, run: &str) -> Result<Option<WaitingRecord>, String> {
        WaitingRecord::read(&self.records, tool, run).await
    }

    /// Asks run `run`, executing in this process, to end at its next point between actions
    /// (its client cancelled it); false when it is not executing here.
    pub fn request_cancel(&self, run: &str) -> bool {
        if !self.is_in_progress(run) {
            return false;
        }
        self.cancelled.borrow_mut().insert(run.to_string());
        true
    }

    /// Whether the client of run `run` cancelled it.
    pub fn cancel_requested(&self, run: &str) -> bool {
        self.cancelled.borrow().contains(run)
    }

    /// Step 6: the settle event, then the kept arguments and any waiting record go.
    pub async fn settle(&self, tool: &Tool, run: &str, end: &EndRecord) -> Result<(), Fatal> {
        self.cancelled.borrow_mut().remove(run);
        // Settled only after the end is durable: a settle the journal does not explain would
        // be a run that charged without an outcome. (Checked where the journal is in memory.)
        if let Some(journal) = self.journals_executing.borrow().get(run) {
            assert!(journal.end.is_some(), "settling run {run}, whose end is not journaled");
        }
        {
            let held = self.ledger.lock().await;
            let open = self.ledger.state().run(run).is_some_and(|entry| entry.is_open());
            if open {
                let at_ms = self.ledger.stamp();
                let charged = charged_of(&end.usage);
                let tokens = tokens_of(&end.usage);
                let outcome = end.outcome;
                let event = Event::Settle { run: run.to_string(), at_ms, charged, outcome, tokens };
                let reserved_at_ms = self.ledger.state().run(run).map_or(at_ms, |entry| entry.reserved_at_ms);
                self.ledger.append(held, event).await?;
                self.metrics.observe_run(&tool.config.name, at_ms.saturating_sub(reserved_at_ms));
                self.env.reached(Point::Settled, run);
            } else {
                // Settled already, perhaps by an event still waiting for its fsync.
                drop(held);
                self.ledger.flush().await?;
            }
        }
        // The kept arguments are not waited on: a removal a crash undoes is redone by
        // recovery (the CleanUp cell), and retention fsyncs their directory before compaction
        // can drop the run. A waiting record's removal is waited on: nothing else fsyncs the
        // waiting directory, and one that came back after the run left the ledger would be
        // "files of a run with no reservation", refused at every start.
        let name = &tool.config.name;
        self.remove_record(name, run, RecordKind::Inputs, false).await?;
        if !self.never_waited.borrow_mut().remove(run) {
            self.remove_record(name, run, RecordKind::Waiting, true).await?;
        }
        let settled = format!("settled ({})", end.outcome);
        self.log_run_at(&tool.config.name, run, &settled, Some(crate::run::notice::DEBUG)).await;
        Ok(())
    }

    /// Removes a run's record if it has one; `durably` as `RunRecords::remove` says (settle
    /// does not wait for its inputs' removal: recovery's CleanUp cell redoes it).
    pub async fn remove_record(&self, tool: &str, run: &str, kind: RecordKind, durably: bool) -> Result<(), Fatal> {
        self.records.remove(tool, run, kind, durably).await.map(|_| ()).map_err(Fatal::storage)
    }

    /// Removes a file that may exist, durably (its directory is fsynced).
    pub async fn remove_if_present(&self, path: &Path) -> Result<(), Fatal> {
        let removed = crate::store::files::remove_if_present(&self.env, path).await;
        if removed.map_err(|e| Fatal::storage(format!("removing {} failed: {e}", path.display())))? {
            let dir = path.parent().expect("files live in directories");
            self.env
                .disk
                .fsync_dir(dir)
                .await
                .map_err(|e| Fatal::storage(format!("fsync of {} failed: {e}", dir.display())))?;
        }
        Ok(())
    }

    /// Rewrites a journal without its torn tail (`RunRecords::cut_torn_tail`).
    pub async fn drop_torn_tail(&self, tool: &str, run: &str, intact_len: usize) -> Result<(), Fatal> {
        self.records.cut_torn_tail(tool, run, intact_len).await.map_err(Fatal::storage)
    }

    /// Writes the header of a journal whose header was torn away by a crash (step 3 again).
    pub async fn rewrite_header(&self, tool: &Tool, run: &str, inputs: &Map<String, Value>) -> Result<(), Fatal> {
        self.write_header(tool, run, inputs).await
    }
}

/// The waiting record of a run stopped in doubt (`waiting/<run>.json`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WaitingRecord {
    pub run: String,
    pub tool: String,
    pub op: u64,
    pub action: Value,
    pub reason: String,
    pub journal: String,
    pub resolve: String,
    pub at_ms: u64,
    /// Waiting for `warden resolve --resume` (the run was halted), not for an action's verdict.
    #[serde(default)]
    pub halted: bool,
    /// The run's arguments, for the person deciding (scrubbed with the rest of the record);
    /// absent in records written before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The action shown whole (`operator::in_doubt::described`: its full target, amount,
    /// idempotency key); absent for a halted run and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub described: Option<Value>,
}

impl WaitingRecord {
    /// The record a waiting record's bytes hold (its one line, with or without its newline).
    pub fn decode(bytes: &[u8]) -> Result<WaitingRecord, String> {
        record::decode(bytes.strip_suffix(b"\n").unwrap_or(bytes))
    }

    /// A run's waiting record where `records` keeps it, read and checked, if it has one.
    pub async fn read(records: &RunRecords, tool: &str, run: &str) -> Result<Option<WaitingRecord>, String> {
        let Some(bytes) = records.read(tool, run, RecordKind::Waiting).await? else {
            return Ok(None);
        };
        let name = || records.name(tool, run, RecordKind::Waiting);
        WaitingRecord::decode(&bytes).map(Some).map_err(|e| format!("{}: {e}", name()))
    }
}

/// Reads a run's waiting record from its file (`warden resolve` with the server stopped).
pub async fn read_waiting(env: &Env, path: &Path) -> Result<WaitingRecord, String> {
    let bytes = env.disk.read(path).await.map_err(|e| format!("{}: {e}", path.display()))?;
    WaitingRecord::decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// A run's arguments as its waiting record keeps them: whole within
/// `WAITING_ARGUMENTS_BYTES_MAX`, else left out saying so (the record stays a line its
/// reader takes, however large the call was).
fn arguments_for_a_person(arguments: &Map<String, Value>) -> Value {
    let bytes = serde_json::to_vec(arguments).map_or(usize::MAX, |bytes| bytes.len());
    if bytes <= crate::limits::WAITING_ARGUMENTS_BYTES_MAX {
        return Value::Object(arguments.clone());
    }
    json!({"left_out": format!(
        "the arguments take {bytes} bytes, over the {} shown here; `warden runs show --json` reads the run's",
        crate::limits::WAITING_ARGUMENTS_BYTES_MAX
    )})
}

/// Model output tokens a run used, summed from its usage.
fn tokens_of(usage: &Value) -> u64 {
    (usage.as_object().into_iter().flat_map(|o| o.values()))
        .filter_map(|grant| grant.get("output_tokens").and_then(Value::as_u64))
        .fold(0, u64::saturating_add)
}

/// Money actually charged, summed per currency from a run's usage.
fn charged_of(usage: &Value) -> Vec<MoneyRecord> {
    let mut by_currency: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for grant in usage.as_object().into_iter().flat_map(|o| o.values()) {
        for charge in grant.get("charged").and_then(Value::as_array).into_iter().flatten() {
            let money = charge
                .get("amount")
                .and_then(Value::as_str)
                .zip(charge.get("currency").and_then(Value::as_str))
                .and_then(|(a, c)| crate::base::money::Money::parse(a, c).ok());
            if let Some(money) = money {
                *by_currency.entry(money.currency).or_insert(0) += money.minor;
            }
        }
    }
    by_currency
        .into_iter()
        .map(|(currency, minor)| MoneyRecord::from(&crate::base::money::Money { minor, currency }))
        .collect()
}

/// A run executing in this process (see `Runs::running`).
pub struct InProgress<'a> {
    runs: &'a Runs,
    run: String,
    _executing: crate::base::sync::WaitGroupGuard,
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        let mut in_progress = self.runs.in_progress.borrow_mut();
        let held = in_progress.get_mut(&self.run).expect("a run in progress is counted");
        *held -= 1;
        if *held == 0 {
            in_progress.remove(&self.run);
            self.runs.journals_executing.borrow_mut().remove(&self.run);
        }
    }
}

/// What a line of a run's log is about: its tool, its run, and the action, if any.
#[derive(Clone, Copy, Debug)]
pub struct LineOf<'a> {
    pub tool: &'a str,
    pub run: &'a str,
    pub action: Option<u64>,
}

impl<'a> LineOf<'a> {
    /// The line's fields in the server's log: tool, run, and principal and action where known.
    pub fn fields(self, principal: Option<&'a str>, action: Option<&'a str>) -> Vec<(&'static str, &'a str)> {
        let mut fields = vec![("tool", self.tool), ("run", self.run)];
        fields.extend(principal.map(|principal| ("principal", principal)));
        fields.extend(action.map(|action| ("action", action)));
        fields
    }
}

#[cfg(test)]
mod tests {
    /// A waiting record is read back whatever the call's size: arguments past
    /// `WAITING_ARGUMENTS_BYTES_MAX` are left out of it, saying so.
    #[test]
    fn a_waiting_record_keeps_arguments_within_its_bound() {
        let small = serde_json::json!({"order": "pi_1"}).as_object().unwrap().clone();
        assert_eq!(super::arguments_for_a_person(&small), serde_json::Value::Object(small.clone()));
        let text = "x".repeat(crate::limits::WAITING_ARGUMENTS_BYTES_MAX);
        let large = serde_json::json!({ "note": text }).as_object().unwrap().clone();
        let kept = super::arguments_for_a_person(&large);
        assert!(kept["left_out"].as_str().unwrap().contains("bytes"), "{kept}");
    }
}
