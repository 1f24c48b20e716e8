//! The ledger, `<journals>/server.ledger`: the authority on which runs exist and what they
//! hold (seed 000 section 6). One checksummed event a line: `reserve`, `settle`, `release`.
//!
//! `State` is the pure fold of the events (rebuilt at start, and after each append). The
//! `Ledger` writes events: each is appended and fsynced before anything depends on it. A
//! failed write or fsync poisons the ledger: nothing more is written (as fjall and
//! PostgreSQL do), and the server stops.
//!
//! Group commit: an event is written and applied to the state under the append lock, so the
//! next decision sees it; the lock is then released and the caller waits until an fsync
//! covers its event. While one fsync is in flight, other calls write their events; the next
//! fsync makes all of them durable at once, and each caller goes on when its own is. A
//! decision read from the state (a `once` key found, a quota refusal, a status, files to
//! delete) waits with `flush` until everything it read is durable. A crash in the middle of
//! a batch leaves whole lines and at most one torn tail, which the next start drops.

mod event;
mod state;

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::base::sync::{MutexGuard, Notify};
use crate::env::{Env, LedgerLine, OwnerChange, PostgresTarget};
use crate::store::record;

pub use event::{Event, MoneyRecord, OnceRecord};
pub use state::{duration_text, Counting, OnceLookup, QuotaLimit, QuotaRefusal, RunEntry, RunPhase, State};

pub const LEDGER_FILE: &str = "server.ledger";
pub const LEDGER_TEMP_FILE: &str = "server.ledger.tmp";

/// Why the ledger cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerError {
    /// A bad line that is not the torn tail, or events that break the one-reserve rule.
    Damaged { file: PathBuf, line: usize, problem: String },
    /// A write or fsync failed: the ledger is poisoned and the server must stop.
    Io { file: PathBuf, problem: String },
    /// The ledger was poisoned by an earlier failure.
    Poisoned,
    /// Another instance appended a reserve to the shared ledger since this reserve was decided:
    /// its lines are folded now, nothing was appended, and the caller decides again.
    Moved,
    /// The shared ledger could not be read or appended to, and nothing was written: the call
    /// waiting on it is answered, and the server goes on.
    Unreachable(String),
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerError::Damaged { file, line, problem } => {
                write!(f, "{}:{line}: the ledger is damaged: {problem}", file.display())
            }
            LedgerError::Io { file, problem } => {
                write!(f, "{}: {problem}; the ledger accepts no more writes", file.display())
            }
            LedgerError::Poisoned => write!(f, "the ledger accepts no more writes after an earlier write failed"),
            LedgerError::Moved => write!(f, "another instance admitted a call meanwhile; nothing was appended"),
            LedgerError::Unreachable(problem) => {
                write!(f, "the PostgreSQL store's ledger cannot be reached: {problem}; nothing was written")
            }
        }
    }
}

/// The ledger's state as it is on disk, read without its lock: beside a live server, whose
/// append may be mid-line, a torn last line is normal and dropped. No ledger: no runs.
pub async fn read_on_disk(env: &Env, journals: &Path) -> Result<State, String> {
    let file = journals.join(LEDGER_FILE);
    let bytes = match env.disk.exists(&file).await.map_err(|e| format!("{}: {e}", file.display()))? {
        true => env.disk.read(&file).await.map_err(|e| format!("{}: {e}", file.display()))?,
        false => Vec::new(),
    };
    parse(&file, &bytes).map(|(state, _)| state).map_err(|e| e.to_string())
}

/// Parses ledger bytes into state. A torn last line is dropped; any other damage is an error.
pub fn parse(file: &Path, bytes: &[u8]) -> Result<(State, record::Records<Event>), LedgerError> {
    let parsed = record::parse_file::<Event>(bytes).map_err(|damage| LedgerError::Damaged {
        file: file.to_path_buf(),
        line: damage.line,
        problem: damage.problem,
    })?;
    let mut state = State::default();
    for (index, event) in parsed.records.iter().enumerate() {
        state.apply(event).map_err(|problem| LedgerError::Damaged {
            file: file.to_path_buf(),
            line: index + 1,
            problem,
        })?;
    }
    Ok((state, parsed))
}

