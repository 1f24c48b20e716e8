//! A simulated disk with durable and pending contents (turmoil's `unstable-fs` model).
//!
//! - Written data is durable only after `fsync` of the file.
//! - A new, renamed or removed directory entry is durable only after `fsync_dir` of its
//!   parent; a new directory likewise.
//! - At a crash, each file keeps its durable bytes plus, for an append-only file, a prefix of
//!   its unsynced tail cut at an arbitrary byte (a torn write); namespaces revert to their
//!   durable state.
//!
//! Faults: a crash at the k-th operation, fsync and write failures, a full disk, slow and
//! stalling operations (they take virtual time), and the `lying_fsync` canary (fsync
//! acknowledges without making anything durable).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use rand_chacha::ChaCha8Rng;
use rand_core::RngCore;
use warden::env::{Clock, Disk, DiskLock, LocalBoxFuture};

use crate::env::clock::{SimClock, SimClockHandle};

#[derive(Clone, Debug, Default)]
struct Inode {
    current: Vec<u8>,
    durable: Vec<u8>,
    /// What the file held before a misdirected write damaged it (the checker's memory of
    /// what the disk destroyed; empty unless one did).
    before_misdirect: Vec<u8>,
}

/// Faults the disk can inject, each as a probability per operation (in millionths).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskFaults {
    pub fsync_failure_ppm: u32,
    pub write_failure_ppm: u32,
    /// Bytes the disk holds in all; writes past it fail with "no space".
    pub capacity_bytes: Option<usize>,
    /// The canary: fsync reports success and makes nothing durable.
    pub lying_fsync: bool,
    /// A planted bug: fsync of a file whose path contains this text reports success and
    /// makes nothing durable, as a removed fsync call would.
    pub lose_fsyncs_of: Option<String>,
    /// The same for fsync of a directory.
    pub lose_dir_fsyncs_of: Option<String>,
}

#[derive(Default)]
struct State {
    inodes: Vec<Inode>,
    names: BTreeMap<PathBuf, usize>,
    durable_names: BTreeMap<PathBuf, usize>,
    dirs: BTreeSet<PathBuf>,
    durable_dirs: BTreeSet<PathBuf>,
    locks: LockTable,
    /// The inodes a name held before `remove` or a `rename` over it unlinked them, oldest
    /// first (an inode is never reused, so its contents stay as they were).
    unlinked: BTreeMap<PathBuf, Vec<usize>>,
}

/// The locks held, by path, each with the number of the taking that holds it. Shared with
/// the guards (`LockHolder`, which `DiskLock` requires to be `Send`): a guard dropped frees
/// its own lock, as closing a file frees its flock, and never one taken again after a crash
/// or an instance's end freed it.
#[derive(Default)]
struct LockTable(Arc<Mutex<(u64, BTreeMap<PathBuf, u64>)>>);

