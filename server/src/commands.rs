//! The operator's commands, written against `Env` so the simulator can drive them too.
//! The binary (`main.rs`) only parses arguments and prints what these return.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde_json::json;

use crate::base::sync::{select, Either};
use crate::catalog::{read_manifest, Catalog};
use crate::env::{DiskLock, Env, PostgresTarget};
use crate::manifest::Store;
use crate::operator::admin::Request::{Resolve, Resume};
use crate::protocol::http::HttpOptions;
use crate::protocol::Connection;
use crate::run::runs::Runs;
use crate::run::{recovery, retention};
use crate::store::lease::Registered;
use crate::store::ledger::Ledger;

/// How long a second server waits for `server.lock` before refusing to start (an SDK's
/// probe, or a restart, may still be letting go).
pub const LOCK_WAIT_MS: u64 = 5000;
const LOCK_RETRY_MS: u64 = 100;

/// `warden mcp <manifest>`: load everything, take the lock, recover, then serve on the
/// protocol stream until EOF. An error here stops the server before it answers anything.
/// `metrics_listen`: where to serve `/metrics` (loopback only), if anywhere.
pub async fn serve_mcp(
    env: &Env,
    manifest_path: &Path,
    metrics_listen: Option<core::net::SocketAddr>,
) -> Result<(), String> {
    // Listening for signals first: one during recovery stops its runs between actions too.
    let shutdown = env.process.shutdown_signal(1);
    metrics_listen.map(crate::protocol::metrics::check_listen).transpose()?;
    let opened = open_server(env, manifest_path, Vec::new()).await?;
    if let Some(address) = metrics_listen {
        crate::protocol::metrics::spawn_listener(env, &opened.runs, address);
    }
    let connection = Connection::new(Rc::clone(&opened.runs));
    // Registered before the first request is read: a signal from then on drains, while
    // requests are still read and answered (a call refused: the server is stopping).
    let mut serving = Box::pin(connection.serve());
    let signalled = matches!(select(&mut serving, shutdown).await, Either::Right(()));
    if !signalled {
        crate::run::drain::after_end_of_input(env, &opened.runs, connection.calls_in_progress()).await?;
    } else {
        let drain = crate::run::drain::drain_unless_signalled_again(env, &opened.runs, connection.calls_in_progress());
        let mut drain = Box::pin(drain);
        match select(&mut serving, &mut drain).await {
            // Stdin ended during the drain: the drain still bounds the wait.
            Either::Left(()) => drain.await?,
            Either::Right(drained) => drained?,
        }
    }
    if let Some(message) = opened.runs.fatal_message() {
        return Err(message);
    }
    crate::run::drain::deliver_before_exit(env, &opened.runs).await?;
    crate::operator::admin::remove_socket(&opened.runs).await;
    env.log(match signalled {
        true => "exiting: drained after a shutdown signal",
        false => "exiting: the protocol stream ended (the client closed stdin, or is gone)",
    });
    Ok(())
}

/// Serves the manifest's tools over Streamable HTTP until listening fails or a durable write
/// fails.
pub async fn serve_http(env: &Env, manifest_path: &Path, options: HttpOptions) -> Result<(), String> {
    // Listening for signals first: one during recovery stops its runs between actions too.
    drop(env.process.shutdown_signal(1));
    options.metrics_listen.map(crate::protocol::metrics::check_listen).transpose()?;
    let auth = crate::protocol::http::authentication(env, &options).await?;
    let opened = open_server(env, manifest_path, auth.secrets()).await?;
    if let Some(address) = options.metrics_listen {
        crate::protocol::metrics::spawn_listener(env, &opened.runs, address);
    }
    let served = crate::protocol::http::serve(env, &opened.runs, auth, &options).await;
    if served.is_ok() {
        crate::operator::admin::remove_socket(&opened.runs).await;
    }
    served
}

/// A server ready to answer, whatever its transport: the manifest loaded and checked,
/// recovery and retention done, the daily sweep started; the journals' lock held while it
/// lives.
pub struct OpenServer {
    pub runs: Rc<Runs>,
    /// The journals' lock, held while serving runs kept in files; on the PostgreSQL store only
    /// while starting (instances on one journals folder share it: each run's log is its own
    /// file, and the store's slots keep the instances apart).
    _lock: Option<DiskLock>,
}