/// Marks an fsync in flight; ends the mark even if the leading task is dropped mid-fsync,
/// so its waiters take over instead of waiting forever.
struct Leading<'a> {
    ledger: &'a Ledger,
}

impl<'a> Leading<'a> {
    fn new(ledger: &'a Ledger) -> Leading<'a> {
        assert!(!ledger.syncing.replace(true), "one ledger fsync at a time");
        Leading { ledger }
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.ledger.syncing.set(false);
        self.ledger.committed.notify_all();
    }
}

/// The ledger file and its state, owned by the one server holding `server.lock`, or the
/// shared ledger of a PostgreSQL store (`shared`), owned by the one instance holding the
/// store's sole-instance lock.
pub struct Ledger {
    env: Env,
    dir: PathBuf,
    file: PathBuf,
    /// The lines go to the PostgreSQL store's shared ledger, not to `file`.
    shared: Option<Shared>,
    state: RefCell<State>,
    poisoned: Cell<bool>,
    /// Serialises decisions and writes: each event is in the state before the next is decided.
    lock: crate::base::sync::Mutex,
    /// Events written to the file so far, and how many of them an fsync has made durable.
    written: Cell<u64>,
    durable: Cell<u64>,
    /// The file was created by a write not yet covered by a directory fsync.
    dir_unsynced: Cell<bool>,
    /// The file is known to exist (nothing removes it), so an append need not look.
    file_exists: Cell<bool>,
    /// An fsync is in flight (its caller leads the next commit).
    syncing: Cell<bool>,
    /// Woken when an fsync ends, made events durable or failed.
    committed: Notify,
    /// How long each commit's fsync took, in seconds (the metric `warden_ledger_fsync_seconds`).
    pub fsync_seconds: prometheus_client::metrics::histogram::Histogram,
}

/// Where a shared ledger's lines go, and how many of them this instance has folded.
struct Shared {
    target: PostgresTarget,
    seen: Cell<u64>,
    /// The database's time the last exchange read (its caller keeps it in `database_clock`).
    database_now: Rc<Cell<Option<u64>>>,
    /// The database's time as last read, and this instance's monotonic time then: events are
    /// stamped by the database's clock, so instances whose clocks disagree agree on windows.
    database_clock: Cell<Option<(u64, u64)>>,
}

/// Whether a shared ledger's line is a reserve (a line that does not read back counts as one:
/// the fold names it).
fn is_reserve(line: &[u8]) -> bool {
    !matches!(record::decode::<Event>(line), Ok(Event::Settle { .. } | Event::Release { .. } | Event::Forget { .. }))
}

/// What the errors of a shared ledger name in place of a file.
pub const SHARED_LEDGER_NAME: &str = "the PostgreSQL store's ledger (warden_ledger)";

impl Ledger {
    /// Reads the shared ledger of the PostgreSQL store at `target` at start, every line
    /// folded (`store::shared`). Events are appended one transaction each, under the ledger's
    /// lock in this process; an append finds no line it has not folded, or another instance
    /// wrote to the store, and the append is refused before anything is written: a decision
    /// made on a state that was not the whole ledger is never committed.
    pub async fn open_shared(env: &Env, dir: &Path, target: PostgresTarget) -> Result<Ledger, LedgerError> {
        let name = PathBuf::from(SHARED_LEDGER_NAME);
        let folded =
            crate::store::shared::SharedLedger::open(env, target.clone()).await.map_err(|error| match error {
                crate::store::shared::SharedError::Damaged { seq, problem } => {
                    LedgerError::Damaged { file: name.clone(), line: seq as usize, problem }
                }
                database => LedgerError::Io { file: name.clone(), problem: format!("cannot read it: {database}") },
            })?;
        let (state, seen) = (folded.state().clone(), folded.seen());
        let mut ledger = Ledger::with_state(env, dir, name, state);
        ledger.shared = Some(Shared {
            target,
            seen: Cell::new(seen),
            database_now: Rc::default(),
            database_clock: Cell::new(None),
        });
        Ok(ledger)
    }

