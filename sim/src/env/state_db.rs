//! The simulated shared state database (issue 28): each `StateDb` operation's meaning, modelled
//! over memory. Each is done whole when called, so it is atomic, as a real transaction holding
//! its advisory lock is; its caller resumes after other tasks had a turn. The database outlives
//! every server instance of a world, as PostgreSQL outlives the processes using it, and keeps
//! its own clock: the world's time, with none of an instance's skew or drift.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use warden::base::layout::RunFiles;
use warden::store::ledger::{Event, LEDGER_FILE};

use warden::env::{
    DbFailure, Decide, Exchanged, Fence, HoldLost, Lease, LedgerLine, LocalBoxFuture, Migration, OwnerChange,
    PostgresTarget, RecordKind, RecordWrite, SlotHold, StateDb, INSTANCES_LISTED_MAX, INSTANCE_NAME_BYTES_MAX,
    INSTANCE_SLOTS_MAX, LEDGER_LINE_BYTES_MAX, LEDGER_PAGE_LINES, RECORD_RUNS_PAGE, RUN_ID_BYTES_MAX,
    STATE_SCHEMA_VERSION,
};
use warden::limits::RECORD_LINE_BYTES_MAX;

use crate::env::clock::{SimClock, EPOCH_MS};
use crate::env::disk::Overlay;

/// The database itself, shared by every instance of a world.
pub struct SharedDb {
    clock: Rc<SimClock>,
    schema: Cell<u32>,
    lines: RefCell<Vec<Vec<u8>>>,
    /// Instance name -> (epoch, lease's end in the database's ms).
    instances: RefCell<std::collections::BTreeMap<String, (u64, u64)>>,
    /// Where the lease of each epoch a later registration replaced would have ended (a new
    /// start in the slot waits it out before taking the runs up): the lease witness's record.
    replaced: RefCell<BTreeMap<(String, u64), u64>>,
    /// The (instance, epoch) pairs whose runs another instance took over: a write of theirs
    /// refused is the window of a stalled instance waking (`coverage::TAKEOVER_WINDOWS`).
    taken: RefCell<BTreeSet<(String, u64)>>,
    /// Runs' records: (run, kind) -> line number -> line.
    records: RefCell<BTreeMap<(String, RecordKind), BTreeMap<u64, Vec<u8>>>>,
    /// Each slot's holder (`hold_slot`); a hold gives its slot up only if it is still its own
    /// (a restart may have handed it to another since).
    slots: RefCell<BTreeMap<u32, u64>>,
    holds: Cell<u64>,
    /// Woken when a slot's holder loses it to a restart.
    slot_wakers: RefCell<BTreeMap<u32, std::task::Waker>>,
    /// Each open run's owner (`warden_owners`).
    owners: RefCell<BTreeMap<String, String>>,
    /// A fault: the database restarts before the next operation, which is refused: every
    /// connection ends, the sole-instance lock's included.
    pub restart_next: Cell<bool>,
    /// Counts every change (a line appended, a record written or removed): the checker's
    /// view of the store as files is rendered again only after one.
    changes: Cell<u64>,
    /// What each removed record held, oldest first (the checker's `unlinked`).
    removed: RefCell<BTreeMap<(String, RecordKind), Vec<Vec<u8>>>>,
    /// A fault: connections are refused (the database is down or partitioned away).
    pub unreachable: Cell<bool>,
    /// A fault: the next appending exchanges and record writes commit, but their COMMIT's
    /// answer is lost (the connection breaks on its way back): their caller hears "may have
    /// committed".
    pub lose_commit_answers: Cell<u32>,
    /// A fault: the next writes are rolled back (their COMMIT never arrived), and their caller
    /// hears "may have committed" all the same: the doubt that did not commit.
    pub lose_commits: Cell<u32>,
    /// Writes that came without a lease's fence (`Fence`): the checker's witness that every
    /// write a serving instance makes is fenced (none is, by the real store, when it is not).
    pub unfenced_writes: Cell<u64>,
    /// Writes a service received while instances were registered and none held its lease:
    /// the checker's witness of the action rule (an instance sends nothing it might no longer
    /// own).
    pub sends_without_a_lease: Cell<u64>,
    /// A fault: the next operations are refused (the database down or away for a moment).
    pub refuse_next: Cell<u32>,
    /// Store faults that fired, by kind (the fault accounting's witness).
    pub injected: RefCell<BTreeMap<&'static str, u64>>,
}

impl SharedDb {
    pub fn new(clock: Rc<SimClock>) -> Rc<SharedDb> {
        Rc::new(SharedDb {
            clock,
            schema: Cell::new(0),
            lines: RefCell::default(),
            instances: RefCell::default(),
            replaced: RefCell::default(),
            taken: RefCell::default(),
            records: RefCell::default(),
            slots: RefCell::default(),
            holds: Cell::new(0),
            slot_wakers: RefCell::default(),
            owners: RefCell::default(),
            restart_next: Cell::new(false),
            changes: Cell::new(0),
            removed: RefCell::default(),
            unreachable: Cell::new(false),
            lose_commit_answers: Cell::new(0),
            lose_commits: Cell::new(0),
            unfenced_writes: Cell::new(0),
            sends_without_a_lease: Cell::new(0),
            refuse_next: Cell::new(0),
            injected: RefCell::default(),
        })
    }

