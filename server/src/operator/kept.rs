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
    /// On the PostgreSQL store: who serves it, and who owns each open run.
    pub instances: Option<Instances>,
}

/// The instances registered on the PostgreSQL store, and each open run's owner.
pub struct Instances {
    /// Name -> (epoch, ms its lease has left: 0 when it ended).
    pub leases: Vec<(String, crate::env::Lease)>,
    pub owners: std::collections::BTreeMap<String, String>,
}

impl Instances {
    /// The instances whose lease has not ended: they serve the store.
    pub fn serving(&self) -> impl Iterator<Item = &(String, crate::env::Lease)> {
        self.leases.iter().filter(|(_, lease)| lease.remaining_ms > 0)
    }
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
                instances: None,
            },
            Some(target) => {
                let shared = SharedLedger::open(env, target.clone()).await;
                let shared = shared.map_err(|e| format!("{SHARED_LEDGER_NAME}: {e}"))?;
                let state = shared.state().clone();
                let leases = env.state_db.instances(&target).await;
                let leases = leases.map_err(|failure| format!("listing the store's instances: {}", failure.message))?;
                let owners = crate::store::owners::listed(env, &target).await?;
                Kept {
                    state,
                    ledger: SHARED_LEDGER_NAME.into(),
                    records: RunRecords::in_database(env, journals, target),
                    instances: Some(Instances { leases, owners }),
                }
            }
        })
    }
}
