//! Durable file operations over `Env::disk`, as the journal, the waiting records, the inputs
//! files and the request-state key use them: a new file and its directory entry fsynced, a
//! file replaced through a temporary, an append fsynced, directories made durable one level at
//! a time. The record formats themselves (`journal.rs`, `record.rs`) do no I/O.

use std::path::Path;

use crate::env::Env;
use crate::store::journal::JournalRecord;
use crate::store::record;

/// Creates `dir` and its missing ancestors under `root`, and fsyncs each one's parent so the
/// directories survive a crash: a directory found existing too, since the process that
/// created it may have stopped before its fsync (a process crash keeps the entry in the page
/// cache, a power loss later would not). Callers do this once per directory per process.
pub async fn create_dirs_durably(env: &Env, root: &Path, dir: &Path) -> std::io::Result<()> {
    let relative = dir.strip_prefix(root).expect("directories are created under the journals root");
    let mut current = root.to_path_buf();
    for part in relative.components() {
        let parent = current.clone();
        current.push(part);
        if !env.disk.exists(&current).await? {
            env.disk.create_dir_all(&current).await?;
        }
        env.disk.fsync_dir(&parent).await?;
    }
    Ok(())
}

/// Reads a file that may be absent (`None`): one operation, not a look and then a read.
pub async fn read_if_present(env: &Env, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match env.disk.read(path).await {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Removes a file that may be absent; says whether it was there.
pub async fn remove_if_present(env: &Env, path: &Path) -> std::io::Result<bool> {
    match env.disk.remove(path).await {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// Writes a new file durably: write, fsync, fsync of its directory.
pub async fn write_new_durably(env: &Env, path: &Path, bytes: Vec<u8>) -> std::io::Result<()> {
    env.disk.write_new_durably(path, bytes).await
}

/// Writes a file that may exist, atomically and durably: a temporary file, fsync, rename,
/// fsync of its directory. A crash leaves the old contents or the new, never neither.
pub async fn replace_durably(env: &Env, path: &Path, bytes: Vec<u8>) -> std::io::Result<()> {
    let temp = path.with_extension("tmp");
    env.disk.write(&temp, bytes).await?;
    env.disk.fsync(&temp).await?;
    env.disk.rename(&temp, path).await?;
    env.disk.fsync_dir(path.parent().expect("files live in directories")).await
}

/// Appends one record and fsyncs it.
pub async fn append_durably(env: &Env, path: &Path, record: &JournalRecord) -> std::io::Result<()> {
    append_line_durably(env, path, record::encode(record)).await
}

/// Appends one encoded record line and fsyncs it.
pub async fn append_line_durably(env: &Env, path: &Path, line: Vec<u8>) -> std::io::Result<()> {
    env.disk.append_durably(path, line).await
}
