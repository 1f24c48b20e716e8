//! Where a run's records live: its kept arguments, its journal and its waiting record, as
//! files under `server.journals` (the embedded default) or as lines in the PostgreSQL store
//! that several instances share (issue 28, `docs/design/several-instances.md`). Either way a
//! record is the same checksummed lines, written by the same writer and read by the same
//! strict reader: this module moves lines and knows where they go, not what they say.
//!
//! A write is durable when it returns: a file is fsynced (and its directory, for a new file,
//! with the directories above it made durable once per process); a line in the database is
//! committed. A file's last line may be torn by a crash and is cut by recovery; a database's
//! lines are whole or absent, so there is nothing to cut.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::base::layout::RunFiles;
use crate::env::{Env, LocalBoxFuture, PostgresTarget, RecordKind, RecordWrite};
use crate::store::files;

/// A record's bytes, if it exists, or why it could not be read.
pub type ReadRecord = Result<Option<Vec<u8>>, String>;

/// Where the records are kept.
#[derive(Clone)]
enum Place {
    Files,
    Database(PostgresTarget),
}

/// A run's records, in files or in the database.
pub struct RunRecords {
    env: Env,
    journals: PathBuf,
    place: Place,
    /// Held from a directory's existence check to its parent's fsync: a directory another
    /// run has created but not yet made durable is never taken for a durable one.
    dirs: crate::base::sync::Mutex,
    /// Directories this process has made durable: later runs in them skip the check (the
    /// server never removes a directory).
    durable_dirs: RefCell<BTreeSet<PathBuf>>,
}

impl RunRecords {
    /// Records as files under `journals`.
    pub fn in_files(env: &Env, journals: &Path) -> RunRecords {
        RunRecords::at(env, journals, Place::Files)
    }

    /// Records in the PostgreSQL store at `target`; `journals` keeps the runs' logs.
    pub fn in_database(env: &Env, journals: &Path, target: PostgresTarget) -> RunRecords {
        RunRecords::at(env, journals, Place::Database(target))
    }

    fn at(env: &Env, journals: &Path, place: Place) -> RunRecords {
        RunRecords {
            env: env.clone(),
            journals: journals.to_path_buf(),
            place,
            dirs: crate::base::sync::Mutex::new(),
            durable_dirs: RefCell::new(BTreeSet::new()),
        }
    }

    /// Whether the records are files (an operator reads and resolves them in place).
    pub fn in_files_here(&self) -> bool {
        matches!(self.place, Place::Files)
    }

    fn path(&self, tool: &str, run: &str, kind: RecordKind) -> PathBuf {
        let files = RunFiles::new(&self.journals, tool, run);
        match kind {
            RecordKind::Inputs => files.inputs,
            RecordKind::Journal => files.journal,
            RecordKind::Waiting => files.waiting,
        }
    }

    /// How an operator finds the record: its file's path, or where the database keeps it.
    pub fn name(&self, tool: &str, run: &str, kind: RecordKind) -> String {
        match &self.place {
            Place::Files => self.path(tool, run, kind).display().to_string(),
            Place::Database(_) => format!("run {run}'s {} in the PostgreSQL store", kind.name()),
        }
    }

    /// What `warden resolve --journal` names the run by: its journal's path under the
    /// journals folder, the file itself on files; on the store, where the file would be,
    /// which names the journals folder (the live server's admin channel), the tool and the run.
    pub fn address(&self, tool: &str, run: &str) -> String {
        self.path(tool, run, RecordKind::Journal).display().to_string()
    }

    /// Writes a new record of one line (`line` ends with its newline), durably.
    pub async fn create(&self, tool: &str, run: &str, kind: RecordKind, line: Vec<u8>) -> Result<(), String> {
        self.write_one(tool, run, kind, line, false).await
    }

    /// Writes a record of one line in place of any earlier one, atomically and durably.
    pub async fn replace(&self, tool: &str, run: &str, kind: RecordKind, line: Vec<u8>) -> Result<(), String> {
        self.write_one(tool, run, kind, line, true).await
    }

    /// A record of one line, new or in place of an earlier one (`replace`: a file through a
    /// temporary and a rename; the store's earlier lines removed in the same transaction).
    async fn write_one(
        &self,
        tool: &str,
        run: &str,
        kind: RecordKind,
        line: Vec<u8>,
        replace: bool,
    ) -> Result<(), String> {
        let Place::Database(target) = &self.place else {
            let path = self.path(tool, run, kind);
            self.create_dirs(path.parent().expect("records live in directories")).await?;
            let written = match replace {
                true => files::replace_durably(&self.env, &path, line).await,
                false => files::write_new_durably(&self.env, &path, line).await,
            };
            return written.map_err(|e| format!("{}: {e}", path.display()));
        };
        self.write_line(target, (tool, run), kind, 1, line, replace).await
    }

    /// Appends line `seq` (from 1) of the run's journal (`line` ends with its newline), durably.
    pub async fn append(&self, tool: &str, run: &str, seq: u64, line: Vec<u8>) -> Result<(), String> {
        match &self.place {
            Place::Files => {
                let path = self.path(tool, run, RecordKind::Journal);
                files::append_line_durably(&self.env, &path, line).await.map_err(|e| format!("{}: {e}", path.display()))
            }
            Place::Database(target) => {
                self.write_line(target, (tool, run), RecordKind::Journal, seq, line, false).await
            }
        }
    }

    async fn write_line(
        &self,
        target: &PostgresTarget,
        (tool, run): (&str, &str),
        kind: RecordKind,
        seq: u64,
        mut line: Vec<u8>,
        replace: bool,
    ) -> Result<(), String> {
        assert_eq!(line.pop(), Some(b'\n'), "a record's line ends with its newline");
        let write = RecordWrite { run: run.to_string(), kind, seq, line, replace };
        self.env.state_db.record_write(target, write).await.map_err(|failure| {
            let doubt = if failure.may_have_committed { " (it may have been written)" } else { "" };
            format!("{}: {}{doubt}", self.name(tool, run, kind), failure.message)
        })
    }

