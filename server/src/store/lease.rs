//! The serving instance's lease on the PostgreSQL store (issue 28, step 3 in part): each start
//! registers with the next epoch, which fences every write the store takes from it
//! (`env::Fence`: the database refuses a write, in its own transaction, once the lease ended
//! or a later start took it), renews it a third of a lease at a time, and stops the server
//! when it is lost. An instance paused past its lease (a stall, a cut connection) therefore
//! writes nothing more: its next start, or the instance that replaced it, recovers its runs.
//!
//! One instance serves a store (the sole-instance lock), so it registers under one name;
//! several instances, each owning its runs, come with takeover.

use crate::env::{DbFailure, Env, Fence, PostgresTarget};

/// How often a lease is renewed, as a share of its length (`server.store.postgres.lease`):
/// twice more before it could end, so one lost renewal costs nothing.
pub const RENEWALS_PER_LEASE: u64 = 3;
/// The name the sole serving instance registers under.
pub const SOLE_INSTANCE: &str = "sole";

/// Registers the serving instance with a lease of `lease_ms` and returns `target` fenced by it,
/// with when it asked (`Clock::monotonic_ms`; the lease began after that).
pub async fn register(env: &Env, target: PostgresTarget, lease_ms: u64) -> Result<(PostgresTarget, u64), DbFailure> {
    let asked_at = env.clock.monotonic_ms();
    let lease = env.state_db.register(&target, SOLE_INSTANCE, lease_ms).await?;
    let fence = Fence { instance: SOLE_INSTANCE.to_string(), epoch: lease.epoch };
    env.log(&format!(
        "registered as instance `{SOLE_INSTANCE}` with lease epoch {} ({} ms, renewed every {} ms)",
        lease.epoch,
        lease_ms,
        lease_ms / RENEWALS_PER_LEASE
    ));
    Ok((PostgresTarget { fence: Some(fence), ..target }, asked_at))
}

/// Renews the lease `target` is fenced by, granted at `registered_at` (`Clock::monotonic_ms`),
/// until it is lost, and says why: the database says it ended (or was taken), or no renewal
/// got through for a whole lease. The server then stops. A renewal may take a third of the
/// lease at most (connecting included), so a slow one fails in time for the next.
pub async fn renew_until_lost(env: &Env, target: &PostgresTarget, lease_ms: u64, registered_at: u64) -> String {
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
            Ok(Some(_)) => renewed_at = tried_at,
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