impl LockTable {
    fn table(&self) -> std::sync::MutexGuard<'_, (u64, BTreeMap<PathBuf, u64>)> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

thread_local! {
    /// Simulated disks alive on this thread. A seed's world must free its disk (and so every
    /// instance, task and service that held it) when the seed ends: one kept alive by a
    /// reference cycle keeps its whole world, and a sweep's memory grows with every seed.
    static LIVE_DISKS: Cell<u64> = const { Cell::new(0) };
}

/// Simulated disks alive on this thread (`simulate` checks that a seed frees its own).
pub fn live_disks() -> u64 {
    LIVE_DISKS.with(Cell::get)
}

pub struct SimDisk {
    state: RefCell<State>,
    rng: RefCell<ChaCha8Rng>,
    pub faults: RefCell<DiskFaults>,
    /// Operations so far (all instances), and the one to crash at.
    pub operations: Cell<u64>,
    pub crash_at_operation: Cell<Option<u64>>,
    /// Fail the next fsync (one shot).
    pub fail_next_fsync: Cell<bool>,
    /// `exists` of a path containing this text fails with an I/O error (not "absent").
    pub fail_exists_containing: RefCell<Option<String>>,
    /// `list` of a directory whose path contains this text fails with an I/O error (not
    /// "absent").
    pub fail_list_containing: RefCell<Option<String>>,
    /// Shared with the executor: set when a fault crashed the instance.
    pub crashed: Rc<Cell<bool>>,
    /// Counts of injected faults by kind, for the simulator's report.
    pub injected: RefCell<BTreeMap<&'static str, u64>>,
    /// The next read of a path containing the text returns one byte flipped (the byte at the
    /// number modulo the length before the last newline); the disk itself stays intact.
    pub flip_next_read_of: RefCell<Option<(String, u64)>>,
    /// The next append to a path containing the text lands the number (1 to 64) of bytes
    /// early, over the end of what was there: a misdirected write.
    pub misdirect_next_append_to: RefCell<Option<(String, u64)>>,
    /// Where a misdirected write damaged a file: (path, 1-based line), once it happened.
    pub misdirected: RefCell<Option<(PathBuf, usize)>>,
    /// A slow or stalling disk: (ms each operation takes, operations left to slow down).
    /// The operation happens at once; its caller resumes when the time has passed.
    pub slow: Cell<(u64, u64)>,
    clock: Rc<SimClock>,
    /// Records kept elsewhere than on this disk, shown to the checker as the files they would
    /// be (the PostgreSQL store's): the checker's reads (`peek`, `files`, ...) see them, the
    /// server's (through `Disk`) do not.
    pub overlay: RefCell<Option<Rc<dyn Overlay>>>,
}

/// Records kept outside the disk, as the file layout would hold them: every line committed is
/// durable, so what they hold is what a crash leaves.
pub trait Overlay {
    /// Path -> bytes, for every record kept.
    fn files(&self) -> Rc<BTreeMap<PathBuf, Vec<u8>>>;
    /// What `path` held before each removal, oldest first.
    fn unlinked(&self, path: &Path) -> Vec<Vec<u8>>;
}

fn pending_forever<T: 'static>() -> LocalBoxFuture<'static, T> {
    Box::pin(std::future::pending())
}

fn ready<T: 'static>(value: T) -> LocalBoxFuture<'static, T> {
    Box::pin(std::future::ready(value))
}

/// Completes after yielding once: the operation has happened, but the caller resumes only
/// after other tasks had their turn, as with a real disk's latency.
pub(crate) fn after_a_turn<T: 'static>(value: T) -> LocalBoxFuture<'static, T> {
    let mut value = Some(value);
    let mut yielded = false;
    Box::pin(std::future::poll_fn(move |cx| {
        if !yielded {
            yielded = true;
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        std::task::Poll::Ready(value.take().expect("polled after completion"))
    }))
}

impl DiskFaults {
    fn loses_fsync_of(&self, path: &Path) -> bool {
        self.lying_fsync || Self::names(&self.lose_fsyncs_of, path)
    }

    fn loses_dir_fsync_of(&self, dir: &Path) -> bool {
        self.lying_fsync || Self::names(&self.lose_dir_fsyncs_of, dir)
    }

    fn names(part: &Option<String>, path: &Path) -> bool {
        part.as_ref().is_some_and(|part| path.to_string_lossy().contains(part.as_str()))
    }
}

impl SimDisk {
    pub fn new(rng: ChaCha8Rng, crashed: Rc<Cell<bool>>, clock: Rc<SimClock>) -> Rc<SimDisk> {
        LIVE_DISKS.with(|live| live.set(live.get() + 1));
        let disk = SimDisk {
            state: RefCell::new(State::default()),
            rng: RefCell::new(rng),
            faults: RefCell::new(DiskFaults::default()),
            operations: Cell::new(0),
            crash_at_operation: Cell::new(None),
            fail_next_fsync: Cell::new(false),
            fail_exists_containing: RefCell::new(None),
            fail_list_containing: RefCell::new(None),
            crashed,
            injected: RefCell::new(BTreeMap::new()),
            flip_next_read_of: RefCell::new(None),
            misdirect_next_append_to: RefCell::new(None),
            misdirected: RefCell::new(None),
            slow: Cell::new((0, 0)),
            clock,
            overlay: RefCell::new(None),
        };
        {
            let mut state = disk.state.borrow_mut();
            state.dirs.insert(PathBuf::from("/"));
            state.durable_dirs.insert(PathBuf::from("/"));
        }
        Rc::new(disk)
    }

    fn count(&self, kind: &'static str) {
        *self.injected.borrow_mut().entry(kind).or_insert(0) += 1;
    }

    fn chance(&self, ppm: u32) -> bool {
        ppm > 0 && (self.rng.borrow_mut().next_u32() % 1_000_000) < ppm
    }

    /// Counts an operation; true when the instance must crash instead of doing it.
    fn crash_now(&self) -> bool {
        if self.crashed.get() {
            return true;
        }
        let n = self.operations.get() + 1;
        self.operations.set(n);
        if self.crash_at_operation.get() == Some(n) {
            self.count("crash at a disk operation");
            self.crashed.set(true);
            return true;
        }
        false
    }

    pub fn used(&self) -> usize {
        Self::used_bytes(&self.state.borrow())
    }

    fn used_bytes(state: &State) -> usize {
        state.names.values().map(|&i| state.inodes[i].current.len()).sum()
    }

    /// Writes a file durably, as the operator's setup does before a server starts.
    pub fn install(&self, path: &Path, bytes: &[u8]) {
        let mut state = self.state.borrow_mut();
        let mut dir = path.parent();
        while let Some(d) = dir {
            state.dirs.insert(d.to_path_buf());
            state.durable_dirs.insert(d.to_path_buf());
            dir = d.parent();
        }
        let inode = state.inodes.len();
        state.inodes.push(Inode { current: bytes.to_vec(), durable: bytes.to_vec(), before_misdirect: Vec::new() });
        state.names.insert(path.to_path_buf(), inode);
        state.durable_names.insert(path.to_path_buf(), inode);
    }

    /// The overlay's files, if any.
    fn overlaid(&self) -> Option<Rc<BTreeMap<PathBuf, Vec<u8>>>> {
        self.overlay.borrow().as_ref().map(|overlay| overlay.files()).filter(|files| !files.is_empty())
    }

    /// Reads what the running instance would see (for the checker).
    pub fn peek(&self, path: &Path) -> Option<Vec<u8>> {
        if let Some(bytes) = self.overlaid().and_then(|files| files.get(path).cloned()) {
            return Some(bytes);
        }
        let state = self.state.borrow();
        state.names.get(path).map(|&i| state.inodes[i].current.clone())
    }

    /// What `path` held before each `remove` or `rename` over it, oldest first: the checker
    /// remembers what retention deleted and compaction dropped (`checks::check`).
    pub fn unlinked(&self, path: &Path) -> Vec<Vec<u8>> {
        if let Some(overlay) = self.overlay.borrow().as_ref() {
            let removed = overlay.unlinked(path);
            if !removed.is_empty() {
                return removed;
            }
        }
        let state = self.state.borrow();
        let inodes = state.unlinked.get(path).into_iter().flatten();
        // As written, and as it was before a misdirected write damaged it: compaction may have
        // replaced a damaged file with one written afresh from the server's state, leaving the
        // runs the damaged lines ended nowhere else (seed 19802).
        let versions = inodes.flat_map(|&inode| [&state.inodes[inode].current, &state.inodes[inode].before_misdirect]);
        versions.filter(|bytes| !bytes.is_empty()).cloned().collect()
    }

    /// How many leading bytes of `path` would survive a crash now: 0 unless its name and
    /// every directory above it are durable, else the prefix its durable and current
    /// contents share.
    pub fn surviving_len(&self, path: &Path) -> usize {
        if let Some(bytes) = self.overlaid().and_then(|files| files.get(path).map(Vec::len)) {
            return bytes;
        }
        let state = self.state.borrow();
        let Some(&inode) = state.names.get(path) else { return 0 };
        let named = state.durable_names.get(path) == Some(&inode);
        let dirs = path.ancestors().skip(1).all(|dir| state.durable_dirs.contains(dir));
        if !named || !dirs {
            return 0;
        }
        let Inode { current, durable, .. } = &state.inodes[inode];
        current.iter().zip(durable.iter()).take_while(|(a, b)| a == b).count()
    }

    /// The bytes a crash now would leave at `path`: its durably named file's durable content
    /// (another file's, while a rename over `path` is not yet durable), empty if none.
    pub fn surviving_bytes(&self, path: &Path) -> Vec<u8> {
        if let Some(bytes) = self.overlaid().and_then(|files| files.get(path).cloned()) {
            return bytes;
        }
        let state = self.state.borrow();
        let dirs = path.ancestors().skip(1).all(|dir| state.durable_dirs.contains(dir));
        match state.durable_names.get(path) {
            Some(&inode) if dirs => state.inodes[inode].durable.clone(),
            _ => Vec::new(),
        }
    }

    /// Runs `read` over a file's current bytes without copying them.
    pub fn with_bytes<R>(&self, path: &Path, read: impl FnOnce(&[u8]) -> R) -> Option<R> {
        if let Some(files) = self.overlaid() {
            if let Some(bytes) = files.get(path) {
                return Some(read(bytes));
            }
        }
        let state = self.state.borrow();
        state.names.get(path).map(|&inode| read(&state.inodes[inode].current))
    }

    /// Every file path, sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files: BTreeSet<PathBuf> = self.state.borrow().names.keys().cloned().collect();
        files.extend(self.overlaid().iter().flat_map(|overlaid| overlaid.keys().cloned()));
        files.into_iter().collect()
    }

    /// Overwrites a file's bytes, durably (for scenarios that damage a ledger).
    pub fn corrupt(&self, path: &Path, bytes: Vec<u8>) {
        let mut state = self.state.borrow_mut();
        if let Some(&inode) = state.names.get(path) {
            state.inodes[inode].current = bytes.clone();
            state.inodes[inode].durable = bytes;
        }
    }

    /// Removes `path` outright, durably (a file an operator or damage took away).
    pub fn delete(&self, path: &Path) {
        let mut state = self.state.borrow_mut();
        state.names.remove(path);
        state.durable_names.remove(path);
    }

    /// Frees every lock (an instance ended).
    pub fn release_locks(&self) {
        self.state.borrow().locks.table().1.clear();
    }

    pub fn held_locks(&self) -> BTreeSet<PathBuf> {
        self.state.borrow().locks.table().1.keys().cloned().collect()
    }

    /// Frees the locks taken since `before` (an operator command ended).
    pub fn release_locks_since(&self, before: &BTreeSet<PathBuf>) {
        self.state.borrow().locks.table().1.retain(|path, _| before.contains(path));
    }

    /// Applies crash semantics: unsynced data is lost or torn, namespaces revert to their
    /// durable state, locks are freed.
    pub fn crash(&self) {
        let mut state = self.state.borrow_mut();
        let mut rng = self.rng.borrow_mut();
        for inode in state.inodes.iter_mut() {
            let appended = inode.current.len() > inode.durable.len() && inode.current.starts_with(&inode.durable);
            if appended {
                let extra = inode.current.len() - inode.durable.len();
                let kept = (rng.next_u64() % (extra as u64 + 1)) as usize;
                let mut survived = inode.durable.clone();
                survived.extend_from_slice(&inode.current[inode.durable.len()..inode.durable.len() + kept]);
                inode.current = survived;
            } else {
                inode.current = inode.durable.clone();
            }
            inode.durable = inode.current.clone();
        }
        state.names = state.durable_names.clone();
        state.dirs = state.durable_dirs.clone();
        // A file whose directory did not survive does not survive either.
        let dirs = state.dirs.clone();
        state.names.retain(|path, _| path.parent().is_some_and(|p| dirs.contains(p)));
        state.durable_names = state.names.clone();
        state.locks.table().1.clear();
        self.crashed.set(false);
    }

    fn not_found(path: &Path) -> io::Error {
        io::Error::new(io::ErrorKind::NotFound, format!("{}: no such file", path.display()))
    }

    fn parent_exists(state: &State, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(parent) if state.dirs.contains(parent) => Ok(()),
            _ => Err(io::Error::new(io::ErrorKind::NotFound, format!("{}: no such directory", path.display()))),
        }
    }

