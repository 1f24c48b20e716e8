//! Retention and compaction (seed 000 sections 6 and 7): at start and once a day, the log
//! and then the journal of each run settled longer ago than `server.keep` days are deleted
//! (never anything unsettled or holding an unexpired `once` key), then the ledger is
//! compacted to the runs that still matter.

use crate::env::RecordKind;
use crate::manifest::Keep;
use crate::run::runs::Runs;
use crate::run::store::Fatal;
use crate::store::ledger::{RunEntry, RunPhase};

/// How often the sweep runs while the server is up.
pub const SWEEP_INTERVAL_MS: u64 = 24 * 3600 * 1000;
const DAY_MS: u64 = 24 * 3600 * 1000;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    pub deleted_runs: usize,
    pub dropped_from_ledger: usize,
}

fn keep_ms(runs: &Runs) -> Option<u64> {
    match runs.catalog.manifest.server.keep {
        Keep::Days(days) => Some(days.saturating_mul(DAY_MS)),
        Keep::Forever => None,
    }
}

fn once_holds(runs: &Runs, entry: &RunEntry, now: u64) -> bool {
    let Some(keep) = runs.catalog.tool(&entry.tool).and_then(|t| t.config.once.as_ref()).map(|o| o.keep_ms) else {
        return false;
    };
    entry.once.is_some() && entry.once_expires_at(keep).is_none_or(|at| at > now)
}

/// Whether a settled run's files are past `server.keep` and may be deleted.
fn files_expired(runs: &Runs, entry: &RunEntry, now: u64) -> bool {
    let (RunPhase::Settled { at_ms, .. }, Some(keep)) = (&entry.phase, keep_ms(runs)) else {
        return false;
    };
    at_ms.saturating_add(keep) <= now && !once_holds(runs, entry, now)
}

pub async fn sweep(runs: &Runs) -> Result<Swept, Fatal> {
    // Files are deleted on what the ledger says: only once all of it is durable.
    runs.ledger.flush().await?;
    let now = runs.ledger.stamp();
    let expired: Vec<RunEntry> =
        runs.ledger.state().runs.values().filter(|e| files_expired(runs, e, now)).cloned().collect();
    let mut swept = Swept::default();
    for entry in &expired {
        let (tool, run) = (&entry.tool, &entry.run);
        let had_journal = runs.records.exists(tool, run, RecordKind::Journal).await.unwrap_or(false);
        // The log first: a failure part-way leaves a journal without a log, never the reverse.
        runs.remove_if_present(&runs.files(tool, run).log).await?;
        runs.remove_record(tool, run, RecordKind::Journal, true).await?;
        if had_journal {
            swept.deleted_runs += 1;
        }
    }
    let keep = |entry: &RunEntry| -> bool {
        match &entry.phase {
            RunPhase::Open => true,
            RunPhase::Released { .. } => false,
            RunPhase::Settled { .. } => {
                let in_window = runs
                    .catalog
                    .tool(&entry.tool)
                    .and_then(|t| t.config.quota.as_ref())
                    .is_some_and(|q| entry.reserved_at_ms > now.saturating_sub(q.window_ms));
                !files_expired(runs, entry, now) || in_window || once_holds(runs, entry, now)
            }
        }
    };
    swept.dropped_from_ledger = runs.ledger.compact(keep).await?;
    if swept.deleted_runs > 0 || swept.dropped_from_ledger > 0 {
        runs.env.log(&format!(
            "retention: deleted the files of {} run(s); compaction dropped {} run(s) from the ledger",
            swept.deleted_runs, swept.dropped_from_ledger
        ));
    }
    Ok(swept)
}