    /// The schema's version (0: none yet).
    pub fn schema(&self) -> u32 {
        self.schema.get()
    }

    /// Sets the schema's version, as a newer Warden's migration would have (for tests).
    pub fn set_schema(&self, version: u32) {
        self.schema.set(version);
    }

    /// Whether the registration `(name, epoch)` holds its lease now (the current epoch of its
    /// name, unexpired by the database's clock).
    pub fn holds_lease(&self, (name, epoch): &(String, u64)) -> bool {
        let now = self.now();
        matches!(self.instances.borrow().get(name), Some((held, until)) if held == epoch && *until > now)
    }

    /// The instance owning open run `run` (`warden_owners`), if any.
    pub fn owner_of(&self, run: &str) -> Option<String> {
        self.owners.borrow().get(run).cloned()
    }

    /// Every line of the ledger, in order (the checker's view).
    pub fn ledger(&self) -> Vec<Vec<u8>> {
        self.lines.borrow().clone()
    }

    fn reachable(&self) -> Result<(), DbFailure> {
        if self.restart_next.replace(false) {
            self.count("the store restarts");
            self.slots.borrow_mut().clear();
            for (_, waker) in std::mem::take(&mut *self.slot_wakers.borrow_mut()) {
                waker.wake();
            }
            return Err(DbFailure::rolled_back(
                "PostgreSQL: terminating connection due to administrator command (simulated restart)",
            ));
        }
        let refused = self.refuse_next.get() > 0;
        if refused {
            self.refuse_next.set(self.refuse_next.get() - 1);
            self.count("the store refuses connections");
        }
        match self.unreachable.get() || refused {
            true => Err(DbFailure::rolled_back("PostgreSQL: connection refused (simulated)")),
            false => Ok(()),
        }
    }

    fn count(&self, kind: &'static str) {
        *self.injected.borrow_mut().entry(kind).or_insert(0) += 1;
    }

    /// Whether this write's COMMIT answer is lost (it committed).
    fn commit_answer_lost(&self) -> bool {
        let lost = self.lose_commit_answers.get() > 0;
        if lost {
            self.lose_commit_answers.set(self.lose_commit_answers.get() - 1);
            self.count("a COMMIT's answer lost");
        }
        lost
    }

    /// Whether this write's COMMIT is lost on its way (it is rolled back, and its caller
    /// told it may have committed).
    fn commit_lost(&self) -> Result<(), DbFailure> {
        if self.lose_commits.get() == 0 {
            return Ok(());
        }
        self.lose_commits.set(self.lose_commits.get() - 1);
        self.count("a COMMIT lost on its way");
        Err(in_doubt())
    }

    /// As the real store, in the write's transaction: refused unless the writer still holds
    /// its lease at its epoch by the database's clock. A write without a fence is counted.
    fn fenced(&self, fence: Option<&Fence>) -> Result<(), DbFailure> {
        let Some(fence) = fence else {
            self.unfenced_writes.set(self.unfenced_writes.get() + 1);
            return Ok(());
        };
        let now = self.now();
        match self.instances.borrow().get(&fence.instance) {
            Some((epoch, until)) if *epoch == fence.epoch && *until > now => Ok(()),
            _ => {
                self.count("a write refused by its fence");
                if self.taken.borrow().contains(&(fence.instance.clone(), fence.epoch)) {
                    self.count("a write refused after its runs were taken over");
                }
                Err(DbFailure::rolled_back(fence.refusal()))
            }
        }
    }

    fn migrate(&self) -> Result<Migration, DbFailure> {
        self.reachable()?;
        let found = self.schema.get();
        if found > STATE_SCHEMA_VERSION {
            return Err(DbFailure::rolled_back(format!(
                "the database's Warden schema is version {found}, newer than this warden's ({STATE_SCHEMA_VERSION})"
            )));
        }
        self.schema.set(STATE_SCHEMA_VERSION);
        Ok(Migration { found, now: STATE_SCHEMA_VERSION })
    }

    fn exchange(
        &self,
        fence: Option<&Fence>,
        after: u64,
        owner: OwnerChange,
        decide: Decide,
    ) -> Result<Exchanged, DbFailure> {
        self.reachable()?;
        if self.schema.get() == 0 {
            return Err(DbFailure::rolled_back("PostgreSQL: relation \"warden_ledger\" does not exist"));
        }
        let last = self.lines.borrow().len() as u64;
        if last < after {
            return Err(DbFailure::untrusted(format!(
                "the shared ledger ends at line {last}, before line {after} this instance has read: was the database restored from an older copy?"
            )));
        }
        let end = last.min(after + LEDGER_PAGE_LINES);
        let page: Vec<LedgerLine> = (after..end)
            .map(|index| LedgerLine { seq: index + 1, line: self.lines.borrow()[index as usize].clone() })
            .collect();
        let more = end < last;
        let now = (!more).then(|| EPOCH_MS + self.clock.now());
        let Some(line) = decide(&page, now) else {
            return Ok(Exchanged { appended: None, seen: end, more });
        };
        assert!(!more, "a line appended without the whole ledger read");
        if line.len() > LEDGER_LINE_BYTES_MAX {
            return Err(DbFailure::rolled_back(format!("a ledger line of {} bytes", line.len())));
        }
        if matches!(owner, OwnerChange::Take(_)) && fence.is_none() {
            return Err(DbFailure::rolled_back("a run taken by an instance without a lease"));
        }
        if let OwnerChange::Take(run) = &owner {
            if self.owners.borrow().contains_key(run) {
                return Err(DbFailure::rolled_back(format!("PostgreSQL: run {run} has an owner already (simulated)")));
            }
        }
        self.fenced(fence)?;
        self.commit_lost()?;
        self.lines.borrow_mut().push(line);
        match owner {
            OwnerChange::Keep => {}
            OwnerChange::Take(run) => {
                let instance = fence.expect("checked above").instance.clone();
                self.owners.borrow_mut().insert(run, instance);
            }
            OwnerChange::End(run) => {
                self.owners.borrow_mut().remove(&run);
            }
        }
        self.changed();
        if self.commit_answer_lost() {
            return Err(in_doubt());
        }
        Ok(Exchanged { appended: Some(end + 1), seen: end + 1, more: false })
    }
}