    fn write_fault(&self, state: &State, adding: usize) -> io::Result<()> {
        let faults = self.faults.borrow();
        if self.chance(faults.write_failure_ppm) {
            self.count("write failure");
            return Err(io::Error::other("simulated write failure"));
        }
        if let Some(capacity) = faults.capacity_bytes {
            if Self::used_bytes(state) + adding > capacity {
                self.count("disk full");
                return Err(io::Error::new(io::ErrorKind::StorageFull, "simulated full disk"));
            }
        }
        Ok(())
    }

    fn modify(&self, path: &Path, bytes: Vec<u8>, append: bool) -> io::Result<()> {
        let mut state = self.state.borrow_mut();
        Self::parent_exists(&state, path)?;
        self.write_fault(&state, bytes.len())?;
        let inode = match state.names.get(path) {
            Some(&inode) => inode,
            None => {
                state.inodes.push(Inode::default());
                let inode = state.inodes.len() - 1;
                state.names.insert(path.to_path_buf(), inode);
                inode
            }
        };
        // Only into an earlier line: an append to a file shorter than 65 bytes lands right.
        let long_enough = state.inodes[inode].current.len() > 64;
        let misdirect = match append && long_enough {
            true => self.take_if_names(&self.misdirect_next_append_to, path),
            false => None,
        };
        let file = &mut state.inodes[inode];
        if let Some(early) = misdirect.map(|n| (1 + n % 64) as usize) {
            file.before_misdirect = file.current.clone();
            let at = file.current.len() - early;
            let line = 1 + file.current[..at].iter().filter(|&&b| b == b'\n').count();
            file.current.truncate(at);
            file.current.extend_from_slice(&bytes);
            *self.misdirected.borrow_mut() = Some((path.to_path_buf(), line));
            self.count("misdirected write");
        } else if append {
            file.current.extend_from_slice(&bytes);
        } else {
            file.current = bytes;
        }
        Ok(())
    }
}