    /// Fences the shared ledger's appends by the serving instance's lease from now on
    /// (`store::lease`): registered once the ledger is read, so the lease is not spent on how
    /// long reading a long ledger took.
    pub fn fence(&mut self, fenced: PostgresTarget) {
        assert!(fenced.fence.is_some(), "a serving instance's ledger is fenced by its lease");
        let shared = self.shared.as_mut().expect("only a shared ledger is fenced");
        shared.target = fenced;
    }

    fn with_state(env: &Env, dir: &Path, file: PathBuf, state: State) -> Ledger {
        Ledger {
            env: env.clone(),
            dir: dir.to_path_buf(),
            file,
            shared: None,
            state: RefCell::new(state),
            poisoned: Cell::new(false),
            lock: crate::base::sync::Mutex::new(),
            written: Cell::new(0),
            durable: Cell::new(0),
            dir_unsynced: Cell::new(false),
            file_exists: Cell::new(true),
            syncing: Cell::new(false),
            committed: Notify::default(),
            fsync_seconds: prometheus_client::metrics::histogram::Histogram::new(crate::store::FSYNC_BUCKETS_SECONDS),
        }
    }

    /// Reads the ledger at start and rewrites it compacted (dropping a torn tail), so appends
    /// always follow an intact line.
    pub async fn open(env: &Env, dir: &Path) -> Result<Ledger, LedgerError> {
        let file = dir.join(LEDGER_FILE);
        let io = |problem: String| LedgerError::Io { file: file.clone(), problem };
        let exists = env.disk.exists(&file).await.map_err(|e| io(format!("cannot see the ledger: {e}")))?;
        let bytes = if exists {
            env.disk.read(&file).await.map_err(|e| io(format!("cannot read the ledger: {e}")))?
        } else {
            Vec::new()
        };
        let (state, parsed) = parse(&file, &bytes)?;
        if parsed.torn_tail_bytes > 0 {
            // Rewrite the intact prefix before anything is appended: an event written after
            // the fragment would share its line and read back as damage.
            let temp = dir.join(LEDGER_TEMP_FILE);
            let intact = bytes[..parsed.intact_len].to_vec();
            let repaired = async {
                env.disk.write(&temp, intact).await?;
                env.disk.fsync(&temp).await?;
                env.disk.rename(&temp, &file).await?;
                env.disk.fsync_dir(dir).await
            }
            .await;
            repaired.map_err(|e| io(format!("removing the torn last line failed: {e}")))?;
            env.log(&format!(
                "{}: discarded a torn last line ({} bytes) left by a crash during a write",
                file.display(),
                parsed.torn_tail_bytes
            ));
        }
        let ledger = Ledger::with_state(env, dir, file, state);
        ledger.file_exists.set(exists);
        Ok(ledger)
    }

    pub fn state(&self) -> std::cell::Ref<'_, State> {
        self.state.borrow()
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The time to stamp the next event with: never before the last event (a clock set back
    /// cannot shorten a window or reorder events).
    pub fn stamp(&self) -> u64 {
        let now = match self.shared.as_ref().and_then(|shared| shared.database_clock.get()) {
            // The database's time, as last read, moved on by this instance's monotonic clock.
            Some((database, at)) => database.saturating_add(self.env.clock.monotonic_ms().saturating_sub(at)),
            None => self.env.clock.now_ms(),
        };
        let last = self.state.borrow().last_at_ms;
        if now < last {
            self.env.log(&format!(
                "the clock ({now} ms) is behind the ledger ({last} ms); stamping events with the ledger's time"
            ));
        }
        now.max(last)
    }

    /// Takes the append lock: what is decided under it (a quota, a `once` key) cannot be
    /// raced by another call until its event is in the state (and the caller's answer waits
    /// for it to be durable).
    pub async fn lock(&self) -> crate::base::sync::MutexGuard<'_> {
        self.lock.lock().await
    }