impl SharedDb {
    /// The database's own time (UTC ms).
    fn now(&self) -> u64 {
        EPOCH_MS + self.clock.now()
    }

    fn with_schema(&self, version: u32) -> Result<(), DbFailure> {
        self.reachable()?;
        match self.schema.get() >= version {
            true => Ok(()),
            false => Err(DbFailure::rolled_back(format!(
                "PostgreSQL: a relation of schema version {version} does not exist (simulated)"
            ))),
        }
    }

    fn register(&self, instance: &str, lease_ms: u64) -> Result<Lease, DbFailure> {
        self.with_schema(2)?;
        if !(1..=INSTANCE_NAME_BYTES_MAX).contains(&instance.len()) {
            return Err(DbFailure::rolled_back(format!("an instance name of {} bytes", instance.len())));
        }
        let now = self.now();
        let mut instances = self.instances.borrow_mut();
        let (epoch, replaced_remaining_ms) =
            instances.get(instance).map_or((1, 0), |(epoch, until)| (epoch + 1, until.saturating_sub(now)));
        if let Some((replaced, until)) = instances.get(instance) {
            self.replaced.borrow_mut().insert((instance.to_string(), *replaced), *until);
        }
        instances.insert(instance.to_string(), (epoch, now + lease_ms));
        Ok(Lease { epoch, remaining_ms: lease_ms, replaced_remaining_ms })
    }

    fn renew(&self, instance: &str, epoch: u64, lease_ms: u64) -> Result<Option<Lease>, DbFailure> {
        self.with_schema(2)?;
        let now = self.now();
        let mut instances = self.instances.borrow_mut();
        Ok(match instances.get_mut(instance) {
            Some((held, until)) if *held == epoch && *until > now => {
                *until = now + lease_ms;
                Some(Lease { epoch, remaining_ms: lease_ms, replaced_remaining_ms: 0 })
            }
            _ => None,
        })
    }

    fn expired(&self) -> Result<Vec<(String, u64)>, DbFailure> {
        self.with_schema(2)?;
        let now = self.now();
        let instances = self.instances.borrow();
        let dead = instances.iter().filter(|(_, (_, until))| *until <= now);
        Ok(dead.take(64).map(|(name, (epoch, _))| (name.clone(), *epoch)).collect())
    }

    /// A service received a write from the instance registered as `sender` (its name and
    /// epoch): counted unless that registration's lease still runs now (held, or replaced by a
    /// later start that waits it out). A sender not (yet) registered is counted when instances
    /// are registered and none holds its lease.
    pub fn note_a_write_sent(&self, sender: Option<&(String, u64)>) {
        let now = self.now();
        let instances = self.instances.borrow();
        let without = match sender {
            Some((name, epoch)) => {
                let current = instances.get(name).filter(|(held, _)| held == epoch).map(|(_, until)| *until);
                let until = current.or_else(|| self.replaced.borrow().get(&(name.clone(), *epoch)).copied());
                until.is_none_or(|until| until <= now)
            }
            None => !instances.is_empty() && instances.values().all(|(_, until)| *until <= now),
        };
        if without {
            self.sends_without_a_lease.set(self.sends_without_a_lease.get() + 1);
        }
    }

    fn instances_listed(&self) -> Result<Vec<(String, Lease)>, DbFailure> {
        self.with_schema(2)?;
        let now = self.now();
        let instances = self.instances.borrow();
        let listed = instances.iter().take(INSTANCES_LISTED_MAX).map(|(name, (epoch, until))| {
            (name.clone(), Lease { epoch: *epoch, remaining_ms: until.saturating_sub(now), replaced_remaining_ms: 0 })
        });
        Ok(listed.collect())
    }