    /// The record's bytes as a file holds them (each line with its newline), if it exists.
    pub fn read(&self, tool: &str, run: &str, kind: RecordKind) -> LocalBoxFuture<'static, ReadRecord> {
        (self.reader(tool, run, kind))()
    }

    /// Reads the record each time it is called, borrowing nothing: a task of its own (the
    /// operator's notification, retried) reads it later.
    pub fn reader(&self, tool: &str, run: &str, kind: RecordKind) -> impl Fn() -> LocalBoxFuture<'static, ReadRecord> {
        let (env, name, path) = (self.env.clone(), self.name(tool, run, kind), self.path(tool, run, kind));
        let (place, run) = (self.place.clone(), run.to_string());
        move || -> LocalBoxFuture<'static, ReadRecord> {
            let name = name.clone();
            match &place {
                Place::Files => {
                    let (env, path) = (env.clone(), path.clone());
                    Box::pin(
                        async move { files::read_if_present(&env, &path).await.map_err(|e| format!("{name}: {e}")) },
                    )
                }
                Place::Database(target) => {
                    let read = env.state_db.record_read(target, &run, kind);
                    Box::pin(async move {
                        let lines = read.await.map_err(|failure| format!("{name}: {}", failure.message))?;
                        Ok(lines
                            .map(|lines| lines.into_iter().flat_map(|line| line.into_iter().chain([b'\n'])).collect()))
                    })
                }
            }
        }
    }

    /// Whether the run has the record.
    pub async fn exists(&self, tool: &str, run: &str, kind: RecordKind) -> Result<bool, String> {
        match &self.place {
            Place::Files => {
                let path = self.path(tool, run, kind);
                self.env.disk.exists(&path).await.map_err(|e| format!("{}: {e}", path.display()))
            }
            Place::Database(_) => self.read(tool, run, kind).await.map(|record| record.is_some()),
        }
    }

    /// Removes the record if it exists; says whether it did. `durably`: a removed file's
    /// directory is fsynced too (a removal whose return after a crash recovery handles need
    /// not wait for it). A database's removal is committed when it returns.
    pub async fn remove(&self, tool: &str, run: &str, kind: RecordKind, durably: bool) -> Result<bool, String> {
        match &self.place {
            Place::Files => {
                let path = self.path(tool, run, kind);
                let io = |e: std::io::Error| format!("removing {} failed: {e}", path.display());
                let removed = files::remove_if_present(&self.env, &path).await.map_err(io)?;
                if removed && durably {
                    let dir = path.parent().expect("records live in directories");
                    self.env
                        .disk
                        .fsync_dir(dir)
                        .await
                        .map_err(|e| format!("fsync of {} failed: {e}", dir.display()))?;
                }
                Ok(removed)
            }
            Place::Database(target) => {
                let removed = self.env.state_db.record_remove(target, run, kind).await;
                removed.map_err(|failure| format!("removing {}: {}", self.name(tool, run, kind), failure.message))
            }
        }
    }

    /// The PostgreSQL store these records are kept in, fenced by the serving instance's lease
    /// (`None` for files).
    pub fn store(&self) -> Option<&PostgresTarget> {
        match &self.place {
            Place::Files => None,
            Place::Database(target) => Some(target),
        }
    }

    /// The runs with a record of `kind` in the database, read a page at a time (the file
    /// store's runs are found by listing the journals folder, `run::recovery`).
    pub async fn listed_in_database(&self, kind: RecordKind) -> Result<Vec<String>, String> {
        let Place::Database(target) = &self.place else {
            panic!("the file store's records are listed from their folder");
        };
        let mut runs: Vec<String> = Vec::new();
        loop {
            let after = runs.last().map_or("", String::as_str);
            let page = self.env.state_db.record_runs(target, kind, after).await;
            let page = page.map_err(|failure| format!("listing the runs' {}: {}", kind.name(), failure.message))?;
            let full = page.len() == crate::env::RECORD_RUNS_PAGE;
            runs.extend(page);
            if !full {
                return Ok(runs);
            }
        }
    }

    /// Rewrites a journal without its torn tail (a file's last line cut by a crash): a
    /// temporary file, fsync, rename, fsync of the directory. A database's lines are whole.
    pub async fn cut_torn_tail(&self, tool: &str, run: &str, intact_len: usize) -> Result<(), String> {
        let Place::Files = self.place else {
            return Err(format!("{}: a torn line in the database", self.name(tool, run, RecordKind::Journal)));
        };
        let path = self.path(tool, run, RecordKind::Journal);
        let io = |e: std::io::Error| format!("repairing {} failed: {e}", path.display());
        let bytes = self.env.disk.read(&path).await.map_err(io)?;
        files::replace_durably(&self.env, &path, bytes[..intact_len].to_vec()).await.map_err(io)
    }

    /// Creates `dir` under the journals durably, one run at a time (`dirs`), once per process.
    async fn create_dirs(&self, dir: &Path) -> Result<(), String> {
        if self.durable_dirs.borrow().contains(dir) {
            return Ok(());
        }
        let _held = self.dirs.lock().await;
        if !self.durable_dirs.borrow().contains(dir) {
            files::create_dirs_durably(&self.env, &self.journals, dir)
                .await
                .map_err(|e| format!("creating {} failed: {e}", dir.display()))?;
            self.durable_dirs.borrow_mut().insert(dir.to_path_buf());
        }
        Ok(())
    }
}
