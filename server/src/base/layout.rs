//! Where things live under `server.journals` (seed 000 sections 6 and 7): a run's files at
//! `<tool>/<id[0..2]>/<id>.journal`, `.inputs.json`, `.log.jsonl`, `waiting/<id>.json` for a
//! run that waits for an operator, and the server's lock. Names only; no I/O.

use std::path::{Path, PathBuf};

/// The file a serving process holds an exclusive lock on, beside the journals: one server per
/// journals directory, and `warden resolve` refuses while it is held.
pub const SERVER_LOCK_FILE: &str = "server.lock";

/// The folder of waiting records: one file per run that waits for a person.
pub const WAITING_DIR: &str = "waiting";

/// Where one run's files live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunFiles {
    pub dir: PathBuf,
    pub journal: PathBuf,
    pub inputs: PathBuf,
    pub log: PathBuf,
    pub waiting: PathBuf,
}

impl RunFiles {
    pub fn new(journals: &Path, tool: &str, run: &str) -> RunFiles {
        assert!(run.len() >= 2 && run.is_ascii(), "run ids are ascii and long enough to shard");
        let dir = journals.join(tool).join(&run[..2]);
        RunFiles {
            journal: dir.join(format!("{run}.journal")),
            inputs: dir.join(format!("{run}.inputs.json")),
            log: dir.join(format!("{run}.log.jsonl")),
            waiting: journals.join(WAITING_DIR).join(format!("{run}.json")),
            dir,
        }
    }
}

/// The folder holding `path`: `.` for a bare file name, whose `parent()` is the empty path
/// (which no directory operation accepts: `warden mcp manifest.json` in the manifest's folder).
pub fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_sharded_by_the_first_two_characters() {
        let files = RunFiles::new(Path::new("/j"), "refund", "ab0123");
        assert_eq!(files.journal, Path::new("/j/refund/ab/ab0123.journal"));
        assert_eq!(files.inputs, Path::new("/j/refund/ab/ab0123.inputs.json"));
        assert_eq!(files.log, Path::new("/j/refund/ab/ab0123.log.jsonl"));
        assert_eq!(files.waiting, Path::new("/j/waiting/ab0123.json"));
    }
}