    fn owners_after(&self, after: &str) -> Result<Vec<(String, String)>, DbFailure> {
        self.with_schema(5)?;
        let owners = self.owners.borrow();
        let page = owners.range::<str, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded));
        Ok(page.take(RECORD_RUNS_PAGE).map(|(run, instance)| (run.clone(), instance.clone())).collect())
    }

    /// As the real store: an ownerless run made the fenced instance's, in a fenced write, only
    /// if the ledger still ends at line `after` (`None` otherwise).
    fn claim(&self, fence: Option<&Fence>, run: &str, after: u64) -> Result<Option<bool>, DbFailure> {
        self.with_schema(5)?;
        Self::checked_run(run)?;
        let fence = fence.ok_or_else(|| DbFailure::rolled_back("a run claimed by an instance without a lease"))?;
        if self.lines.borrow().len() as u64 > after {
            return Ok(None);
        }
        self.fenced(Some(fence))?;
        self.commit_lost()?;
        let owned = {
            let mut owners = self.owners.borrow_mut();
            *owners.entry(run.to_string()).or_insert_with(|| fence.instance.clone()) == fence.instance
        };
        match self.commit_answer_lost() {
            true => Err(in_doubt()),
            false => Ok(Some(owned)),
        }
    }

    /// As the real store: the runs of an instance whose lease ended at `epoch`, a page of them,
    /// made the fenced instance's (atomic: no write of the ended epoch is in flight here).
    fn take_over(&self, fence: Option<&Fence>, instance: &str, epoch: u64) -> Result<Option<Vec<String>>, DbFailure> {
        self.with_schema(5)?;
        let fence = fence.ok_or_else(|| DbFailure::rolled_back("a takeover by an instance without a lease"))?;
        let now = self.now();
        let ended = matches!(self.instances.borrow().get(instance), Some((at, until)) if *at == epoch && *until <= now);
        if !ended {
            return Ok(None);
        }
        self.fenced(Some(fence))?;
        self.commit_lost()?;
        let mut owners = self.owners.borrow_mut();
        let theirs: Vec<String> = owners
            .iter()
            .filter(|(_, owner)| *owner == instance)
            .map(|(run, _)| run.clone())
            .take(RECORD_RUNS_PAGE)
            .collect();
        for run in &theirs {
            owners.insert(run.clone(), fence.instance.clone());
        }
        drop(owners);
        if !theirs.is_empty() {
            self.taken.borrow_mut().insert((instance.to_string(), epoch));
        }
        for _ in theirs.iter().filter(|run| self.action_begun(run)) {
            self.count("a run taken over with an action begun");
        }
        match self.commit_answer_lost() {
            true => Err(in_doubt()),
            false => Ok(Some(theirs)),
        }
    }
}

impl SharedDb {
    /// Whether run `run`'s journal ends with an action begun and not done (restarts noted
    /// after it aside): the window a takeover must decide as recovery does.
    fn action_begun(&self, run: &str) -> bool {
        let records = self.records.borrow();
        let Some(lines) = records.get(&(run.to_string(), RecordKind::Journal)) else { return false };
        let tags = lines.values().rev().map(|line| crate::env::oracle::record_tag(line));
        let mut tags = tags.skip_while(|tag| matches!(tag, Some("resumed" | "retried")));
        tags.next() == Some(Some("begin"))
    }

    fn checked_run(run: &str) -> Result<(), DbFailure> {
        match (1..=RUN_ID_BYTES_MAX).contains(&run.len()) {
            true => Ok(()),
            false => Err(DbFailure::rolled_back(format!("a run id of {} bytes", run.len()))),
        }
    }

    /// As the real store: the line's place must be free (the primary key), and the database
    /// may lose the COMMIT's answer after committing.
    fn record_write(&self, fence: Option<&Fence>, write: RecordWrite) -> Result<(), DbFailure> {
        self.with_schema(3)?;
        Self::checked_run(&write.run)?;
        if write.line.len() > RECORD_LINE_BYTES_MAX || write.seq == 0 || write.seq > i64::MAX as u64 {
            return Err(DbFailure::rolled_back(format!("line {} of {} bytes refused", write.seq, write.line.len())));
        }
        self.fenced(fence)?;
        let mut records = self.records.borrow_mut();
        let record = records.entry((write.run.clone(), write.kind)).or_default();
        // A replace removes the earlier lines in the same transaction, so its place is free.
        if !write.replace && record.contains_key(&write.seq) {
            return Err(DbFailure::rolled_back(format!(
                "line {} of run {}'s {} is already written",
                write.seq,
                write.run,
                write.kind.name()
            )));
        }
        // Nothing is changed before this point: a COMMIT lost rolls the whole write back.
        self.commit_lost()?;
        if write.replace {
            record.clear();
        }
        record.insert(write.seq, write.line);
        self.changed();
        if self.commit_answer_lost() {
            return Err(in_doubt());
        }
        Ok(())
    }

    fn record_read(&self, run: &str, kind: RecordKind) -> Result<Option<Vec<Vec<u8>>>, DbFailure> {
        self.with_schema(3)?;
        Self::checked_run(run)?;
        let records = self.records.borrow();
        let Some(record) = records.get(&(run.to_string(), kind)).filter(|record| !record.is_empty()) else {
            return Ok(None);
        };
        let mut lines = Vec::with_capacity(record.len());
        for (index, (seq, line)) in record.iter().enumerate() {
            if *seq != index as u64 + 1 {
                return Err(DbFailure::rolled_back(format!("run {run}'s {} lacks line {}", kind.name(), index + 1)));
            }
            lines.push(line.clone());
        }
        Ok(Some(lines))
    }