impl SimDisk {
    /// Takes a one-shot fault's number if `path` contains its text.
    fn take_if_names(&self, fault: &RefCell<Option<(String, u64)>>, path: &Path) -> Option<u64> {
        let names = fault.borrow().as_ref().is_some_and(|(part, _)| path.to_string_lossy().contains(part.as_str()));
        names.then(|| fault.borrow_mut().take().map(|(_, n)| n)).flatten()
    }

    /// `bytes` as read, with one byte flipped if a read fault is armed for `path`.
    fn as_read(&self, path: &Path, mut bytes: Vec<u8>) -> Vec<u8> {
        let last_newline = bytes.iter().rposition(|&b| b == b'\n').filter(|&n| n > 0);
        if let Some(last_newline) = last_newline {
            if let Some(at) = self.take_if_names(&self.flip_next_read_of, path) {
                bytes[(at % last_newline as u64) as usize] ^= 0x01;
                self.count("flipped read");
            }
        }
        bytes
    }

    /// Half the operations let other tasks run before their caller resumes; a slowed one
    /// resumes it only after its time has passed.
    fn complete<T: 'static>(&self, value: T) -> LocalBoxFuture<'static, T> {
        let (ms, left) = self.slow.get();
        if left > 0 {
            self.slow.set((ms, left - 1));
            self.count("slow operation");
            let sleep = SimClockHandle(Rc::clone(&self.clock)).sleep(ms);
            return Box::pin(async move {
                sleep.await;
                value
            });
        }
        if self.rng.borrow_mut().next_u32() % 2 == 0 {
            after_a_turn(value)
        } else {
            ready(value)
        }
    }
}