/// Opens the server of `manifest_path`. `transport_secrets` (an HTTP bearer token) are
/// scrubbed from every output like the grants' secrets.
pub async fn open_server(
    env: &Env,
    manifest_path: &Path,
    transport_secrets: Vec<String>,
) -> Result<OpenServer, String> {
    let catalog = Rc::new(load(env, manifest_path).await?);
    catalog.check_secrets(env)?;
    let pinned = crate::catalog::tool_lock::verify(env, &catalog).await?;
    initialize_databases(env, &catalog).await?;
    let journals = catalog.manifest.server.journals.clone();
    create_root(env, &journals).await?;
    let lock = take_lock(env, &journals).await?;
    check_the_place(env, manifest_path, &journals, &catalog.manifest.server.store).await?;
    let key = crate::run::input::load_key(env, &journals).await?;
    // On the store, instances share the journals folder (each run's log is its own file, and
    // the store's slots keep the instances apart): its lock is held only for the place and the
    // key, not while the ledger is read.
    let _lock = match &catalog.manifest.server.store {
        Store::Files => Some(lock),
        Store::Postgres { .. } => {
            drop(lock);
            None
        }
    };
    let (ledger, records, sole) = match &catalog.manifest.server.store {
        Store::Files => {
            let ledger = Ledger::open(env, &journals).await.map_err(|e| e.to_string())?;
            (ledger, crate::store::records::RunRecords::in_files(env, &journals), None)
        }
        Store::Postgres { url_env } => open_store(env, &catalog, manifest_path, url_env).await?,
    };
    let mut runs = Runs::new(env.clone(), Rc::clone(&catalog), ledger, records);
    runs.secrets.extend(transport_secrets);
    // The store's URL may hold a password: scrubbed wherever a message could carry it.
    if let Store::Postgres { url_env } = &catalog.manifest.server.store {
        runs.secrets.extend(env.process.var(url_env).filter(|url| !url.is_empty()));
    }
    runs.inputs.set_key(key);
    env.log_secrets.keep(&runs.secrets);
    let runs = Rc::new(runs);
    // Watched before recovery resumes any run: a lock or lease lost meanwhile stops those runs too.
    let registered = watch_the_lease(env, &runs, sole).await;
    recover_within_the_grace(env, &runs).await?;
    retention::sweep(&runs).await.map_err(|fatal| fatal.to_string())?;
    warn_about_duplicates(env, &catalog);
    env.log(&format!(
        "serving {} tool(s), {} resource(s) and {} prompt(s) from {} as `{}`{}",
        catalog.list_tools().count(),
        catalog.resources().count(),
        catalog.prompts.len(),
        manifest_path.display(),
        catalog.manifest.server.name,
        if pinned { ", each as warden.lock recorded it" } else { " (no warden.lock: the tools are not pinned)" }
    ));
    spawn_daily_sweep(&runs);
    if let Some(registered) = registered {
        crate::run::takeover::spawn(&runs, registered.target);
    }
    crate::operator::admin::start(&runs);
    crate::run::input::spawn_expiry(&runs);
    Ok(OpenServer { runs, _lock })
}

/// The start's recovery, bounded as a drain is by a shutdown signal and the grace, and what it
/// did in the log.
async fn recover_within_the_grace(env: &Env, runs: &Rc<Runs>) -> Result<(), String> {
    let grace_ms = runs.catalog.manifest.server.shutdown_grace_ms;
    let recovered = crate::run::drain::bounded_by_a_signal(env, grace_ms, recovery::recover(runs)).await?;
    let report = recovered.map_err(|fatal| fatal.to_string())?;
    if report != recovery::Report::default() {
        env.log(&format!(
            "recovery: released {} run(s) that never started, resumed {}, settled {} from their journals, cleaned up {}",
            report.released.len(),
            report.resumed.len(),
            report.settled_from_end.len(),
            report.cleaned.len()
        ));
    }
    Ok(())
}

/// The PostgreSQL store's ledger and records for one serving instance (issue 28, step 2 of
/// `docs/design/several-instances.md`): the schema created or migrated, the sole-instance lock
/// taken (several instances come with leases), the shared ledger folded. The journals folder
/// keeps the runs' logs and `server.lock`.
async fn open_store(
    env: &Env,
    catalog: &Catalog,
    manifest_path: &Path,
    url_env: &str,
) -> Result<(Ledger, crate::store::records::RunRecords, Option<(crate::env::HoldLost, Registered)>), String> {
    let (journals, lease_ms) = (&catalog.manifest.server.journals, catalog.manifest.server.store_lease_ms);
    let target = store_target(env, manifest_path, url_env)?;
    let store = |failure: crate::env::DbFailure| format!("the PostgreSQL store at ${url_env}: {}", failure.message);
    let migration = env.state_db.migrate(&target).await.map_err(store)?;
    if migration.found != migration.now {
        env.log(&format!(
            "the PostgreSQL store at ${url_env}: schema migrated from version {} to {}",
            migration.found, migration.now
        ));
    }
    let slot = env.state_db.hold_slot(&target).await.map_err(store)?;
    let mut ledger = Ledger::open_shared(env, journals, target.clone()).await.map_err(|e| e.to_string())?;
    // Every write from here on is fenced by this start's lease, renewed from its registration
    // (`stop_when_lease_lost`).
    let name = crate::env::instance_name(slot.slot);
    let registered = crate::store::lease::register(env, target, &name, lease_ms).await.map_err(store)?;
    ledger.fence(registered.target.clone());
    env.log(&format!("keeping the runs' records and the ledger in the PostgreSQL store at ${url_env}"));
    let records = crate::store::records::RunRecords::in_database(env, journals, registered.target.clone());
    Ok((ledger, records, Some((slot.hold, registered))))
}

