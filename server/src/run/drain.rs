//! Stopping well: a SIGTERM, SIGINT or SIGHUP drains the server instead of cutting it. No new
//! call is admitted; each run in progress finishes the action it is in and
//! stops before beginning another (`RunEnd::Drained`: nothing in doubt, resumed at the next
//! start); answers owed are written. What is still running when `server.shutdown_grace` runs
//! out, or when a second signal comes, is left exactly as a crash would leave it: recovery
//! is the same rule for both.
//!
//! The end of stdin first lets the calls already read be answered, within the grace (a
//! one-shot `echo ... | warden mcp` gets its answer); past the grace, or at a signal, it drains.

use crate::base::sync::{select, Either, WaitGroup};
use crate::env::Env;
use crate::run::runs::Runs;

/// After a first shutdown signal: drains (`drain`), unless a second signal comes first, which
/// stops at once (`Err`), leaving what runs as a crash would.
pub async fn drain_unless_signalled_again(env: &Env, runs: &Runs, calls: &WaitGroup) -> Result<(), String> {
    env.log("a shutdown signal (SIGTERM, SIGINT or SIGHUP) came: draining; a second one stops at once");
    drain_until_signal(env, runs, calls, "a shutdown signal", 2).await
}

/// The end of stdin: the calls already read, and the runs executing, are let end within the
/// grace; past it, or at a first shutdown signal, the server drains (a second stops at once).
pub async fn after_end_of_input(env: &Env, runs: &Runs, calls: &WaitGroup) -> Result<(), String> {
    let (running, executing) = (calls.count(), runs.runs_executing());
    if running == 0 && executing == 0 {
        return Ok(());
    }
    let grace_ms = runs.catalog.manifest.server.shutdown_grace_ms;
    env.log(&format!(
        "stdin closed: letting {running} call(s) in progress and {executing} run(s) executing end within the grace \
         of {}; past it, or at a shutdown signal, the server drains",
        crate::store::ledger::duration_text(grace_ms)
    ));
    let (calls_done, runs_done) = (calls.wait(), runs.executing.wait());
    let ended = Box::pin(async move {
        calls_done.await;
        runs_done.await;
    });
    let cut = Box::pin(select(env.clock.sleep(grace_ms), env.process.shutdown_signal(1)));
    match select(ended, cut).await {
        Either::Left(()) => Ok(()),
        Either::Right(Either::Left(())) => {
            env.log("stdin closed and the grace ran out: draining; a shutdown signal stops at once");
            drain_until_signal(env, runs, calls, "the end of stdin, past the grace", 1).await
        }
        Either::Right(Either::Right(())) => drain_unless_signalled_again(env, runs, calls).await,
    }
}

/// Drains, unless shutdown signal number `nth` comes first (then `Err`, as a crash).
async fn drain_until_signal(env: &Env, runs: &Runs, calls: &WaitGroup, why: &str, nth: u64) -> Result<(), String> {
    runs.start_draining(why);
    let second = env.process.shutdown_signal(nth);
    match select(Box::pin(drain(env, runs, calls)), second).await {
        Either::Left(drained) => drained,
        Either::Right(()) => Err(format!(
            "{} shutdown signal while draining: stopping at once, as a crash would; runs in progress are recovered \
             at the next start",
            if nth == 1 { "a" } else { "a second" }
        )),
    }
}

/// Waits, within the grace, for the calls being answered (`calls`) and every run executing to
/// end. `Err` names what was left when the grace ran out.
pub async fn drain(env: &Env, runs: &Runs, calls: &WaitGroup) -> Result<(), String> {
    let grace_ms = runs.catalog.manifest.server.shutdown_grace_ms;
    let (calls_done, executing) = (calls.wait(), runs.executing.wait());
    let both = Box::pin(async move {
        calls_done.await;
        executing.await;
    });
    match select(both, env.clock.sleep(grace_ms)).await {
        Either::Left(()) => {
            let open = runs.ledger.state().runs.values().filter(|entry| entry.is_open()).count();
            env.log(&format!(
                "drained: every call in progress was answered, and no run is left in the middle of an action; {open} \
                 run(s) are unfinished (stopped between actions, waiting for input or for an operator): the next \
                 start of this same version goes on with them, so let them end (warden mcp status) before changing \
                 a tool or upgrading"
            ));
            Ok(())
        }
        Either::Right(()) => Err(format!(
            "the shutdown grace of {} ran out with {} run(s) still executing and {} call(s) unanswered: stopping as a \
             crash would; the next start recovers them by the same rules (an action cut in flight that is not safe \
             to send again waits for an operator: warden mcp status)",
            crate::store::ledger::duration_text(grace_ms),
            runs.runs_executing(),
            calls.count()
        )),
    }
}

/// The notifications the server owes, delivered before it exits (bounded by their own wait),
/// unless a second shutdown signal comes first.
pub async fn deliver_before_exit(env: &Env, runs: &Runs) -> Result<(), String> {
    let delivering = Box::pin(crate::run::notify::deliver_before_exit(env, &runs.notifications_owed));
    match select(delivering, env.process.shutdown_signal(2)).await {
        Either::Left(()) => Ok(()),
        Either::Right(()) => Err("a second shutdown signal: exiting before the operator's notifications were \
                                  delivered; the next start notifies again"
            .to_string()),
    }
}

/// The start's recovery, bounded as a drain is: a shutdown signal during it lets the runs it
/// resumed finish the action they are in (they stop before beginning another), within the
/// grace; past the grace, or at a second signal, the start stops as a crash would, and the
/// next start recovers by the same rules.
pub async fn bounded_by_a_signal<T>(
    env: &Env,
    grace_ms: u64,
    work: impl std::future::Future<Output = T>,
) -> Result<T, String> {
    let cut = async {
        env.process.shutdown_signal(1).await;
        match select(env.clock.sleep(grace_ms), env.process.shutdown_signal(2)).await {
            Either::Left(()) => format!(
                "a shutdown signal came during recovery, and the shutdown grace of {} ran out before the runs it \
                 resumed ended their actions: stopping as a crash would; the next start recovers them by the same rules",
                crate::store::ledger::duration_text(grace_ms)
            ),
            Either::Right(()) => "a second shutdown signal during recovery: stopping at once, as a crash would; the \
                                  next start recovers the runs by the same rules"
                .to_string(),
        }
    };
    match select(Box::pin(work), Box::pin(cut)).await {
        Either::Left(done) => Ok(done),
        Either::Right(why) => Err(why),
    }
}