/// The `Disk` half of the seam over a shared `SimDisk`.
/// An instance's disk; a peer instance's carries its own crash flag (`crash_now`).
pub struct SimDiskHandle(pub Rc<SimDisk>, pub Option<Rc<Cell<bool>>>);

impl SimDiskHandle {
    /// Whether this operation crashes the instance: a peer's disk operations are not counted
    /// for the plan's crash at a disk operation, which is the first instance's.
    fn crash_now(&self) -> bool {
        match &self.1 {
            Some(crashed) => crashed.get(),
            None => self.0.crash_now(),
        }
    }
}

impl Disk for SimDiskHandle {
    fn read(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<Vec<u8>>> {
        if self.crash_now() {
            return pending_forever();
        }
        let bytes = self.0.peek(path).map(|bytes| self.0.as_read(path, bytes));
        self.0.complete(bytes.ok_or_else(|| SimDisk::not_found(path)))
    }

    fn append(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        if self.crash_now() {
            return pending_forever();
        }
        self.0.complete(self.0.modify(path, bytes, true))
    }

    fn write(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        if self.crash_now() {
            return pending_forever();
        }
        self.0.complete(self.0.modify(path, bytes, false))
    }

    fn fsync(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<()>> {
        if self.crash_now() {
            return pending_forever();
        }
        let disk = &self.0;
        if disk.fail_next_fsync.replace(false) || disk.chance(disk.faults.borrow().fsync_failure_ppm) {
            disk.count("fsync failure");
            return self.0.complete(Err(io::Error::other("simulated fsync failure")));
        }
        let lying = disk.faults.borrow().loses_fsync_of(path);
        let mut state = disk.state.borrow_mut();
        let result = match state.names.get(path).copied() {
            Some(inode) => {
                if !lying {
                    let file = &mut state.inodes[inode];
                    file.durable = file.current.clone();
                }
                Ok(())
            }
            None => Err(SimDisk::not_found(path)),
        };
        self.0.complete(result)
    }

    fn fsync_dir(&self, dir: &Path) -> LocalBoxFuture<'static, io::Result<()>> {
        if self.crash_now() {
            return pending_forever();
        }
        let disk = &self.0;
        if disk.chance(disk.faults.borrow().fsync_failure_ppm) {
            disk.count("fsync failure");
            return self.0.complete(Err(io::Error::other("simulated fsync failure")));
        }
        if disk.faults.borrow().loses_dir_fsync_of(dir) {
            return self.0.complete(Ok(()));
        }
        let mut state = disk.state.borrow_mut();
        if !state.dirs.contains(dir) {
            return self.0.complete(Err(SimDisk::not_found(dir)));
        }
        let in_dir = |path: &Path| path.parent() == Some(dir);
        let current: Vec<(PathBuf, usize)> =
            state.names.iter().filter(|(p, _)| in_dir(p)).map(|(p, &i)| (p.clone(), i)).collect();
        state.durable_names.retain(|path, _| !in_dir(path));
        state.durable_names.extend(current);
        let subdirs: Vec<PathBuf> = state.dirs.iter().filter(|p| in_dir(p)).cloned().collect();
        state.durable_dirs.retain(|path| !in_dir(path));
        state.durable_dirs.extend(subdirs);
        self.0.complete(Ok(()))
    }

    /// The primitives one after another, so every crash point between them stays reachable.
    fn write_new_durably(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        let (disk, path) = (SimDiskHandle(Rc::clone(&self.0), self.1.clone()), path.to_path_buf());
        Box::pin(async move {
            disk.write(&path, bytes).await?;
            disk.fsync(&path).await?;
            disk.fsync_dir(warden::base::layout::folder_of(&path)).await
        })
    }

    fn append_durably(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        let (disk, path) = (SimDiskHandle(Rc::clone(&self.0), self.1.clone()), path.to_path_buf());
        Box::pin(async move {
            disk.append(&path, bytes).await?;
            disk.fsync(&path).await
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> LocalBoxFuture<'static, io::Result<()>> {
        if self.crash_now() {
            return pending_forever();
        }
        let mut state = self.0.state.borrow_mut();
        let result = match state.names.remove(from) {
            Some(inode) => SimDisk::parent_exists(&state, to).map(|()| {
                if let Some(replaced) = state.names.insert(to.to_path_buf(), inode) {
                    state.unlinked.entry(to.to_path_buf()).or_default().push(replaced);
                }
            }),
            None => Err(SimDisk::not_found(from)),
        };
        self.0.complete(result)
    }

    fn remove(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<()>> {
        if self.crash_now() {
            return pending_forever();
        }
        let mut state = self.0.state.borrow_mut();
        let removed = state.names.remove(path);
        if let Some(inode) = removed {
            state.unlinked.entry(path.to_path_buf()).or_default().push(inode);
        }
        self.0.complete(removed.map(|_| ()).ok_or_else(|| SimDisk::not_found(path)))
    }

    fn create_dir_all(&self, dir: &Path) -> LocalBoxFuture<'static, io::Result<()>> {
        if self.crash_now() {
            return pending_forever();
        }
        let mut state = self.0.state.borrow_mut();
        let mut current = Some(dir);
        while let Some(d) = current {
            state.dirs.insert(d.to_path_buf());
            current = d.parent();
        }
        self.0.complete(Ok(()))
    }

    fn list(&self, dir: &Path) -> LocalBoxFuture<'static, io::Result<Vec<String>>> {
        if self.crash_now() {
            return pending_forever();
        }
        let failing = self.0.fail_list_containing.borrow().clone();
        if failing.is_some_and(|part| dir.to_string_lossy().contains(part.as_str())) {
            self.0.count("list failure");
            return self.0.complete(Err(io::Error::other("simulated I/O error")));
        }
        let state = self.0.state.borrow();
        if !state.dirs.contains(dir) {
            return self.0.complete(Err(SimDisk::not_found(dir)));
        }
        let mut names: Vec<String> = state
            .names
            .keys()
            .chain(state.dirs.iter())
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        names.sort();
        names.dedup();
        self.0.complete(Ok(names))
    }

    fn exists(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<bool>> {
        if self.crash_now() {
            return pending_forever();
        }
        let failing = self.0.fail_exists_containing.borrow().clone();
        if failing.is_some_and(|part| path.to_string_lossy().contains(part.as_str())) {
            self.0.count("exists failure");
            return self.0.complete(Err(io::Error::other("simulated I/O error")));
        }
        let state = self.0.state.borrow();
        self.0.complete(Ok(state.names.contains_key(path) || state.dirs.contains(path)))
    }

    fn try_lock(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<Option<DiskLock>>> {
        if self.crash_now() {
            return pending_forever();
        }
        let mut state = self.0.state.borrow_mut();
        let taking = {
            let mut table = state.locks.table();
            if table.1.contains_key(path) {
                return self.0.complete(Ok(None));
            }
            table.0 += 1;
            let taking = table.0;
            table.1.insert(path.to_path_buf(), taking);
            taking
        };
        let holder = LockHolder { table: Arc::clone(&state.locks.0), path: path.to_path_buf(), taking };
        // The lock file itself is a zero-length file, as flock leaves it.
        if !state.names.contains_key(path) && path.parent().is_some_and(|p| state.dirs.contains(p)) {
            state.inodes.push(Inode::default());
            let inode = state.inodes.len() - 1;
            state.names.insert(path.to_path_buf(), inode);
        }
        self.0.complete(Ok(Some(DiskLock::new(Box::new(holder)))))
    }
}

/// A simulated lock, freed when dropped (unless a crash or the instance's end freed it
/// first, and another taking holds the path now).
struct LockHolder {
    table: Arc<Mutex<(u64, BTreeMap<PathBuf, u64>)>>,
    path: PathBuf,
    taking: u64,
}

impl Drop for SimDisk {
    fn drop(&mut self) {
        LIVE_DISKS.with(|live| live.set(live.get() - 1));
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if table.1.get(&self.path) == Some(&self.taking) {
            table.1.remove(&self.path);
        }
    }
}
