//! Where a journals directory's runs are kept: in its own files, or in the PostgreSQL store a
//! manifest named (issue 28). A manifest switched from one to the other would otherwise abandon
//! the runs still open in the first place (their reserves never settled, their actions never
//! finished), so the directory remembers the place in `server.store` and a start on another
//! place is checked first (`commands.rs`). A directory without the file keeps its runs in
//! files: every directory made before the store existed does.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::env::Env;
use crate::manifest::Store;
use crate::store::{files, record};

/// The file, beside the journals, naming where the runs are kept.
pub const STORE_PLACE_FILE: &str = "server.store";

/// The most bytes the file may hold (one short line): a bigger one is not Warden's.
const PLACE_BYTES_MAX: usize = 1024;

/// The file's one record.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields, tag = "kept_in", rename_all = "snake_case")]
enum PlaceRecord {
    /// A struct variant: serde lets a unit variant of a tagged enum carry unknown keys.
    Files {},
    /// The store at the URL in environment variable `url_env` (the variable's name: never
    /// the URL, which may hold a password).
    Postgres { url_env: String },
}

pub fn path(journals: &Path) -> PathBuf {
    journals.join(STORE_PLACE_FILE)
}

/// Where the runs of `journals` are kept, as the directory last said (files when it never
/// said): a damaged or foreign file is refused, naming it.
pub async fn read(env: &Env, journals: &Path) -> Result<Store, String> {
    let file = path(journals);
    let named = |problem: String| format!("{}: {problem}", file.display());
    let Some(bytes) = files::read_if_present(env, &file).await.map_err(|e| named(e.to_string()))? else {
        return Ok(Store::Files);
    };
    if bytes.len() > PLACE_BYTES_MAX {
        return Err(named(format!(
            "{} bytes, over the limit of {PLACE_BYTES_MAX}: not a file Warden wrote",
            bytes.len()
        )));
    }
    let line = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let place: PlaceRecord = record::decode(line).map_err(|problem| {
        named(format!("{problem}; it says where this directory's runs are kept: restore it, or remove it if they are all in files"))
    })?;
    Ok(match place {
        PlaceRecord::Files {} => Store::Files,
        PlaceRecord::Postgres { url_env } => Store::Postgres { url_env },
    })
}

/// Records, durably, that the runs of `journals` are kept in `store` from now on.
pub async fn write(env: &Env, journals: &Path, store: &Store) -> Result<(), String> {
    let place = match store {
        Store::Files => PlaceRecord::Files {},
        Store::Postgres { url_env } => PlaceRecord::Postgres { url_env: url_env.clone() },
    };
    let line = record::encode(&place);
    assert!(line.len() <= PLACE_BYTES_MAX, "a place record of {} bytes", line.len());
    let file = path(journals);
    files::replace_durably(env, &file, line).await.map_err(|e| format!("{}: {e}", file.display()))
}

/// The words for `store` in a message.
pub fn describe(store: &Store) -> String {
    match store {
        Store::Files => "the files of this journals directory".into(),
        Store::Postgres { url_env } => format!("the PostgreSQL store at ${url_env}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record as written reads back as what it says, and a foreign key is refused.
    #[test]
    fn a_place_reads_back_as_written_and_nothing_else_is_taken() {
        for place in [PlaceRecord::Postgres { url_env: "WARDEN_STORE_URL".into() }, PlaceRecord::Files {}] {
            let line = record::encode(&place);
            assert_eq!(record::decode::<PlaceRecord>(line.strip_suffix(b"\n").unwrap()).unwrap(), place);
        }
        let foreign = record::encode(&serde_json::json!({"kept_in": "files", "url": "postgres://x"}));
        assert!(record::decode::<PlaceRecord>(foreign.strip_suffix(b"\n").unwrap()).is_err());
    }
}
