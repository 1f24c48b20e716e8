//! Telling the operator about a run that waits (seed 000 section 7): `server.notify` is run
//! in the manifest's folder, with only the `notify_env` variables, and the waiting record on
//! its standard input, and retried with backoff until it
//! succeeds, as its own task, so it never blocks a call. The record on disk, `warden mcp
//! status` and stderr already tell the operator; the command only makes the news faster.

use std::path::Path;

use crate::env::{Env, LocalBoxFuture, ProcessRequest};
use crate::manifest::ServerConfig;
use crate::store::records::ReadRecord;

/// How long one attempt of the notify command may run.
pub const NOTIFY_TIMEOUT_MS: u64 = 10_000;
/// The first wait between attempts; it doubles up to `NOTIFY_BACKOFF_MAX_MS`.
pub const NOTIFY_BACKOFF_MS: u64 = 1_000;
pub const NOTIFY_BACKOFF_MAX_MS: u64 = 60_000;
/// How long a server that is exiting waits for the notifications it owes (one attempt and its
/// retry); one not delivered by then is owed again at the next start, which notifies every
/// waiting run.
pub const EXIT_WAIT_MS: u64 = NOTIFY_TIMEOUT_MS + NOTIFY_BACKOFF_MS + NOTIFY_TIMEOUT_MS;

/// Waits, `EXIT_WAIT_MS` at most, until the notifications `owed` counts are delivered.
pub async fn deliver_before_exit(env: &Env, owed: &crate::base::sync::WaitGroup) {
    if owed.count() == 0 {
        return;
    }
    env.log(&format!(
        "waiting up to {} s to notify the operator of {} waiting run(s) before exiting",
        EXIT_WAIT_MS / 1000,
        owed.count()
    ));
    let timer = env.clock.sleep(EXIT_WAIT_MS);
    if let crate::base::sync::Either::Right(()) = crate::base::sync::select(owed.wait(), timer).await {
        env.log_at(
            crate::env::Level::Warn,
            "exiting with a notification undelivered; the next start notifies again",
            &[],
        );
    }
}

/// Starts telling the operator about `run`, whose waiting record is `waiting`; the command
/// runs in `folder` (the manifest's).
/// `owed` is held until the operator was notified, so a server that exits waits for it
/// (`EXIT_WAIT_MS` at most).
pub fn spawn(
    env: &Env,
    server: &ServerConfig,
    folder: &Path,
    run: &str,
    waiting: Box<dyn Fn() -> LocalBoxFuture<'static, ReadRecord>>,
    owed: crate::base::sync::WaitGroupGuard,
) {
    if server.notify.is_empty() {
        return;
    }
    let env = env.clone();
    let argv = server.notify.clone();
    let cwd = folder.to_path_buf();
    let variables: Vec<(String, String)> =
        server.notify_env.iter().filter_map(|name| env.process.var(name).map(|value| (name.clone(), value))).collect();
    let run = run.to_string();
    let task_env = env.clone();
    env.spawn.spawn(Box::pin(async move {
        let _owed = owed;
        let env = task_env;
        let details = waiting().await.ok().flatten().unwrap_or_default();
        let mut backoff = NOTIFY_BACKOFF_MS;
        let mut attempt = 1u64;
        loop {
            let request = ProcessRequest {
                argv: argv.clone(),
                cwd: cwd.clone(),
                env: variables.clone(),
                stdin: details.clone(),
                timeout_ms: NOTIFY_TIMEOUT_MS,
            };
            match env.process.run(request).await {
                Ok(outcome) if outcome.exit_code == Some(0) => {
                    env.log(&format!("run {run}: the operator was notified (attempt {attempt})"));
                    return;
                }
                Ok(outcome) => env.log_at(
                    crate::env::Level::Warn,
                    &format!(
                        "run {run}: the notify command failed (attempt {attempt}, exit {:?}); retrying in {} ms",
                        outcome.exit_code, backoff
                    ),
                    &[("run", &run)],
                ),
                Err(error) => env.log_at(
                    crate::env::Level::Warn,
                    &format!(
                        "run {run}: the notify command could not run (attempt {attempt}): {error}; retrying in {backoff} ms"
                    ),
                    &[("run", &run)],
                ),
            }
            env.clock.sleep(backoff).await;
            // Resolved meanwhile (the admin channel removes the record): nothing to tell.
            if matches!(waiting().await, Ok(None)) {
                env.log(&format!("run {run}: no longer waits for an operator; its notification is dropped"));
                return;
            }
            backoff = (backoff * 2).min(NOTIFY_BACKOFF_MAX_MS);
            attempt += 1;
        }
    }));
}