    /// Flips one bit of one committed line (damage under the database: a page gone bad): of
    /// the ledger, or of `run`'s journal. Returns the line's number, as a reader counts it.
    pub fn rot(&self, journal_of: Option<&str>, at: u64) -> Option<usize> {
        let flip = |line: &mut Vec<u8>| {
            let position = ((at >> 16) % line.len().max(1) as u64) as usize;
            line.get_mut(position).map(|byte| *byte ^= 0x01)
        };
        let index = match journal_of {
            None => {
                let mut lines = self.lines.borrow_mut();
                let index = (at % lines.len().max(1) as u64) as usize;
                flip(lines.get_mut(index)?)?;
                index
            }
            Some(run) => {
                let mut records = self.records.borrow_mut();
                let journal = records.get_mut(&(run.to_string(), RecordKind::Journal))?;
                let index = (at % journal.len().max(1) as u64) as usize;
                flip(journal.values_mut().nth(index)?)?;
                index
            }
        };
        self.changed();
        Some(index + 1)
    }

    fn changed(&self) {
        self.changes.set(self.changes.get() + 1);
    }

    fn record_runs(&self, kind: RecordKind, after: &str) -> Result<Vec<String>, DbFailure> {
        self.with_schema(3)?;
        let records = self.records.borrow();
        let runs = records.iter().filter(|((run, of), lines)| *of == kind && run.as_str() > after && !lines.is_empty());
        Ok(runs.map(|((run, _), _)| run.clone()).take(RECORD_RUNS_PAGE).collect())
    }

    fn record_remove(&self, fence: Option<&Fence>, run: &str, kind: RecordKind) -> Result<bool, DbFailure> {
        self.with_schema(3)?;
        Self::checked_run(run)?;
        self.fenced(fence)?;
        self.commit_lost()?;
        let removed = self.records.borrow_mut().remove(&(run.to_string(), kind));
        let removed = removed.filter(|record| !record.is_empty());
        if let Some(record) = &removed {
            let bytes = record.values().flat_map(|line| line.iter().copied().chain([b'\n'])).collect();
            self.removed.borrow_mut().entry((run.to_string(), kind)).or_default().push(bytes);
            self.changed();
        }
        if self.commit_answer_lost() {
            return Err(in_doubt());
        }
        Ok(removed.is_some())
    }
}

/// What a caller hears when the connection breaks with its COMMIT on the way, whether or not
/// the database got it.
fn in_doubt() -> DbFailure {
    let message = "PostgreSQL: connection closed with COMMIT on its way (simulated)";
    DbFailure { message: message.into(), may_have_committed: true, untrusted: false }
}

/// Gives a slot up when the hold holding it is dropped (its instance stopped or crashed: the
/// simulated connection ends with it), if the slot is still that hold's.
struct SlotGuard(Rc<SharedDb>, u32, u64);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut slots = self.0.slots.borrow_mut();
        if slots.get(&self.1) == Some(&self.2) {
            slots.remove(&self.1);
        }
    }
}

impl SharedDb {
    /// The first free slot, held until the hold is dropped; the hold resolves if a restart
    /// ends the connection holding it.
    fn hold_slot(self: &Rc<Self>) -> Result<SlotHold, DbFailure> {
        self.reachable()?;
        let slot = (1..=INSTANCE_SLOTS_MAX).find(|slot| !self.slots.borrow().contains_key(slot));
        let Some(slot) = slot else {
            return Err(DbFailure::rolled_back("every slot of this PostgreSQL store is taken (simulated)"));
        };
        let hold = self.holds.get() + 1;
        self.holds.set(hold);
        self.slots.borrow_mut().insert(slot, hold);
        let guard = SlotGuard(Rc::clone(self), slot, hold);
        let hold: HoldLost = Box::pin(std::future::poll_fn(move |context| {
            let db = &guard.0;
            if db.slots.borrow().get(&guard.1) == Some(&guard.2) {
                db.slot_wakers.borrow_mut().insert(guard.1, context.waker().clone());
                return std::task::Poll::Pending;
            }
            std::task::Poll::Ready(format!(
                "the connection holding slot {} of the PostgreSQL store ended (the simulated database restarted)",
                guard.1
            ))
        }));
        Ok(SlotHold { slot, hold })
    }
}

/// The store as the file layout under `journals` would hold it, for the checker (which reads
/// files): `server.ledger` the ledger's lines, and each run's records at the paths of its tool
/// (from its reserve). Every line in the store is committed, so all of it survives a crash.
pub struct StoreFiles {
    db: Rc<SharedDb>,
    journals: PathBuf,
    rendered: RefCell<(u64, Rc<BTreeMap<PathBuf, Vec<u8>>>)>,
}

impl StoreFiles {
    pub fn new(db: &Rc<SharedDb>, journals: PathBuf) -> Rc<StoreFiles> {
        Rc::new(StoreFiles { db: Rc::clone(db), journals, rendered: RefCell::new((u64::MAX, Rc::default())) })
    }

    /// Each run's tool, from the reserves in the ledger.
    fn tools(&self) -> BTreeMap<String, String> {
        let lines = self.db.lines.borrow();
        let events = lines.iter().filter_map(|line| warden::store::record::decode::<Event>(line).ok());
        let reserves = events.filter_map(|event| match event {
            Event::Reserve { run, tool, .. } => Some((run, tool)),
            _ => None,
        });
        reserves.collect()
    }