/// Refuses a start whose manifest keeps the runs elsewhere than this journals directory last
/// did while that place still holds an open run: switched, it would never be finished
/// (`store::place`). With nothing open there, the new place is recorded and the start goes on.
async fn check_the_place(env: &Env, manifest_path: &Path, journals: &Path, now: &Store) -> Result<(), String> {
    let before = crate::store::place::read(env, journals).await?;
    if before == *now {
        return Ok(());
    }
    let (was, is) = (crate::store::place::describe(&before), crate::store::place::describe(now));
    let place_file = crate::store::place::path(journals);
    let target = match &before {
        Store::Files => None,
        Store::Postgres { url_env } => Some(store_target(env, manifest_path, url_env).map_err(|_| {
            format!(
                "{}: this directory's runs were kept in {was}, and {url_env} is not set: set it, so that Warden can \
                 check no run is still open there before it keeps the runs in {is}, or give the manifest its \
                 server.store back",
                place_file.display()
            )
        })?),
    };
    let kept = crate::operator::kept::Kept::read(env, journals, target).await?;
    let open: Vec<&str> = kept.state.runs.values().filter(|entry| entry.is_open()).map(|e| e.run.as_str()).collect();
    if let Some(first) = open.first() {
        return Err(format!(
            "{}: server.store keeps the runs in {is}, but {} run(s) are still open in {was} (the first: {first}): \
             start Warden with server.store as it was until `warden runs list` and `warden mcp status` show none \
             open, then switch",
            manifest_path.display(),
            open.len()
        ));
    }
    crate::store::place::write(env, journals, now).await?;
    env.log(&format!(
        "the runs are kept in {is} from now on (no run is open in {was}; its `once` keys and quota use do not carry over)"
    ));
    Ok(())
}

/// On the PostgreSQL store: stops the server when its slot or its lease is lost, and waits out
/// the lease of the epoch its registration replaced; the registration, to take runs over with.
async fn watch_the_lease(
    env: &Env,
    runs: &Rc<Runs>,
    held: Option<(crate::env::HoldLost, Registered)>,
) -> Option<Registered> {
    let (slot, registered) = held?;
    stop_when_lost(runs, slot);
    runs.lease_lasts_until.set(Some(registered.lasts_until));
    stop_when_lease_lost(runs, registered.target.clone(), registered.at);
    wait_out_the_replaced_lease(env, &registered).await;
    Some(registered)
}

/// Waits, before this start takes its slot's runs up, until the lease of the epoch its
/// registration replaced has ended: until then that epoch could still send an action it
/// checked (the action rule, `store::lease`), which recovery would otherwise find in doubt
/// while it is still being sent.
async fn wait_out_the_replaced_lease(env: &Env, registered: &Registered) {
    // The database's clock may run faster than this instance's by the drift bound.
    let left = registered.replaced_remaining_ms;
    let left = left.saturating_add(left.div_ceil(1000) * crate::limits::LEASE_DRIFT_PER_MILLE);
    if left > 0 {
        env.log(&format!(
            "the previous epoch of this slot held its lease for {left} ms more: waiting for it to end before taking \
             its runs up"
        ));
        env.clock.sleep(left).await;
    }
}

/// Stops the server when its slot of the store is lost: another instance could take the
/// slot, and the runs with it.
fn stop_when_lost(runs: &Rc<Runs>, sole: crate::env::HoldLost) {
    let runs = Rc::clone(runs);
    let watched = runs.env.clone();
    watched.spawn.spawn(Box::pin(async move {
        let why = sole.await;
        runs.stop(&crate::run::store::Fatal::storage(why));
    }));
}

/// Stops the server when its lease on the store is lost (`store::lease`): its writes are
/// refused from then on, and a start takes its runs up.
fn stop_when_lease_lost(runs: &Rc<Runs>, fenced: PostgresTarget, registered_at: u64) {
    let runs = Rc::clone(runs);
    let watched = runs.env.clone();
    watched.spawn.spawn(Box::pin(async move {
        let lease_ms = runs.catalog.manifest.server.store_lease_ms;
        let confirmed = |until: u64| runs.lease_lasts_until.set(Some(until));
        let why = crate::store::lease::renew_until_lost(&runs.env, &fenced, lease_ms, registered_at, &confirmed).await;
        runs.stop(&crate::run::store::Fatal::storage(why));
    }));
}

/// Creates each `db.sqlite` database that has an `init` file and does not exist yet.
async fn initialize_databases(env: &Env, catalog: &Catalog) -> Result<(), String> {
    for tool in &catalog.tools {
        for grant in tool.config.grants.values() {
            let crate::manifest::Grant::Capability(grant) = grant else { continue };
            let (Some(path), Some(init)) = (&grant.path, &grant.init) else { continue };
            if env.disk.exists(path).await.map_err(|e| format!("{}: {e}", path.display()))? {
                continue;
            }
            let sql =
                env.disk.read(init).await.map_err(|e| format!("{}: cannot read the init file: {e}", init.display()))?;
            let sql = String::from_utf8(sql).map_err(|_| format!("{}: is not UTF-8", init.display()))?;
            env.db
                .initialize(path, &sql)
                .await
                .map_err(|e| format!("{}: initializing from {} failed: {e}", path.display(), init.display()))?;
            env.log(&format!("created {} from {}", path.display(), init.display()));
        }
    }
    Ok(())
}