    /// Appends one event durably: writes it and applies it to the state under the lock the
    /// caller holds, releases the lock, and returns once an fsync (shared with the events
    /// others write meanwhile) has made it durable.
    pub async fn append(&self, held: MutexGuard<'_>, event: Event) -> Result<(), LedgerError> {
        if self.poisoned.get() {
            return Err(LedgerError::Poisoned);
        }
        // A second reserve, settle or release for a run is a bug: refuse to commit it.
        if let Err(problem) = self.state.borrow().check(&event) {
            panic!("refusing to write a ledger event that breaks the one-reserve rule: {problem}");
        }
        if let Some(shared) = &self.shared {
            let appended = self.append_shared(shared, &event).await;
            drop(held);
            return appended;
        }
        let is_new = !self.file_exists.get() && !self.env.disk.exists(&self.file).await.unwrap_or(false);
        if let Err(e) = self.env.disk.append(&self.file, record::encode(&event)).await {
            self.poisoned.set(true);
            self.committed.notify_all();
            return Err(LedgerError::Io { file: self.file.clone(), problem: format!("appending failed: {e}") });
        }
        if is_new {
            self.dir_unsynced.set(true);
        }
        self.file_exists.set(true);
        self.state.borrow_mut().apply(&event).expect("checked before writing");
        assert!(self.state.borrow().holds(&event), "the ledger state does not hold the event just appended: {event:?}");
        let seq = self.written.get() + 1;
        self.written.set(seq);
        drop(held);
        self.durable_up_to(seq).await
    }

    /// One transaction appending `event` to the shared ledger, applied to the state once
    /// committed, so the state holds durable events only (and `flush` has nothing to wait for).
    /// Lines other instances appended since this one last read are folded first, in the same
    /// transaction: a settle or release goes after them (they never touch this instance's runs:
    /// a run is another's only once this instance's lease ended, and then the fence refuses the
    /// write), while a reserve, decided on the state without them, is appended only if there
    /// were none (`LedgerError::Moved` otherwise: its caller decides again).
    async fn append_shared(&self, shared: &Shared, event: &Event) -> Result<(), LedgerError> {
        let mut line = record::encode(event);
        assert_eq!(line.pop(), Some(b'\n'), "an encoded record ends its line");
        assert!(line.len() <= crate::env::LEDGER_LINE_BYTES_MAX, "a ledger line of {} bytes", line.len());
        let (owner, decided_on_state) = match event {
            Event::Reserve { run, .. } => (OwnerChange::Take(run.clone()), true),
            Event::Settle { run, .. } | Event::Release { run, .. } => (OwnerChange::End(run.clone()), false),
            // An ended run has no owner: any instance forgets its key.
            Event::Forget { .. } => (OwnerChange::Keep, false),
        };
        // Another instance's reserve on any page read since the decision overtakes it.
        let overtaken: Rc<Cell<bool>> = Rc::default();
        loop {
            let foreign: Rc<RefCell<Vec<LedgerLine>>> = Rc::default();
            let (told, line) = (Rc::clone(&foreign), line.clone());
            let (clock, seen_reserve) = (Rc::clone(&shared.database_now), Rc::clone(&overtaken));
            let decide: crate::env::Decide = Box::new(move |lines, now| {
                told.borrow_mut().extend_from_slice(lines);
                clock.set(now.or(clock.get()));
                // Only another reserve can change what a reserve decided (a settle or a release
                // frees quota and adds no key): a damaged line is taken for one.
                let reserves = decided_on_state && lines.iter().any(|line| is_reserve(&line.line));
                seen_reserve.set(seen_reserve.get() || reserves);
                now.filter(|_| !seen_reserve.get()).map(|_| line)
            });
            let after = shared.seen.get();
            let exchanged = self.env.state_db.ledger_exchange(&shared.target, after, owner.clone(), decide).await;
            let exchanged = match exchanged {
                Ok(exchanged) => exchanged,
                Err(failure) if failure.may_have_committed => {
                    return self.poison(format!("{} (the event may have been appended)", failure.message))
                }
                // Nothing was appended: a reserve's call is answered, an operator's forget is
                // told to try again, and the server goes on.
                Err(failure) if (decided_on_state || matches!(event, Event::Forget { .. })) && !failure.untrusted => {
                    return Err(LedgerError::Unreachable(failure.message))
                }
                Err(failure) => return self.poison(failure.message),
            };
            self.database_clock_read(shared);
            self.fold_foreign(shared, &foreign.borrow())?;
            let Some(seq) = exchanged.appended else {
                if exchanged.more {
                    continue;
                }
                assert!(decided_on_state, "a settle or release is appended once the whole ledger is read");
                return Err(LedgerError::Moved);
            };
            assert_eq!(seq, shared.seen.get() + 1, "an appended line follows the lines folded");
            shared.seen.set(seq);
            self.state.borrow_mut().apply(event).expect("another instance's lines never touch this instance's runs");
            self.written.set(self.written.get() + 1);
            self.durable.set(self.written.get());
            return Ok(());
        }
    }