    fn path(&self, tools: &BTreeMap<String, String>, run: &str, kind: RecordKind) -> Option<PathBuf> {
        // A record of a run the ledger does not know is shown under a tool no manifest has.
        let tool = tools.get(run).map_or("(no reserve)", String::as_str);
        let files = RunFiles::new(&self.journals, tool, run);
        Some(match kind {
            RecordKind::Inputs => files.inputs,
            RecordKind::Journal => files.journal,
            RecordKind::Waiting => files.waiting,
        })
    }

    fn render(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut files = BTreeMap::new();
        if self.db.schema.get() == 0 {
            return files;
        }
        let ledger: Vec<u8> =
            self.db.lines.borrow().iter().flat_map(|line| line.iter().copied().chain([b'\n'])).collect();
        files.insert(self.journals.join(LEDGER_FILE), ledger);
        let tools = self.tools();
        for ((run, kind), record) in self.db.records.borrow().iter().filter(|(_, record)| !record.is_empty()) {
            let bytes = record.values().flat_map(|line| line.iter().copied().chain([b'\n'])).collect();
            files.extend(self.path(&tools, run, *kind).map(|path| (path, bytes)));
        }
        files
    }
}

impl Overlay for StoreFiles {
    fn files(&self) -> Rc<BTreeMap<PathBuf, Vec<u8>>> {
        let changes = self.db.changes.get() + u64::from(self.db.schema.get());
        if self.rendered.borrow().0 != changes {
            *self.rendered.borrow_mut() = (changes, Rc::new(self.render()));
        }
        Rc::clone(&self.rendered.borrow().1)
    }

    fn unlinked(&self, path: &Path) -> Vec<Vec<u8>> {
        let tools = self.tools();
        let removed = self.db.removed.borrow();
        let matching = removed.iter().filter(|((run, kind), _)| self.path(&tools, run, *kind).as_deref() == Some(path));
        matching.flat_map(|(_, versions)| versions.iter().cloned()).collect()
    }
}

/// An instance's handle on the shared database, and the registration it made (its name and
/// epoch), which its services' witness reads.
pub struct SimStateDb(pub Rc<SharedDb>, pub Registration);

/// The name and epoch an instance registered as, shared with its `SimNet`.
pub type Registration = Rc<RefCell<Option<(String, u64)>>>;

