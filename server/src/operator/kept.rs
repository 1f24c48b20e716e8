//! What the operator's commands read, wherever the manifest keeps it: the ledger's state and
//! the runs' records, as files under `server.journals` or in the PostgreSQL store (read beside
//! a live server, without its lock: the store's lines are committed, a file's last line may be
//! mid-append and is then left out).

use std::path::PathBuf;

use crate::env::{Env, PostgresTarget};
use crate::store::ledger::{self, State, LEDGER_FILE, SHARED_LEDGER_NAME};
use crate::store::records::RunRecords;
use crate::store::shared::SharedLedger;

/// The ledger as it is now, what it is called, and where the runs' records are.
pub struct Kept {
    pub state: State,
    pub ledger: PathBuf,
    pub records: RunRecords,
}

impl Kept {
    /// Reads the ledger of the manifest's store: the files under `journals`, or the store at
    /// `store`.
    pub async fn read(env: &Env, journals: &std::path::Path, store: Option<PostgresTarget>) -> Result<Kept, String> {
        Ok(match store {
            None => Kept {
                state: ledger::read_on_disk(env, journals).await?,
                ledger: journals.join(LEDGER_FILE),
                records: RunRecords::in_files(env, journals),
            },
            Some(target) => {
                let shared = SharedLedger::open(env, target.clone()).await;
                let shared = shared.map_err(|e| format!("{SHARED_LEDGER_NAME}: {e}"))?;
                let state = shared.state().clone();
                Kept {
                    state,
                    ledger: SHARED_LEDGER_NAME.into(),
                    records: RunRecords::in_database(env, journals, target),
                }
            }
        })
    }
}