    /// Folds the lines other instances appended to the shared ledger since this one last read
    /// (`catch_up` before a decision, and every append).
    fn fold_foreign(&self, shared: &Shared, lines: &[LedgerLine]) -> Result<(), LedgerError> {
        for LedgerLine { seq, line } in lines {
            let damaged =
                |problem: String| LedgerError::Damaged { file: self.file.clone(), line: *seq as usize, problem };
            if *seq != shared.seen.get() + 1 {
                self.poisoned.set(true);
                return Err(damaged(format!("it follows line {}: a line is missing", shared.seen.get())));
            }
            let event: Event = record::decode(line).map_err(|problem| {
                self.poisoned.set(true);
                damaged(problem)
            })?;
            self.state.borrow_mut().apply(&event).map_err(|problem| {
                self.poisoned.set(true);
                damaged(problem)
            })?;
            shared.seen.set(*seq);
        }
        Ok(())
    }

    /// The shared ledger's last line this instance has folded (`None` for a file).
    pub fn seen(&self) -> Option<u64> {
        self.shared.as_ref().map(|shared| shared.seen.get())
    }

    /// Folds every line other instances appended to the shared ledger since this one last read,
    /// so a decision made under the lock (a quota, a `once` key) sees them; nothing for a file.
    /// The caller holds the ledger's lock (`lock`): no append of this instance folds lines
    /// meanwhile.
    pub async fn catch_up(&self, _held: &MutexGuard<'_>) -> Result<(), LedgerError> {
        let Some(shared) = &self.shared else { return Ok(()) };
        if self.poisoned.get() {
            return Err(LedgerError::Poisoned);
        }
        loop {
            let read: Rc<RefCell<Vec<LedgerLine>>> = Rc::default();
            let (told, clock) = (Rc::clone(&read), Rc::clone(&shared.database_now));
            let decide: crate::env::Decide = Box::new(move |lines, now| {
                told.borrow_mut().extend_from_slice(lines);
                clock.set(now.or(clock.get()));
                None
            });
            let after = shared.seen.get();
            let exchanged = self.env.state_db.ledger_exchange(&shared.target, after, OwnerChange::Keep, decide).await;
            // Nothing was written: the decision waiting on it is answered, the server goes on
            // (unless the store holds what cannot be trusted: then it stops).
            let exchanged = match exchanged {
                Ok(exchanged) => exchanged,
                Err(failure) if failure.untrusted => return self.poison(failure.message),
                Err(failure) => return Err(LedgerError::Unreachable(failure.message)),
            };
            self.database_clock_read(shared);
            self.fold_foreign(shared, &read.borrow())?;
            if !exchanged.more {
                return Ok(());
            }
        }
    }

    /// Keeps the database's time an exchange read, with when this instance read it
    /// (`Clock::monotonic_ms`): the shared ledger's events are stamped by it (`stamp`).
    fn database_clock_read(&self, shared: &Shared) {
        if let Some(now) = shared.database_now.take() {
            shared.database_clock.set(Some((now, self.env.clock.monotonic_ms())));
        }
    }

    fn poison(&self, problem: String) -> Result<(), LedgerError> {
        self.poisoned.set(true);
        Err(LedgerError::Io { file: self.file.clone(), problem })
    }

    /// Returns once every event written so far is durable: a decision read from the state
    /// may depend on events other calls wrote and still wait for.
    pub async fn flush(&self) -> Result<(), LedgerError> {
        self.durable_up_to(self.written.get()).await
    }

    /// Waits until event `seq` is durable, leading an fsync when none is in flight.
    async fn durable_up_to(&self, seq: u64) -> Result<(), LedgerError> {
        loop {
            if self.durable.get() >= seq {
                return Ok(());
            }
            if self.poisoned.get() {
                return Err(LedgerError::Poisoned);
            }
            if self.syncing.get() {
                self.committed.changed().await;
                continue;
            }
            self.commit().await?;
        }
    }