async fn create_root(env: &Env, journals: &Path) -> Result<(), String> {
    let exists = env.disk.exists(journals).await.map_err(|e| format!("{}: {e}", journals.display()))?;
    if !exists {
        env.disk
            .create_dir_all(journals)
            .await
            .map_err(|e| format!("{}: cannot create the journals directory: {e}", journals.display()))?;
        let parent = crate::base::layout::folder_of(journals);
        env.disk.fsync_dir(parent).await.map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    Ok(())
}

async fn take_lock(env: &Env, journals: &Path) -> Result<DiskLock, String> {
    let path = journals.join(crate::base::layout::SERVER_LOCK_FILE);
    let mut waited = 0;
    loop {
        match env.disk.try_lock(&path).await {
            Ok(Some(lock)) => return Ok(lock),
            Ok(None) if waited < LOCK_WAIT_MS => {
                if waited == 0 {
                    env.log(&format!(
                        "{}: another server holds the lock; waiting up to {LOCK_WAIT_MS} ms",
                        path.display()
                    ));
                }
                env.clock.sleep(LOCK_RETRY_MS).await;
                waited += LOCK_RETRY_MS;
            }
            Ok(None) => {
                return Err(format!(
                    "{}: another Warden server is using this journal directory; refusing to start",
                    path.display()
                ))
            }
            Err(error) => return Err(format!("{}: cannot take the lock: {error}", path.display())),
        }
    }
}

/// Seed 000 section 5: without `once`, a resent call is a new run; say so for tools that
/// can spend money.
fn warn_about_duplicates(env: &Env, catalog: &Catalog) {
    for tool in &catalog.tools {
        if tool.config.once.is_none() && !crate::call::worst_case(tool).is_empty() {
            env.log_at(
                crate::env::Level::Warn,
                "it can spend money and has no `once`: a call sent again is a new run",
                &[("tool", &tool.config.name)],
            );
        }
    }
}

fn spawn_daily_sweep(runs: &Rc<Runs>) {
    let runs = Rc::clone(runs);
    let env = runs.env.clone();
    env.spawn.spawn(Box::pin(async move {
        loop {
            runs.env.clock.sleep(retention::SWEEP_INTERVAL_MS).await;
            if let Err(fatal) = retention::sweep(&runs).await {
                runs.stop(&fatal);
                return;
            }
        }
    }));
}

async fn load(env: &Env, manifest_path: &Path) -> Result<Catalog, String> {
    let manifest = read_manifest(env, manifest_path).await?;
    Catalog::load(env, manifest).await
}

/// The PostgreSQL store the manifest keeps its state in, if any (`None`: files).
fn store_of(env: &Env, manifest_path: &Path, catalog: &Catalog) -> Result<Option<PostgresTarget>, String> {
    match &catalog.manifest.server.store {
        Store::Files => Ok(None),
        Store::Postgres { url_env } => store_target(env, manifest_path, url_env).map(Some),
    }
}

/// `warden mcp status <manifest>`: unfinished runs and quota use, beside a running server.
pub async fn status(env: &Env, manifest_path: &Path, as_json: bool) -> Result<String, String> {
    let catalog = load(env, manifest_path).await?;
    let store = store_of(env, manifest_path, &catalog)?;
    crate::operator::status::report(env, &catalog, store, as_json).await
}

/// `warden runs list <manifest>`: the runs the ledger holds, newest first, beside a live server.
pub async fn runs_list(
    env: &Env,
    manifest_path: &Path,
    filter: &crate::operator::runs::Filter,
    as_json: bool,
) -> Result<String, String> {
    let catalog = load(env, manifest_path).await?;
    let store = store_of(env, manifest_path, &catalog)?;
    crate::operator::runs::list(env, &catalog, store, filter, as_json).await
}

/// `warden runs show <manifest> <run>`: one run's journal rendered, beside a live server.
pub async fn runs_show(env: &Env, manifest_path: &Path, run: &str, as_json: bool) -> Result<String, String> {
    let catalog = load(env, manifest_path).await?;
    let store = store_of(env, manifest_path, &catalog)?;
    crate::operator::runs::show(env, &catalog, store, run, as_json).await
}

/// `warden resolve <manifest> <run>`: the journal of the run its id (or a prefix only it has)
/// names, found from the manifest wherever the command runs, and its action in doubt shown
/// whole for the person to confirm.
pub async fn waiting_run(env: &Env, manifest_path: &Path, run: &str) -> Result<(std::path::PathBuf, String), String> {
    let catalog = load(env, manifest_path).await?;
    let store = store_of(env, manifest_path, &catalog)?;
    crate::operator::in_doubt::find(env, &catalog, store, run).await
}

/// `warden runs cancel <manifest> <run>`: the run (by its id or a prefix only it has) ended
/// as cancelled by the live server that owns it, through its admin channel; nothing of it may
/// be in doubt. With no server running it is refused: the server ends runs, not the command.
pub async fn cancel_run(
    env: &Env,
    manifest_path: &Path,
    run: &str,
    by: &crate::store::journal::Word,
) -> Result<String, String> {
    let (journals, kept, entry) = kept_run(env, manifest_path, run).await?;
    if !entry.is_open() {
        return Err(format!("run {} has ended; there is nothing to cancel", entry.run));
    }
    let instance = match &kept.instances {
        Some(instances) => Some(instances.owners.get(&entry.run).cloned().ok_or_else(|| {
            format!("run {} is not owned by any instance of the PostgreSQL store: start one, then cancel", entry.run)
        })?),
        None => None,
    };
    let request = crate::operator::admin::Request::Cancel {
        run: entry.run.clone(),
        tool: entry.tool.clone(),
        deadline_at_ms: admin_deadline(env),
        by: Some(by.clone()),
    };
    ask_the_server(env, manifest_path, &journals, instance.as_deref(), &request, "cancel").await
}

/// `warden once release <manifest> <tool> <run>`: the running server (on the PostgreSQL
/// store, any instance serving it) forgets the `once` key of an ended run, as a ledger event,
/// so a corrected call with the same key runs. `account`: who asked.
pub async fn release_once(
    env: &Env,
    manifest_path: &Path,
    tool: &str,
    run: &str,
    account: &str,
) -> Result<String, String> {
    let (journals, kept, entry) = kept_run(env, manifest_path, run).await?;
    if entry.tool != tool {
        return Err(format!("run {} is a run of `{}`, not of `{tool}`; nothing was changed", entry.run, entry.tool));
    }
    if entry.is_open() {
        return Err(format!(
            "run {} has not ended: a key is released once its run has ended (`warden runs cancel` ends one waiting \
             for input, interrupted or halted); nothing was changed",
            entry.run
        ));
    }
    let instance = match &kept.instances {
        Some(instances) => Some(instances.serving().next().map(|(name, _)| name.clone()).ok_or_else(|| {
            "no instance serves the PostgreSQL store: start one, then release the key; nothing was changed".to_string()
        })?),
        None => None,
    };
    let request = crate::operator::admin::Request::ReleaseOnce {
        run: entry.run.clone(),
        tool: entry.tool.clone(),
        deadline_at_ms: admin_deadline(env),
        by: Some(account.to_string()),
    };
    ask_the_server(env, manifest_path, &journals, instance.as_deref(), &request, "release the key").await
}

/// The manifest's journals folder, what its store keeps, and the run `run` names (an id or
/// its first characters) in it.
async fn kept_run(
    env: &Env,
    manifest_path: &Path,
    run: &str,
) -> Result<(PathBuf, crate::operator::kept::Kept, crate::store::ledger::RunEntry), String> {
    let catalog = load(env, manifest_path).await?;
    let store = store_of(env, manifest_path, &catalog)?;
    let journals = catalog.manifest.server.journals.clone();
    let kept = crate::operator::kept::Kept::read(env, &journals, store).await?;
    let entry = crate::operator::runs::find(&kept.state, run)?.clone();
    Ok((journals, kept, entry))
}

/// `warden console <manifest> --listen ADDRESS`: the read-only page over the manifest's runs,
/// served until a shutdown signal.
pub async fn console(env: &Env, manifest_path: &Path, address: core::net::SocketAddr) -> Result<(), String> {
    crate::operator::console::check_listen(address)?;
    let stop = env.process.shutdown_signal(1);
    let catalog = load(env, manifest_path).await?;
    let store = store_of(env, manifest_path, &catalog)?;
    let console = crate::operator::console::Console {
        env: env.clone(),
        catalog,
        store,
        manifest_path: manifest_path.to_path_buf(),
    };
    crate::operator::console::serve(console, address, stop).await
}

/// When a request to the admin channel is given up by its asker (the server refuses one
/// that reaches it later).
fn admin_deadline(env: &Env) -> u64 {
    let wait_ms = crate::operator::admin::ASK_TIMEOUT_MS - crate::operator::admin::ASK_MARGIN_MS;
    env.clock.now_ms().saturating_add(wait_ms)
}

/// Hands `request` to the running server (`instance` on the PostgreSQL store); with none
/// running on files, refused, saying to start one, then `what`.
async fn ask_the_server(
    env: &Env,
    manifest_path: &Path,
    journals: &Path,
    instance: Option<&str>,
    request: &crate::operator::admin::Request,
    what: &str,
) -> Result<String, String> {
    let on_files = instance.is_none();
    if on_files && crate::operator::status::server_running(env, journals).await != Some(true) {
        return Err(format!(
            "no server is running for {}: start it (warden mcp or warden serve-http), then {what}; nothing was \
             changed",
            manifest_path.display()
        ));
    }
    match crate::operator::admin::ask(env, journals, instance, request).await {
        Ok(said) => Ok(said),
        Err(
            crate::operator::admin::Unanswered::Unreachable(problem)
            | crate::operator::admin::Unanswered::Failed(problem),
        ) => Err(problem),
    }
}

/// `warden check <manifest>`: every problem at once (the manifest's fields, the programs of
/// the tools whose fields are right, the secrets, `warden.lock`), or a one-line summary per
/// tool. `without_secrets`: unset secrets are told, not problems (a manifest linted in CI).
pub async fn check(env: &Env, manifest_path: &Path, without_secrets: bool) -> Result<String, String> {
    let text = env
        .disk
        .read(manifest_path)
        .await
        .map_err(|e| format!("{}: cannot read the manifest: {e}", manifest_path.display()))?;
    let (mut problems, manifest) = match crate::manifest::Manifest::parse(manifest_path, &text) {
        Ok(manifest) => (Vec::new(), Some(manifest)),
        // The programs and secrets of what had no problem are checked too.
        Err(error) => (error.problems, error.partial.map(|partial| *partial)),
    };
    let Some(manifest) = manifest else { return Err(problems.join("\n")) };
    let secrets = crate::catalog::missing_secrets(env, &manifest);
    let whole = problems.is_empty();
    let catalog = match Catalog::load(env, manifest).await {
        Ok(catalog) if whole => {
            problems.extend(crate::catalog::tool_lock::verify(env, &catalog).await.err());
            Some(catalog)
        }
        Ok(_) => None,
        Err(problem) => {
            problems.push(problem);
            None
        }
    };
    // Without its secrets, an unset one is told; one set too short is a mistake either way.
    let (unset, wrong): (Vec<_>, Vec<_>) = secrets.into_iter().partition(|(_, unset)| *unset && without_secrets);
    problems.extend(wrong.into_iter().map(|(line, _)| line));
    let told: String =
        unset.iter().map(|(line, _)| format!("note: {line}; not a problem with --without-secrets\n")).collect();
    let Some(catalog) = catalog.filter(|_| problems.is_empty()) else { return Err(problems.join("\n")) };
    let resources = catalog.resources().count();
    let mut report = told;
    report += &format!(
        "{}: ok, {} tool(s), {resources} resource(s), {} prompt(s)\n",
        manifest_path.display(),
        catalog.list_tools().count(),
        catalog.prompts.len()
    );
    for tool in &catalog.tools {
        let inputs: Vec<&str> = tool.program.inputs.iter().map(|i| i.name.as_str()).collect();
        let what = match &tool.resource {
            Some(spec) => format!("resource {}", spec.uri_template),
            None => "tool".to_string(),
        };
        report.push_str(&format!(
            "  {} {what} ({}): inputs {}\n",
            tool.config.name,
            tool.program.path.display(),
            inputs.join(", ")
        ));
    }
    for prompt in &catalog.prompts {
        let arguments: Vec<&str> = prompt.program.inputs.iter().map(|i| i.name.as_str()).collect();
        report.push_str(&format!(
            "  {} prompt ({}): arguments {}\n",
            prompt.config.name,
            prompt.program.path.display(),
            arguments.join(", ")
        ));
    }
    Ok(report)
}

/// How long an exchange with the PostgreSQL store waits to connect, and for each statement
/// (a migration's included; an instance paused inside a transaction holds the ledger's lock
/// at most this and a second, `io/postgres.rs` `bounded_transaction`).
const STORE_CONNECT_TIMEOUT_MS: u64 = 10_000;
const STORE_STATEMENT_TIMEOUT_MS: u64 = 30_000;

/// The PostgreSQL store the manifest names, at the URL its environment variable holds.
fn store_target(env: &Env, manifest_path: &Path, url_env: &str) -> Result<PostgresTarget, String> {
    let Some(url) = env.process.var(url_env).filter(|url| !url.is_empty()) else {
        return Err(format!(
            "{}: server.store.postgres.url names the environment variable {url_env}, which is not set: set it to \
             the database's URL (postgres://user:password@host:port/database)",
            manifest_path.display()
        ));
    };
    Ok(PostgresTarget {
        fence: None,
        url,
        connect_timeout_ms: STORE_CONNECT_TIMEOUT_MS,
        statement_timeout_ms: STORE_STATEMENT_TIMEOUT_MS,
    })
}

/// `warden migrate <manifest>`: creates or migrates the schema of the PostgreSQL store the
/// manifest names (`server.store.postgres`).
pub async fn migrate(env: &Env, manifest_path: &Path) -> Result<String, String> {
    let catalog = load(env, manifest_path).await?;
    let Store::Postgres { url_env } = &catalog.manifest.server.store else {
        return Err(format!(
            "{}: no server.store: the server keeps its state in files under server.journals, which need no \
             migration (set server.store.postgres to keep it in PostgreSQL)",
            manifest_path.display()
        ));
    };
    let target = store_target(env, manifest_path, url_env)?;
    let migration = env.state_db.migrate(&target).await.map_err(|failure| {
        let doubt = if failure.may_have_committed { " (it may have committed: run it again to see)" } else { "" };
        format!("the PostgreSQL store at ${url_env}: {}{doubt}", failure.message)
    })?;
    Ok(match migration.found {
        0 => format!("the PostgreSQL store at ${url_env}: schema created at version {}\n", migration.now),
        found if found == migration.now => {
            format!("the PostgreSQL store at ${url_env}: schema already at version {found}, nothing to do\n")
        }
        found => {
            format!("the PostgreSQL store at ${url_env}: schema migrated from version {found} to {}\n", migration.now)
        }
    })
}

/// `warden lock <manifest>`: records each tool's digest in `warden.lock` beside the manifest.
pub async fn lock(env: &Env, manifest_path: &Path) -> Result<String, String> {
    let catalog = load(env, manifest_path).await?;
    let path = crate::catalog::tool_lock::write(env, &catalog).await?;
    let mut report = format!("wrote {}: {} tool(s) pinned\n", path.display(), catalog.list_tools().count());
    for tool in catalog.list_tools() {
        report.push_str(&format!("  {} {}\n", tool.config.name, crate::catalog::tool_lock::tool_digest(tool).digest));
    }
    Ok(report)
}

/// `warden schema <manifest> [tool]`: the tools as `tools/list` describes them.
pub async fn schema(env: &Env, manifest_path: &Path, tool: Option<&str>) -> Result<String, String> {
    let catalog = load(env, manifest_path).await?;
    let described = match tool {
        // Every tool `tools/list` lists, the server's own status tool last.
        None => json!(catalog.list().into_iter().chain([crate::call::status::describe()]).collect::<Vec<_>>()),
        Some(crate::manifest::RUN_STATUS_TOOL) => crate::call::status::describe(),
        Some(name) => catalog.callable(name).map(|t| t.describe()).ok_or_else(|| {
            let names: Vec<&str> = catalog.list_tools().map(|t| t.config.name.as_str()).collect();
            format!(
                "no tool named `{name}` in the manifest (its tools: {}, {})",
                names.join(", "),
                crate::manifest::RUN_STATUS_TOOL
            )
        })?,
    };
    Ok(serde_json::to_string_pretty(&described).expect("JSON values serialise") + "\n")
}

/// `warden resolve --journal <path> --op N --happened '<json>' | --did-not-happen`: the
/// operator's answer for an action in doubt, appended durably to the run's journal. The
/// next start of the server resumes the run from it. Resolution never travels over MCP.
pub async fn resolve(
    env: &Env,
    journal_path: &Path,
    op: u64,
    happened: Option<&str>,
    by: Option<&crate::store::journal::Word>,
) -> Result<String, String> {
    let verdict = match happened {
        Some(result) => crate::operator::admin::Verdict::Happened(result.to_string()),
        None => crate::operator::admin::Verdict::DidNotHappen,
    };
    let request = |live: LiveRun| Resolve {
        run: live.run,
        tool: live.tool,
        op,
        verdict: verdict.clone(),
        deadline_at_ms: live.deadline_at_ms,
        by: by.cloned(),
    };
    let hold = match here_or_live(env, journal_path, request).await? {
        Either::Left(hold) => hold,
        Either::Right(said) => return Ok(said),
    };
    let by = by.map(|by| crate::operator::verdict::word(Some(&by.account), by.note.as_deref())).transpose()?;
    let record =
        crate::operator::verdict::resolved(&hold.journal, journal_path, op, happened, (env.clock.now_ms(), by))?;
    hold.settle(env, &record).await?;
    let recorded = crate::operator::verdict::resolved_text(op, happened.is_some());
    Ok(format!("{}: {recorded}; the next start of the server resumes the run\n", journal_path.display()))
}

/// `warden resolve --journal <path> --resume`: a run halted after it was found unfinished at
/// starts in a row without getting further is resumed again at the next start.
pub async fn resume_halted(env: &Env, journal_path: &Path) -> Result<String, String> {
    let request = |live: LiveRun| Resume { run: live.run, tool: live.tool, deadline_at_ms: live.deadline_at_ms };
    let hold = match here_or_live(env, journal_path, request).await? {
        Either::Left(hold) => hold,
        Either::Right(said) => return Ok(said),
    };
    let shown = journal_path.display();
    if !hold.record.halted {
        return Err(format!(
            "{shown}: run {} is not halted; it waits for a verdict on action {}: {}",
            hold.record.run, hold.record.op, hold.record.resolve
        ));
    }
    let record = crate::store::journal::JournalRecord::Retried { at_ms: env.clock.now_ms() };
    hold.settle(env, &record).await?;
    Ok(format!("{shown}: the run will be resumed at the next start of the server\n"))
}

/// A waiting run, held for the operator: the server's lock (a live server owns the journal,
/// and an append beside it could interleave with its own), its waiting record, its journal.
struct WaitingRun {
    _lock: DiskLock,
    path: std::path::PathBuf,
    waiting: std::path::PathBuf,
    record: crate::run::runs::WaitingRecord,
    journal: crate::store::journal::Journal,
}

/// A waiting run held here (no server runs), or the live server that holds it.
enum Held {
    Here(WaitingRun),
    /// A server holds the journals' lock: the word goes to it through its admin channel.
    ByLiveServer(LiveRun),
}

/// A run a live server holds, as the operator's `--journal` names it.
struct LiveRun {
    journals: std::path::PathBuf,
    run: String,
    tool: String,
    /// When the operator's command stops waiting for the server's answer.
    deadline_at_ms: u64,
    /// The instance that owns the run, on the PostgreSQL store (its admin channel is its own).
    instance: Option<String>,
}

/// The waiting run held here, or (`Right`) what the live server holding it answered to the
/// request `request` builds. Nothing listening is retried for `LOCK_WAIT_MS`: a server still
/// starting, or a command holding the lock for an instant (`warden mcp status`).
async fn here_or_live(
    env: &Env,
    journal_path: &Path,
    request: impl Fn(LiveRun) -> crate::operator::admin::Request,
) -> Result<Either<WaitingRun, String>, String> {
    let mut waited = 0;
    loop {
        let live = match hold_waiting_run(env, journal_path).await? {
            Held::Here(hold) => return Ok(Either::Left(hold)),
            Held::ByLiveServer(live) => live,
        };
        let journals = live.journals.clone();
        let instance = live.instance.clone();
        match crate::operator::admin::ask(env, &journals, instance.as_deref(), &request(live)).await {
            Ok(said) => return Ok(Either::Right(said)),
            Err(crate::operator::admin::Unanswered::Unreachable(_)) if waited < LOCK_WAIT_MS => {
                env.clock.sleep(LOCK_RETRY_MS).await;
                waited += LOCK_RETRY_MS;
            }
            Err(crate::operator::admin::Unanswered::Unreachable(problem))
            | Err(crate::operator::admin::Unanswered::Failed(problem)) => return Err(problem),
        }
    }
}

async fn hold_waiting_run(env: &Env, journal_path: &Path) -> Result<Held, String> {
    let shown = journal_path.display();
    // A journal lives at <journals>/<tool>/<shard>/<run>.journal.
    let (Some(root), Some(run)) = (
        journal_path.parent().and_then(Path::parent).and_then(Path::parent),
        journal_path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".journal")),
    ) else {
        return Err(format!("{shown}: not a run's journal (<journals>/<tool>/<shard>/<run>.journal)"));
    };
    // Named from inside the journals folder (`tool/shard/run.journal`), the root is `.`.
    let root = if root.as_os_str().is_empty() { Path::new(".") } else { root };
    let shard = journal_path.parent().and_then(Path::file_name).and_then(|n| n.to_str()).unwrap_or_default();
    let tool = journal_path.parent().and_then(Path::parent).and_then(Path::file_name).and_then(|n| n.to_str());
    if run.get(..2) != Some(shard) {
        return Err(format!(
            "{shown}: not a run's journal (run {run} lives in the folder `{}`)",
            run.get(..2).unwrap_or(run)
        ));
    }
    let lock = root.join(crate::base::layout::SERVER_LOCK_FILE);
    let held = match env.disk.try_lock(&lock).await {
        Ok(Some(held)) => held,
        Ok(None) => {
            let (journals, run, tool) = (root.to_path_buf(), run.to_string(), tool.unwrap_or_default().to_string());
            // The server starts no work it could not finish before the command stops waiting.
            let wait_ms = crate::operator::admin::ASK_TIMEOUT_MS - crate::operator::admin::ASK_MARGIN_MS;
            let deadline_at_ms = env.clock.now_ms().saturating_add(wait_ms);
            return Ok(Held::ByLiveServer(LiveRun { journals, run, tool, deadline_at_ms, instance: None }));
        }
        Err(e) => return Err(format!("{}: cannot take the lock: {e}", lock.display())),
    };
    if let Store::Postgres { url_env } = crate::store::place::read(env, root).await? {
        // Instances serving the store hold the folder's lock only while they start: the word
        // goes to the run's owner.
        drop(held);
        return owner_of(env, root, &url_env, (run, tool.unwrap_or_default()), &shown.to_string()).await;
    }
    let waiting = root.join(crate::base::layout::WAITING_DIR).join(format!("{run}.json"));
    if !env.disk.exists(&waiting).await.map_err(|e| format!("{}: {e}", waiting.display()))? {
        return Err(format!(
            "{shown}: run {run} is not waiting for an operator (no {}); the next start of the server \
             decides its actions (a server keeping its runs in the PostgreSQL store takes an operator's word only \
             while it runs: start it, then resolve)",
            waiting.display()
        ));
    }
    let record = crate::run::runs::read_waiting(env, &waiting).await?;
    let bytes = env.disk.read(journal_path).await.map_err(|e| format!("{shown}: cannot read the journal: {e}"))?;
    let journal = crate::store::journal::Journal::parse(journal_path, &bytes)?;
    if journal.end.is_some() {
        return Err(format!("{shown}: the run has ended; there is nothing to resolve"));
    }
    if journal.torn_tail_bytes > 0 {
        return Err(format!(
            "{shown}: the journal ends in a torn line; start the server once to repair it, then resolve"
        ));
    }
    Ok(Held::Here(WaitingRun { _lock: held, path: journal_path.to_path_buf(), waiting, record, journal }))
}