impl StateDb for SimStateDb {
    fn migrate(&self, _target: &PostgresTarget) -> LocalBoxFuture<'static, Result<Migration, DbFailure>> {
        crate::env::disk::after_a_turn(self.0.migrate())
    }

    fn ledger_exchange(
        &self,
        target: &PostgresTarget,
        after: u64,
        owner: OwnerChange,
        decide: Decide,
    ) -> LocalBoxFuture<'static, Result<Exchanged, DbFailure>> {
        // Atomic, as the transaction holding the lock is, but done only after other tasks had
        // a turn (a connection is opened, the lock waited for), and its caller resumes after
        // another: as over a real connection, the instance's other decisions may have folded
        // lines meanwhile, before the exchange and after it (the defect the benchmark found
        // on PostgreSQL; cargo-mutants found the model too kind with one turn after only).
        let (db, fence) = (Rc::clone(&self.0), target.fence.clone());
        Box::pin(async move {
            crate::env::disk::after_a_turn(()).await;
            let done = db.exchange(fence.as_ref(), after, owner, decide);
            crate::env::disk::after_a_turn(done).await
        })
    }

    fn register(
        &self,
        _target: &PostgresTarget,
        instance: &str,
        lease_ms: u64,
    ) -> LocalBoxFuture<'static, Result<Lease, DbFailure>> {
        let registered = self.0.register(instance, lease_ms);
        if let Ok(lease) = &registered {
            *self.1.borrow_mut() = Some((instance.to_string(), lease.epoch));
        }
        crate::env::disk::after_a_turn(registered)
    }

    fn renew(
        &self,
        _target: &PostgresTarget,
        instance: &str,
        epoch: u64,
        lease_ms: u64,
    ) -> LocalBoxFuture<'static, Result<Option<Lease>, DbFailure>> {
        crate::env::disk::after_a_turn(self.0.renew(instance, epoch, lease_ms))
    }

    fn expired(&self, _target: &PostgresTarget) -> LocalBoxFuture<'static, Result<Vec<(String, u64)>, DbFailure>> {
        crate::env::disk::after_a_turn(self.0.expired())
    }

    fn record_write(
        &self,
        target: &PostgresTarget,
        write: RecordWrite,
    ) -> LocalBoxFuture<'static, Result<(), DbFailure>> {
        crate::env::disk::after_a_turn(self.0.record_write(target.fence.as_ref(), write))
    }

    fn record_read(
        &self,
        _target: &PostgresTarget,
        run: &str,
        kind: RecordKind,
    ) -> LocalBoxFuture<'static, Result<Option<Vec<Vec<u8>>>, DbFailure>> {
        crate::env::disk::after_a_turn(self.0.record_read(run, kind))
    }

    fn record_remove(
        &self,
        target: &PostgresTarget,
        run: &str,
        kind: RecordKind,
    ) -> LocalBoxFuture<'static, Result<bool, DbFailure>> {
        crate::env::disk::after_a_turn(self.0.record_remove(target.fence.as_ref(), run, kind))
    }

    fn record_runs(
        &self,
        _target: &PostgresTarget,
        kind: RecordKind,
        after: &str,
    ) -> LocalBoxFuture<'static, Result<Vec<String>, DbFailure>> {
        crate::env::disk::after_a_turn(self.0.record_runs(kind, after))
    }

    fn hold_slot(&self, _target: &PostgresTarget) -> LocalBoxFuture<'static, Result<SlotHold, DbFailure>> {
        crate::env::disk::after_a_turn(self.0.hold_slot())
    }

    fn owners(
        &self,
        _target: &PostgresTarget,
        after: &str,
    ) -> LocalBoxFuture<'static, Result<Vec<(String, String)>, DbFailure>> {
        crate::env::disk::after_a_turn(self.0.owners_after(after))
    }

    fn instances(&self, _target: &PostgresTarget) -> LocalBoxFuture<'static, Result<Vec<(String, Lease)>, DbFailure>> {
        crate::env::disk::after_a_turn(self.0.instances_listed())
    }

    fn claim(
        &self,
        target: &PostgresTarget,
        run: &str,
        after: u64,
    ) -> LocalBoxFuture<'static, Result<Option<bool>, DbFailure>> {
        // Decided after other tasks had a turn, as a transaction over a connection is.
        let (db, fence, run) = (Rc::clone(&self.0), target.fence.clone(), run.to_string());
        Box::pin(async move {
            crate::env::disk::after_a_turn(()).await;
            let claimed = db.claim(fence.as_ref(), &run, after);
            crate::env::disk::after_a_turn(claimed).await
        })
    }

    fn take_over(
        &self,
        target: &PostgresTarget,
        instance: &str,
        epoch: u64,
    ) -> LocalBoxFuture<'static, Result<Option<Vec<String>>, DbFailure>> {
        crate::env::disk::after_a_turn(self.0.take_over(target.fence.as_ref(), instance, epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: u64) -> Vec<u8> {
        format!("line {n}").into_bytes()
    }

    /// Appends `line` after `after` when the whole ledger is read; the lines handed over.
    fn exchange(db: &SharedDb, after: u64, append: Option<Vec<u8>>) -> (Result<Exchanged, DbFailure>, Vec<u64>) {
        exchange_fenced(db, None, after, append)
    }

    fn exchange_fenced(
        db: &SharedDb,
        fence: Option<&Fence>,
        after: u64,
        append: Option<Vec<u8>>,
    ) -> (Result<Exchanged, DbFailure>, Vec<u64>) {
        let handed = Rc::new(RefCell::new(Vec::new()));
        let seen = Rc::clone(&handed);
        let decide: Decide = Box::new(move |lines, now| {
            seen.borrow_mut().extend(lines.iter().map(|line| line.seq));
            now.and(append)
        });
        let done = db.exchange(fence, after, OwnerChange::Keep, decide);
        let handed = handed.borrow().clone();
        (done, handed)
    }

    #[test]
    fn the_model_keeps_the_real_stores_contract() {
        let db = SharedDb::new(SimClock::new());
        assert!(exchange(&db, 0, None).0.is_err(), "no ledger before the schema");
        assert_eq!(db.migrate().unwrap(), Migration { found: 0, now: STATE_SCHEMA_VERSION });
        assert_eq!(db.migrate().unwrap().found, STATE_SCHEMA_VERSION, "a second migration finds it done");
        for n in 0..LEDGER_PAGE_LINES + 3 {
            let (done, _) = exchange(&db, n, Some(line(n)));
            assert_eq!(done.unwrap(), Exchanged { appended: Some(n + 1), seen: n + 1, more: false });
        }
        // A reader from the start gets a page, is told more follow, and may not append yet.
        let (done, handed) = exchange(&db, 0, Some(line(0)));
        assert_eq!(done.unwrap(), Exchanged { appended: None, seen: LEDGER_PAGE_LINES, more: true });
        assert_eq!(handed, (1..=LEDGER_PAGE_LINES).collect::<Vec<_>>());
        let (done, handed) = exchange(&db, LEDGER_PAGE_LINES, None);
        assert_eq!(done.unwrap().seen, LEDGER_PAGE_LINES + 3);
        assert_eq!(handed.len(), 3);
        // Past the end (a database restored from an older copy): refused.
        let (done, _) = exchange(&db, LEDGER_PAGE_LINES + 4, None);
        assert!(done.unwrap_err().message.contains("older copy"));
        // Too long a line is refused, as the table's CHECK refuses it.
        let (done, _) = exchange(&db, LEDGER_PAGE_LINES + 3, Some(vec![b'x'; LEDGER_LINE_BYTES_MAX + 1]));
        assert!(done.is_err());
        // Leases by the database's clock: renewed while held, lost once ended or taken by a
        // later epoch (a restart registering again).
        let a = db.register("a", 300).unwrap();
        assert_eq!(a.epoch, 1);
        db.clock.advance(200);
        assert!(db.renew("a", 1, 300).unwrap().is_some());
        db.clock.advance(299);
        assert!(db.expired().unwrap().is_empty());
        db.clock.advance(1);
        assert_eq!(db.expired().unwrap(), vec![("a".to_string(), 1)]);
        assert_eq!(db.renew("a", 1, 300).unwrap(), None, "an ended lease is not renewed");
        assert_eq!(db.register("a", 300).unwrap().epoch, 2);
        assert_eq!(db.renew("a", 1, 300).unwrap(), None, "the earlier epoch is fenced");
        assert!(db.register(&"x".repeat(INSTANCE_NAME_BYTES_MAX + 1), 300).is_err());
        db.set_schema(STATE_SCHEMA_VERSION + 1);
        assert!(db.migrate().unwrap_err().message.contains("newer than this warden's"));
        db.unreachable.set(true);
        assert!(exchange(&db, 0, None).0.is_err());
    }

    /// Writes fenced by a lease, as the real store fences them (`shared_store.rs` holds the
    /// same on PostgreSQL): accepted while the lease is held at its epoch, refused with
    /// nothing written once it ended or a later registration took it; an unfenced write counted.
    #[test]
    fn a_write_is_refused_once_its_lease_ended_or_was_taken() {
        let db = SharedDb::new(SimClock::new());
        db.migrate().unwrap();
        let lease = db.register("a", 300).unwrap();
        let fence = Fence { instance: "a".into(), epoch: lease.epoch };
        db.record_write(Some(&fence), write("r1", RecordKind::Journal, 1, "h", false)).unwrap();
        db.clock.advance(300);
        let refused = db.record_write(Some(&fence), write("r1", RecordKind::Journal, 2, "late", false)).unwrap_err();
        assert!(!refused.may_have_committed && refused.message.contains("no longer holds its lease"));
        let lease = db.register("a", 300).unwrap();
        assert!(db.record_remove(Some(&fence), "r1", RecordKind::Journal).is_err(), "the earlier epoch is fenced");
        let (done, _) = exchange_fenced(&db, Some(&fence), 0, Some(b"x".to_vec()));
        assert!(done.is_err());
        assert!(db.lines.borrow().is_empty(), "a fenced exchange appends nothing");
        assert_eq!(db.record_read("r1", RecordKind::Journal).unwrap().unwrap().len(), 1);
        let current = Fence { instance: "a".into(), epoch: lease.epoch };
        assert!(db.record_remove(Some(&current), "r1", RecordKind::Journal).unwrap());
        assert_eq!(db.unfenced_writes.get(), 0);
        db.record_write(None, write("r2", RecordKind::Inputs, 1, "i", false)).unwrap();
        assert_eq!(db.unfenced_writes.get(), 1);
    }

    fn write(run: &str, kind: RecordKind, seq: u64, line: &str, replace: bool) -> RecordWrite {
        RecordWrite { run: run.into(), kind, seq, line: line.as_bytes().to_vec(), replace }
    }

    /// A run's records as the real store keeps them (`server/tests/shared_store.rs` holds the
    /// same contract on PostgreSQL): lines in order, a place taken refused, a gap refused on
    /// reading, a replace in one step, kinds apart.
    #[test]
    fn the_model_keeps_a_runs_records_as_the_real_store() {
        let db = SharedDb::new(SimClock::new());
        assert!(
            db.record_write(None, write("r1", RecordKind::Journal, 1, "h", false)).is_err(),
            "no table before the schema"
        );
        db.migrate().unwrap();
        assert_eq!(db.record_read("r1", RecordKind::Journal).unwrap(), None);
        db.record_write(None, write("r1", RecordKind::Journal, 1, "h", false)).unwrap();
        db.record_write(None, write("r1", RecordKind::Journal, 2, "a", false)).unwrap();
        let taken = db.record_write(None, write("r1", RecordKind::Journal, 2, "b", false)).unwrap_err();
        assert!(taken.message.contains("already written") && !taken.may_have_committed, "{taken:?}");
        assert_eq!(db.record_read("r1", RecordKind::Journal).unwrap(), Some(vec![b"h".to_vec(), b"a".to_vec()]));
        assert_eq!(db.record_read("r1", RecordKind::Inputs).unwrap(), None, "kinds are apart");
        db.record_write(None, write("r1", RecordKind::Waiting, 1, "w1", false)).unwrap();
        db.record_write(None, write("r1", RecordKind::Waiting, 1, "w2", true)).unwrap();
        assert_eq!(db.record_read("r1", RecordKind::Waiting).unwrap(), Some(vec![b"w2".to_vec()]));
        db.record_write(None, write("r2", RecordKind::Journal, 2, "x", false)).unwrap();
        assert!(db.record_read("r2", RecordKind::Journal).unwrap_err().message.contains("lacks line 1"));
        assert_eq!(db.record_runs(RecordKind::Journal, "").unwrap(), vec!["r1".to_string(), "r2".to_string()]);
        assert_eq!(db.record_runs(RecordKind::Journal, "r1").unwrap(), vec!["r2".to_string()]);
        assert_eq!(db.record_runs(RecordKind::Inputs, "").unwrap(), Vec::<String>::new());
        assert!(db.record_remove(None, "r1", RecordKind::Journal).unwrap());
        assert!(!db.record_remove(None, "r1", RecordKind::Journal).unwrap());
        assert!(db
            .record_write(None, write(&"r".repeat(RUN_ID_BYTES_MAX + 1), RecordKind::Inputs, 1, "i", false))
            .is_err());
        db.lose_commit_answers.set(1);
        let lost = db.record_write(None, write("r3", RecordKind::Inputs, 1, "i", false)).unwrap_err();
        assert!(lost.may_have_committed);
        assert!(db.record_read("r3", RecordKind::Inputs).unwrap().is_some(), "committed, its answer lost");
    }
}