    /// One fsync covering every event written so far (and the directory, for a new file).
    async fn commit(&self) -> Result<(), LedgerError> {
        let leading = Leading::new(self);
        let target = self.written.get();
        // Cleared only once the directory is durable: a leader dropped mid-fsync leaves it set.
        let new_file = self.dir_unsynced.get();
        let started_us = self.env.clock.monotonic_us();
        let span = tracing::info_span!(target: "warden", "ledger.fsync", events = target - self.durable.get());
        let synced = tracing::Instrument::instrument(
            async {
                self.env.disk.fsync(&self.file).await.map_err(|e| format!("fsync failed: {e}"))?;
                if new_file {
                    self.env
                        .disk
                        .fsync_dir(&self.dir)
                        .await
                        .map_err(|e| format!("fsync of the directory failed: {e}"))?;
                    self.dir_unsynced.set(false);
                }
                Ok::<(), String>(())
            },
            span,
        )
        .await;
        drop(leading);
        let took_us = self.env.clock.monotonic_us().saturating_sub(started_us);
        self.fsync_seconds.observe(took_us as f64 / 1e6);
        match synced {
            Ok(()) => {
                self.durable.set(self.durable.get().max(target));
                self.committed.notify_all();
                Ok(())
            }
            Err(problem) => {
                self.poisoned.set(true);
                self.committed.notify_all();
                Err(LedgerError::Io { file: self.file.clone(), problem })
            }
        }
    }

    /// Rewrites the ledger keeping only the runs `keep` selects: temporary file, fsync,
    /// rename over the old ledger, fsync of the directory. A crash leaves one or the other.
    /// When every run is kept, nothing is rewritten (a start does not pay for history).
    pub async fn compact(&self, keep: impl Fn(&RunEntry) -> bool) -> Result<usize, LedgerError> {
        if self.shared.is_some() {
            // Compaction of the shared ledger is not built (docs/DEFERRED.md): it grows.
            return Ok(0);
        }
        let held = self.lock().await;
        // The rename must not overtake an fsync of the old file in flight.
        self.flush().await?;
        if self.state.borrow().runs.values().all(&keep) {
            return Ok(0);
        }
        let (events, dropped) = self.state.borrow().compacted_events(&keep);
        let temp = self.dir.join(LEDGER_TEMP_FILE);
        let bytes: Vec<u8> = events.iter().flat_map(record::encode).collect();
        let written = async {
            self.env.disk.write(&temp, bytes).await.map_err(|e| format!("writing {} failed: {e}", temp.display()))?;
            self.env.disk.fsync(&temp).await.map_err(|e| format!("fsync of {} failed: {e}", temp.display()))?;
            self.env
                .disk
                .rename(&temp, &self.file)
                .await
                .map_err(|e| format!("renaming the compacted ledger failed: {e}"))?;
            self.env.disk.fsync_dir(&self.dir).await.map_err(|e| format!("fsync of the directory failed: {e}"))
        }
        .await;
        drop(held);
        if let Err(problem) = written {
            self.poisoned.set(true);
            return Err(LedgerError::Io { file: self.file.clone(), problem });
        }
        let mut state = State::default();
        for event in &events {
            state.apply(event).expect("compaction keeps whole runs");
        }
        state.last_at_ms = state.last_at_ms.max(self.state.borrow().last_at_ms);
        *self.state.borrow_mut() = state;
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event the fold refuses (a second reserve) is named by its line, as a line that
    /// fails its sum is (a mutant cargo-mutants found missed numbered it wrong).
    #[test]
    fn an_event_the_fold_refuses_is_named_by_its_line() {
        let reserve = event::test_reserve("a", 0);
        let mut bytes = record::encode(&reserve);
        bytes.extend(record::encode(&Event::Release { run: "a".into(), at_ms: 2 }));
        bytes.extend(record::encode(&reserve));
        let error = parse(Path::new("server.ledger"), &bytes).map(|_| ()).unwrap_err().to_string();
        assert!(error.starts_with("server.ledger:3: the ledger is damaged: a second reserve"), "{error}");
    }
}