/// The instance that owns `run` in the PostgreSQL store `url_env` names, to hand the word to.
async fn owner_of(
    env: &Env,
    root: &Path,
    url_env: &str,
    (run, tool): (&str, &str),
    shown: &str,
) -> Result<Held, String> {
    let target = store_target(env, &crate::store::place::path(root), url_env)?;
    let owners = crate::store::owners::listed(env, &target).await?;
    let Some(owner) = owners.get(run) else {
        return Err(format!(
            "{shown}: run {run} is not open in the PostgreSQL store (no instance owns it): there is nothing to resolve"
        ));
    };
    let wait_ms = crate::operator::admin::ASK_TIMEOUT_MS - crate::operator::admin::ASK_MARGIN_MS;
    Ok(Held::ByLiveServer(LiveRun {
        journals: root.to_path_buf(),
        run: run.to_string(),
        tool: tool.to_string(),
        deadline_at_ms: env.clock.now_ms().saturating_add(wait_ms),
        instance: Some(owner.clone()),
    }))
}

impl WaitingRun {
    /// Appends the operator's record durably, then removes the waiting record (durably):
    /// the run no longer waits, and the next start decides afresh.
    async fn settle(self, env: &Env, record: &crate::store::journal::JournalRecord) -> Result<(), String> {
        let shown = self.path.display();
        crate::store::files::append_durably(env, &self.path, record)
            .await
            .map_err(|e| format!("{shown}: appending the resolution failed: {e}"))?;
        let dir = self.waiting.parent().expect("the waiting record lives in a directory");
        env.disk.remove(&self.waiting).await.map_err(|e| format!("{}: {e}", self.waiting.display()))?;
        env.disk.fsync_dir(dir).await.map_err(|e| format!("{}: {e}", dir.display()))
    }
}
