//! A serving instance's lease on the PostgreSQL store (issue 28, step 3): each start takes a
//! slot of the store (`StateDb::hold_slot`) and registers under its name with the next epoch,
//! which fences every write the store takes from it (`env::Fence`: the database refuses a
//! write, in its own transaction, once the lease ended or a later start in the slot took it),
//! renews it a third of a lease at a time, and stops the server when it is lost. A write whose
//! check passed before the lease ended still commits unless a later registration or takeover
//! locked the row first (they wait for it); none is accepted after. The runs of an instance
//! whose lease ended are taken over by another (`run::takeover`), or by the next start in its
//! slot once the lease ends (`commands::wait_out_the_replaced_lease`).

use crate::env::{DbFailure, Env, Fence, PostgresTarget};

/// How often a lease is renewed, as a share of its length (`server.store.postgres.lease`):
/// twice more before it could end, so one lost renewal costs nothing.
pub const RENEWALS_PER_LEASE: u64 = 3;

/// A start's registration: its target fenced by the lease, when it asked
/// (`Clock::monotonic_ms`; the lease began after that), and how long the epoch it replaced
/// held its lease still.
pub struct Registered {
    pub target: PostgresTarget,
    pub at: u64,
    /// Until when, on this instance's monotonic clock, the lease surely lasts (`lasts_until`).
    pub lasts_until: u64,
    pub replaced_remaining_ms: u64,
}

/// Until when, on the instance's monotonic clock, a lease the database said has `remaining_ms`
/// left lasts at the least: the database confirmed it after `asked_at` (read before asking),
/// and its clock may run faster than the instance's by `LEASE_DRIFT_PER_MILLE`.
pub fn lasts_until(asked_at: u64, remaining_ms: u64) -> u64 {
    let drift = remaining_ms.div_ceil(1000).saturating_mul(crate::limits::LEASE_DRIFT_PER_MILLE);
    asked_at.saturating_add(remaining_ms.saturating_sub(drift))
}

/// Registers the serving instance `name` with a lease of `lease_ms`.
pub async fn register(env: &Env, target: PostgresTarget, name: &str, lease_ms: u64) -> Result<Registered, DbFailure> {
    let asked_at = env.clock.monotonic_ms();
    let lease = env.state_db.register(&target, name, lease_ms).await?;
    let fence = Fence { instance: name.to_string(), epoch: lease.epoch };
    env.log(&format!(
        "registered as instance `{name}` with lease epoch {} ({} ms, renewed every {} ms)",
        lease.epoch,
        lease_ms,
        lease_ms / RENEWALS_PER_LEASE
    ));
    Ok(Registered {
        target: PostgresTarget { fence: Some(fence), ..target },
        at: asked_at,
        lasts_until: lasts_until(asked_at, lease.remaining_ms),
        replaced_remaining_ms: lease.replaced_remaining_ms,
    })
}

/// Renews the lease `target` is fenced by, granted at `registered_at` (`Clock::monotonic_ms`),
/// until it is lost, and says why: the database says it ended (or was taken), or no renewal
/// got through for a whole lease. The server then stops. A renewal may take a third of the
/// lease at most (connecting included), so a slow one fails in time for the next.
/// Each renewal's `lasts_until` is told to `confirmed` (the action rule reads it).
pub async fn renew_until_lost(
    env: &Env,
    target: &PostgresTarget,
    lease_ms: u64,
    registered_at: u64,
    confirmed: &dyn Fn(u64),
) -> String {
    let fence = target.fence.clone().expect("a serving instance's store is fenced");
    let every = lease_ms / RENEWALS_PER_LEASE;
    let quick = PostgresTarget {
        connect_timeout_ms: target.connect_timeout_ms.min(every),
        statement_timeout_ms: target.statement_timeout_ms.min(every),
        ..target.clone()
    };
    let mut renewed_at = registered_at;
    loop {
        // The next renewal is due a third of a lease after the last one got through (or was
        // tried), however long the start took since the registration.
        let since = env.clock.monotonic_ms().saturating_sub(renewed_at);
        env.clock.sleep(every.saturating_sub(since)).await;
        let tried_at = env.clock.monotonic_ms();
        match env.state_db.renew(&quick, &fence.instance, fence.epoch, lease_ms).await {
            Ok(Some(lease)) => {
                renewed_at = tried_at;
                confirmed(lasts_until(tried_at, lease.remaining_ms));
            }
            Ok(None) => return fence.refusal(),
            Err(failure) if env.clock.monotonic_ms().saturating_sub(renewed_at) >= lease_ms => {
                return format!(
                    "the lease at epoch {} could not be renewed for a whole lease: {}",
                    fence.epoch, failure.message
                )
            }
            Err(failure) => {
                env.log(&format!(
                    "renewing the lease at epoch {} failed; trying again: {}",
                    fence.epoch, failure.message
                ));
                // Tried again a third of a lease after this attempt, not at once.
                let failed_for = env.clock.monotonic_ms().saturating_sub(tried_at);
                env.clock.sleep(every.saturating_sub(failed_for)).await;
            }
        }
    }
}
