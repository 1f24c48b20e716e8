//! Which instance owns each open run of the PostgreSQL store (issue 28, step 3): a run is its
//! admitting instance's from its reserve (`OwnerChange::Take`, in the reserve's transaction)
//! until its settle or release, and another's only once that instance's lease has ended and
//! the other took its runs over (`StateDb::take_over`). Only an owner acts on a run; recovery
//! at a start takes up the runs its slot owns, and the open runs a Warden before owners left
//! without one (claimed, one instance each).

use std::collections::BTreeMap;

use crate::env::{Env, PostgresTarget};

/// Every open run's owner: run -> instance, read a page at a time.
pub async fn listed(env: &Env, target: &PostgresTarget) -> Result<BTreeMap<String, String>, String> {
    let mut owners = BTreeMap::new();
    let mut after = String::new();
    loop {
        let page = env.state_db.owners(target, &after).await;
        let page = page.map_err(|failure| format!("listing the runs' owners: {}", failure.message))?;
        let full = page.len() == crate::env::RECORD_RUNS_PAGE;
        if let Some((last, _)) = page.last() {
            after = last.clone();
        }
        owners.extend(page);
        if !full {
            return Ok(owners);
        }
    }
}

/// Makes `run`, open and without an owner, this instance's if no other claimed it first and
/// the shared ledger still ends at line `after` (`None`: it does not; read on and decide again).
pub async fn claim(env: &Env, target: &PostgresTarget, run: &str, after: u64) -> Result<Option<bool>, String> {
    let claimed = env.state_db.claim(target, run, after).await;
    claimed.map_err(|failure| format!("claiming run {run}: {}", failure.message))
}

/// The instance a fenced target writes as.
pub fn me(target: &PostgresTarget) -> &str {
    &target.fence.as_ref().expect("a serving instance's store is fenced").instance
}
