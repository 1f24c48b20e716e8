//! Warden's own state in a shared PostgreSQL database (issue 28), one transaction per typed
//! operation of `env::StateDb`, over the same connection handling as `db.postgres`
//! (`postgres.rs`: one connection per operation, the statement timeout on the server and a
//! deadline on this side, errors without the URL).
//!
//! Two locks, both PostgreSQL advisory locks held by the transaction (released by its COMMIT
//! or ROLLBACK, or by the server when the connection drops): one for migrations, so two
//! instances starting at once do not both create the schema, and one for the ledger, so
//! appends are made one at a time. Holding the ledger's lock from before the read of the last
//! line to the COMMIT is what makes a decision safe across instances: no other instance can
//! append between what a decision read and what it wrote, and sequence numbers commit in
//! order, so "every line after `after`" misses nothing.

use tokio_postgres::types::ToSql;

use super::postgres::{bounded_transaction, describe, Session};
use crate::env::{
    DbFailure, Decide, Exchanged, HoldLost, Lease, LedgerLine, LocalBoxFuture, Migration, OwnerChange, PostgresTarget,
    RecordKind, RecordWrite, SlotHold, StateDb, INSTANCES_LISTED_MAX, INSTANCE_NAME_BYTES_MAX, INSTANCE_SLOTS_MAX,
    LEDGER_LINE_BYTES_MAX, LEDGER_PAGE_LINES, RECORD_RUNS_PAGE, RUN_ID_BYTES_MAX, STATE_SCHEMA_VERSION,
};
use crate::limits::RECORD_LINE_BYTES_MAX;

/// The advisory lock keys ("wardmigr", "wardledg" as ASCII): any 64-bit values, fixed so every
/// version of Warden takes the same ones.
const MIGRATION_LOCK: i64 = 0x7761_7264_6d69_6772;
const LEDGER_LOCK: i64 = 0x7761_7264_6c65_6467;
/// "wardsole": the session lock the one instance serving the store took before instances had
/// slots. Every instance now holds it shared, so a Warden of that version cannot start beside
/// them, nor they beside it.
const SOLE_LOCK: i64 = 0x7761_7264_736f_6c65;
/// "ward": the first key of the two-key session lock each slot is (`hold_slot`).
const SLOT_LOCKS: i32 = 0x7761_7264;

/// The statements that bring a schema from version `n` to `n + 1`, at index `n`. Appended to,
/// never edited: a database migrated by one version must read the same in the next.
const MIGRATIONS: [&str; STATE_SCHEMA_VERSION as usize] = [
    concat!(
        "CREATE TABLE warden_ledger (",
        "seq BIGINT PRIMARY KEY CHECK (seq > 0), ",
        "line BYTEA NOT NULL CHECK (octet_length(line) <= 65536))",
    ),
    concat!(
        "CREATE TABLE warden_instances (",
        "id TEXT PRIMARY KEY CHECK (octet_length(id) BETWEEN 1 AND 128), ",
        "epoch BIGINT NOT NULL CHECK (epoch > 0), ",
        "lease_until TIMESTAMPTZ NOT NULL, ",
        "started_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), ",
        "version TEXT NOT NULL)",
    ),
    concat!(
        "CREATE TABLE warden_records (",
        "run TEXT NOT NULL CHECK (octet_length(run) BETWEEN 1 AND 64), ",
        "kind TEXT NOT NULL CHECK (kind IN ('inputs', 'journal', 'waiting')), ",
        "seq BIGINT NOT NULL CHECK (seq > 0), ",
        "line BYTEA NOT NULL CHECK (octet_length(line) <= 8388608), ",
        "PRIMARY KEY (run, kind, seq))",
    ),
    // A start lists the runs with a kind of record (`RECORD_RUNS`) among every journal line.
    "CREATE INDEX warden_records_by_kind ON warden_records (kind, run)",
    // Each open run's owner: taken with its reserve, ended with its settle or release.
    concat!(
        "CREATE TABLE warden_owners (",
        "run TEXT PRIMARY KEY CHECK (octet_length(run) BETWEEN 1 AND 64), ",
        "instance TEXT NOT NULL CHECK (octet_length(instance) BETWEEN 1 AND 128)); ",
        "CREATE INDEX warden_owners_by_instance ON warden_owners (instance, run)",
    ),
];
const _: () =
    assert!(RUN_ID_BYTES_MAX == 64 && RECORD_LINE_BYTES_MAX == 8388608, "warden_records' CHECKs hold the same limits");
const _: () = assert!(INSTANCE_NAME_BYTES_MAX == 128, "the table's CHECK holds the same limit");

/// The most expired instances one `expired` returns (a taker takes them a few at a time).
const EXPIRED_PAGE: i64 = 64;
/// The time left on a lease, in ms, by the database's clock.
const REMAINING_MS: &str = "(extract(epoch FROM lease_until - clock_timestamp()) * 1000)::bigint";
const _: () = assert!(LEDGER_LINE_BYTES_MAX == 65536, "the table's CHECK holds the same limit");

const SCHEMA_TABLE: &str = "CREATE TABLE IF NOT EXISTS warden_schema (version INT NOT NULL)";
const NOW_MS: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint";
const LAST_SEQ: &str = "SELECT coalesce(max(seq), 0) FROM warden_ledger";
const PAGE: &str = "SELECT seq, line FROM warden_ledger WHERE seq > $1 ORDER BY seq LIMIT $2";
const INSERT_LINE: &str = "INSERT INTO warden_ledger (seq, line) VALUES ($1, $2)";
const INSERT_RECORD: &str =
    "INSERT INTO warden_records (run, kind, seq, line) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING";
const READ_RECORD: &str = "SELECT seq, line FROM warden_records WHERE run = $1 AND kind = $2 ORDER BY seq";
/// Public for the test that measures its plan (`server/tests/shared_store.rs`).
pub const RECORD_RUNS: &str =
    "SELECT DISTINCT run FROM warden_records WHERE kind = $1 AND run > $2 ORDER BY run LIMIT $3";
const REMOVE_RECORD: &str = "DELETE FROM warden_records WHERE run = $1 AND kind = $2";
/// The writer's lease, checked just before the write commits: held at this epoch, and not
/// expired by the database's clock. `FOR KEY SHARE` holds the row until the commit against a
/// registration (which locks it `FOR UPDATE` first, so a later start waits for every write of
/// the earlier epoch in flight) but not against a renewal's plain UPDATE, which the server's
/// own stream of writes would otherwise hold off. Public for the test that holds it open.
pub const HOLDS_LEASE: &str =
    "SELECT epoch FROM warden_instances WHERE id = $1 AND epoch = $2 AND lease_until > clock_timestamp() FOR KEY SHARE";
/// A registration's first step: waits for every fenced write of the instance in flight, and
/// reads how long the epoch it replaces had left.
const REGISTERING: &str = "SELECT epoch, (extract(epoch FROM lease_until - clock_timestamp()) * 1000)::bigint \
     FROM warden_instances WHERE id = $1 FOR UPDATE";
const TAKE_OWNER: &str = "INSERT INTO warden_owners (run, instance) VALUES ($1, $2)";
const END_OWNER: &str = "DELETE FROM warden_owners WHERE run = $1";
const OWNERS: &str = "SELECT run, instance FROM warden_owners WHERE run > $1 ORDER BY run LIMIT $2";
const CLAIM: &str = "INSERT INTO warden_owners (run, instance) VALUES ($1, $2) ON CONFLICT DO NOTHING";
const OWNER_OF: &str = "SELECT instance FROM warden_owners WHERE run = $1";
/// A takeover's first step: the ended lease's row, locked, so every write of that epoch in
/// flight (each holds it `FOR KEY SHARE` until its COMMIT) has landed or failed.
const ENDED: &str = "SELECT epoch FROM warden_instances \
     WHERE id = $1 AND epoch = $2 AND lease_until <= clock_timestamp() FOR UPDATE";
/// A page of the ended instance's runs, made the taker's.
const TAKE_RUNS: &str = "UPDATE warden_owners SET instance = $2 WHERE run IN \
     (SELECT run FROM warden_owners WHERE instance = $1 ORDER BY run LIMIT $3 FOR UPDATE) RETURNING run";

pub struct RealStateDb;

impl StateDb for RealStateDb {
    fn migrate(&self, target: &PostgresTarget) -> LocalBoxFuture<'static, Result<Migration, DbFailure>> {
        let target = target.clone();
        Box::pin(async move { migrate(&target).await })
    }

    fn ledger_exchange(
        &self,
        target: &PostgresTarget,
        after: u64,
        owner: OwnerChange,
        decide: Decide,
    ) -> LocalBoxFuture<'static, Result<Exchanged, DbFailure>> {
        let target = target.clone();
        Box::pin(async move { ledger_exchange(&target, after, owner, decide).await })
    }

    fn register(
        &self,
        target: &PostgresTarget,
        instance: &str,
        lease_ms: u64,
    ) -> LocalBoxFuture<'static, Result<Lease, DbFailure>> {
        let (target, instance) = (target.clone(), instance.to_string());
        Box::pin(async move { register(&target, &instance, lease_ms).await })
    }

    fn renew(
        &self,
        target: &PostgresTarget,
        instance: &str,
        epoch: u64,
        lease_ms: u64,
    ) -> LocalBoxFuture<'static, Result<Option<Lease>, DbFailure>> {
        let (target, instance) = (target.clone(), instance.to_string());
        Box::pin(async move { renew(&target, &instance, epoch, lease_ms).await })
    }

    fn expired(&self, target: &PostgresTarget) -> LocalBoxFuture<'static, Result<Vec<(String, u64)>, DbFailure>> {
        let target = target.clone();
        Box::pin(async move { expired(&target).await })
    }

    fn record_write(
        &self,
        target: &PostgresTarget,
        write: RecordWrite,
    ) -> LocalBoxFuture<'static, Result<(), DbFailure>> {
        let target = target.clone();
        Box::pin(async move { record_write(&target, write).await })
    }

    fn record_read(
        &self,
        target: &PostgresTarget,
        run: &str,
        kind: RecordKind,
    ) -> LocalBoxFuture<'static, Result<Option<Vec<Vec<u8>>>, DbFailure>> {
        let (target, run) = (target.clone(), run.to_string());
        Box::pin(async move { record_read(&target, &run, kind).await })
    }

    fn record_remove(
        &self,
        target: &PostgresTarget,
        run: &str,
        kind: RecordKind,
    ) -> LocalBoxFuture<'static, Result<bool, DbFailure>> {
        let (target, run) = (target.clone(), run.to_string());
        Box::pin(async move { record_remove(&target, &run, kind).await })
    }

    fn record_runs(
        &self,
        target: &PostgresTarget,
        kind: RecordKind,
        after: &str,
    ) -> LocalBoxFuture<'static, Result<Vec<String>, DbFailure>> {
        let (target, after) = (target.clone(), after.to_string());
        Box::pin(async move { record_runs(&target, kind, &after).await })
    }

    fn owners(
        &self,
        target: &PostgresTarget,
        after: &str,
    ) -> LocalBoxFuture<'static, Result<Vec<(String, String)>, DbFailure>> {
        let (target, after) = (target.clone(), after.to_string());
        Box::pin(async move { owners(&target, &after).await })
    }

    fn instances(&self, target: &PostgresTarget) -> LocalBoxFuture<'static, Result<Vec<(String, Lease)>, DbFailure>> {
        let target = target.clone();
        Box::pin(async move { instances(&target).await })
    }

    fn claim(
        &self,
        target: &PostgresTarget,
        run: &str,
        after: u64,
    ) -> LocalBoxFuture<'static, Result<Option<bool>, DbFailure>> {
        let (target, run) = (target.clone(), run.to_string());
        Box::pin(async move { claim(&target, &run, after).await })
    }

    fn take_over(
        &self,
        target: &PostgresTarget,
        instance: &str,
        epoch: u64,
    ) -> LocalBoxFuture<'static, Result<Option<Vec<String>>, DbFailure>> {
        let (target, instance) = (target.clone(), instance.to_string());
        Box::pin(async move { take_over(&target, &instance, epoch).await })
    }

    fn hold_slot(&self, target: &PostgresTarget) -> LocalBoxFuture<'static, Result<SlotHold, DbFailure>> {
        let target = target.clone();
        Box::pin(async move { hold_slot(&target).await })
    }
}

async fn record_runs(target: &PostgresTarget, kind: RecordKind, after: &str) -> Result<Vec<String>, DbFailure> {
    let failed = DbFailure::rolled_back;
    let session = begun(target).await?;
    let page = RECORD_RUNS_PAGE as i64;
    let params: [&(dyn ToSql + Sync); 3] = [&kind.name(), &after, &page];
    let asked = session.within("listing records", session.client.query(RECORD_RUNS, &params)).await;
    let rows = asked.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    let mut runs = Vec::with_capacity(rows.len());
    for row in rows {
        let run: String = row.try_get(0).map_err(|e| failed(describe(&e)))?;
        checked_run(&run)?;
        runs.push(run);
    }
    Ok(runs)
}

/// The first free slot of the store: a session-level advisory lock on a connection of its own,
/// kept open while the hold lives. The database gives the lock up when the connection ends (a
/// clean exit, a kill -9, a database restart), so a crashed instance never leaves it held, and
/// its next start takes the same slot (the first free one) and its runs with it.
async fn hold_slot(target: &PostgresTarget) -> Result<SlotHold, DbFailure> {
    let mut session = Session::open(target).await.map_err(DbFailure::rolled_back)?;
    let shared: bool =
        single(&session, "taking the store's shared lock", "SELECT pg_try_advisory_lock_shared($1)", &[&SOLE_LOCK])
            .await
            .map_err(DbFailure::rolled_back)?;
    if !shared {
        return Err(DbFailure::rolled_back(
            "a Warden older than this one serves this PostgreSQL store (it holds the store's sole-instance lock): \
             stop it first; instances of this version serve one store together",
        ));
    }
    let mut held = None;
    for slot in 1..=INSTANCE_SLOTS_MAX {
        let key = slot as i32;
        let taken: bool =
            single(&session, "taking a slot", "SELECT pg_try_advisory_lock($1, $2)", &[&SLOT_LOCKS, &key])
                .await
                .map_err(DbFailure::rolled_back)?;
        if taken {
            held = Some(slot);
            break;
        }
    }
    let Some(slot) = held else {
        return Err(DbFailure::rolled_back(format!(
            "{INSTANCE_SLOTS_MAX} Warden instances serve this PostgreSQL store already: stop one first"
        )));
    };
    let hold: HoldLost = Box::pin(async move {
        session.closed().await;
        format!("the connection holding slot {slot} of the PostgreSQL store ended (a database restart?)")
    });
    Ok(SlotHold { slot, hold })
}

/// A connection with a transaction open, bounded by the statement timeout.
async fn begun(target: &PostgresTarget) -> Result<Session, DbFailure> {
    let session = Session::open(target).await.map_err(DbFailure::rolled_back)?;
    session.run("BEGIN", &begin_bounded(target)).await.map_err(DbFailure::rolled_back)?;
    Ok(session)
}

/// BEGIN, bounded (`bounded_transaction`): an instance paused inside a transaction has it ended
/// by the database, the ledger's lock released, so the others go on; its own next statement
/// then fails, so nothing it decided is written late.
fn begin_bounded(target: &PostgresTarget) -> String {
    format!("BEGIN; {}", bounded_transaction(target))
}

fn checked_name(instance: &str) -> Result<(), DbFailure> {
    match (1..=INSTANCE_NAME_BYTES_MAX).contains(&instance.len()) {
        true => Ok(()),
        false => Err(DbFailure::rolled_back(format!(
            "an instance name of {} bytes (1 to {INSTANCE_NAME_BYTES_MAX})",
            instance.len()
        ))),
    }
}

fn lease_millis(lease_ms: u64) -> Result<i64, DbFailure> {
    i64::try_from(lease_ms).map_err(|_| DbFailure::rolled_back(format!("a lease of {lease_ms} ms")))
}

/// The lease a row `(epoch, remaining ms)` gives.
fn lease_of(row: &tokio_postgres::Row) -> Result<Lease, DbFailure> {
    let epoch: i64 = row.try_get(0).map_err(|e| DbFailure::rolled_back(describe(&e)))?;
    let remaining: i64 = row.try_get(1).map_err(|e| DbFailure::rolled_back(describe(&e)))?;
    Ok(Lease { epoch: epoch as u64, remaining_ms: remaining.max(0) as u64, replaced_remaining_ms: 0 })
}

async fn register(target: &PostgresTarget, instance: &str, lease_ms: u64) -> Result<Lease, DbFailure> {
    checked_name(instance)?;
    let lease = lease_millis(lease_ms)?;
    let sql = format!(
        "INSERT INTO warden_instances (id, epoch, lease_until, version) \
         VALUES ($1, 1, clock_timestamp() + $2::bigint * interval '1 millisecond', $3) \
         ON CONFLICT (id) DO UPDATE SET epoch = warden_instances.epoch + 1, lease_until = EXCLUDED.lease_until, \
         started_at = clock_timestamp(), version = EXCLUDED.version \
         RETURNING epoch, {REMAINING_MS}"
    );
    let session = begun(target).await?;
    let waited = session.within("registering", session.client.query_opt(REGISTERING, &[&instance])).await;
    let replaced = waited.map_err(DbFailure::rolled_back)?.map_err(|e| DbFailure::rolled_back(describe(&e)))?;
    let replaced_remaining_ms = match replaced {
        Some(row) => lease_of(&row)?.remaining_ms,
        None => 0,
    };
    let version = env!("CARGO_PKG_VERSION");
    let asked = session.within("registering", session.client.query_one(&sql, &[&instance, &lease, &version])).await;
    let row = asked.map_err(DbFailure::rolled_back)?.map_err(|e| DbFailure::rolled_back(describe(&e)))?;
    let granted = lease_of(&row)?;
    session.commit().await?;
    Ok(Lease { replaced_remaining_ms, ..granted })
}

async fn renew(target: &PostgresTarget, instance: &str, epoch: u64, lease_ms: u64) -> Result<Option<Lease>, DbFailure> {
    checked_name(instance)?;
    let (lease, epoch) = (lease_millis(lease_ms)?, epoch as i64);
    let sql = format!(
        "UPDATE warden_instances SET lease_until = clock_timestamp() + $3::bigint * interval '1 millisecond' \
         WHERE id = $1 AND epoch = $2 AND lease_until > clock_timestamp() \
         RETURNING epoch, {REMAINING_MS}"
    );
    let session = begun(target).await?;
    let asked =
        session.within("renewing the lease", session.client.query_opt(&sql, &[&instance, &epoch, &lease])).await;
    let row = asked.map_err(DbFailure::rolled_back)?.map_err(|e| DbFailure::rolled_back(describe(&e)))?;
    let renewed = row.as_ref().map(lease_of).transpose()?;
    session.commit().await?;
    Ok(renewed)
}

async fn expired(target: &PostgresTarget) -> Result<Vec<(String, u64)>, DbFailure> {
    let sql = "SELECT id, epoch FROM warden_instances WHERE lease_until <= clock_timestamp() ORDER BY id LIMIT $1";
    let session = begun(target).await?;
    let asked = session.within("reading expired leases", session.client.query(sql, &[&EXPIRED_PAGE])).await;
    let rows = asked.map_err(DbFailure::rolled_back)?.map_err(|e| DbFailure::rolled_back(describe(&e)))?;
    let mut dead = Vec::with_capacity(rows.len());
    for row in rows {
        let id: String = row.try_get(0).map_err(|e| DbFailure::rolled_back(describe(&e)))?;
        checked_name(&id)?;
        let epoch: i64 = row.try_get(1).map_err(|e| DbFailure::rolled_back(describe(&e)))?;
        dead.push((id, epoch as u64));
    }
    Ok(dead)
}

/// Opens a connection and a transaction that holds the advisory lock `lock`.
async fn locked(target: &PostgresTarget, lock: i64) -> Result<Session, DbFailure> {
    let session = Session::open(target).await.map_err(DbFailure::rolled_back)?;
    let begin = format!("{}; SELECT pg_advisory_xact_lock({lock})", begin_bounded(target));
    session.run("BEGIN", &begin).await.map_err(DbFailure::rolled_back)?;
    Ok(session)
}

/// One value of the one row `sql` returns.
async fn single<T>(session: &Session, what: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<T, String>
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    let row = session.within(what, session.client.query_one(sql, params)).await?.map_err(|e| describe(&e))?;
    row.try_get::<_, T>(0).map_err(|e| describe(&e))
}

async fn migrate(target: &PostgresTarget) -> Result<Migration, DbFailure> {
    let session = locked(target, MIGRATION_LOCK).await?;
    let failed = DbFailure::rolled_back;
    session.run("creating warden_schema", SCHEMA_TABLE).await.map_err(failed)?;
    let found: i32 =
        single(&session, "reading the schema's version", "SELECT coalesce(max(version), 0) FROM warden_schema", &[])
            .await
            .map_err(failed)?;
    let found = u32::try_from(found).map_err(|_| failed(format!("warden_schema holds version {found}")))?;
    if found > STATE_SCHEMA_VERSION {
        return Err(failed(format!(
            "the database's Warden schema is version {found}, newer than this warden's ({STATE_SCHEMA_VERSION}): \
             run a warden at least as new as the one that migrated it"
        )));
    }
    for (version, statements) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let what = format!("migrating the schema to version {}", version + 1);
        session.run(&what, statements).await.map_err(failed)?;
    }
    if found < STATE_SCHEMA_VERSION {
        let version = STATE_SCHEMA_VERSION as i32;
        let set = format!("DELETE FROM warden_schema; INSERT INTO warden_schema (version) VALUES ({version})");
        session.run("recording the schema's version", &set).await.map_err(failed)?;
    }
    session.commit().await?;
    Ok(Migration { found, now: STATE_SCHEMA_VERSION })
}

async fn ledger_exchange(
    target: &PostgresTarget,
    after: u64,
    owner: OwnerChange,
    decide: Decide,
) -> Result<Exchanged, DbFailure> {
    let failed = DbFailure::rolled_back;
    let after_seq = i64::try_from(after).map_err(|_| failed(format!("ledger position {after} is over bigint")))?;
    let session = locked(target, LEDGER_LOCK).await?;
    let last: i64 = single(&session, "reading the ledger's end", LAST_SEQ, &[]).await.map_err(failed)?;
    if last < after_seq {
        return Err(DbFailure::untrusted(format!(
            "the shared ledger ends at line {last}, before line {after} this instance has read: \
             was the database restored from an older copy? Stop every instance and ask a person"
        )));
    }
    let page = LEDGER_PAGE_LINES as i64;
    let asked = session.within("reading the ledger", session.client.query(PAGE, &[&after_seq, &page])).await;
    let rows = asked.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    let mut lines = Vec::with_capacity(rows.len());
    for row in rows {
        let seq: i64 = row.try_get(0).map_err(|e| failed(describe(&e)))?;
        let line: Vec<u8> = row.try_get(1).map_err(|e| failed(describe(&e)))?;
        // The table's CHECK holds this limit; a database whose table lost it is not trusted.
        if line.len() > LEDGER_LINE_BYTES_MAX {
            return Err(DbFailure::untrusted(format!(
                "the shared ledger's line {seq} is {} bytes, over the limit of {LEDGER_LINE_BYTES_MAX}: \
                 the table no longer holds Warden's limit; ask a person",
                line.len()
            )));
        }
        lines.push(LedgerLine { seq: seq as u64, line });
    }
    let seen = lines.last().map_or(after, |line| line.seq);
    let more = seen < last as u64;
    let now = match more {
        true => None,
        false => Some(single::<i64>(&session, "reading the time", NOW_MS, &[]).await.map_err(failed)?.max(0) as u64),
    };
    let Some(line) = decide(&lines, now) else {
        // Nothing written: dropping the connection ends the transaction and its lock.
        return Ok(Exchanged { appended: None, seen, more });
    };
    assert!(!more, "a line appended without the whole ledger read");
    if line.len() > LEDGER_LINE_BYTES_MAX {
        return Err(failed(format!("a ledger line of {} bytes, over {LEDGER_LINE_BYTES_MAX}", line.len())));
    }
    let seq = seen + 1;
    let inserted =
        session.within("appending to the ledger", session.client.execute(INSERT_LINE, &[&(seq as i64), &line])).await;
    inserted.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    change_owner(&session, target, &owner).await?;
    fenced(&session, target).await?;
    session.commit().await?;
    Ok(Exchanged { appended: Some(seq), seen: seq, more: false })
}

/// An appended line's change to its run's owner, in the line's transaction.
async fn change_owner(session: &Session, target: &PostgresTarget, owner: &OwnerChange) -> Result<(), DbFailure> {
    let failed = DbFailure::rolled_back;
    let changed = match owner {
        OwnerChange::Keep => return Ok(()),
        OwnerChange::Take(run) => {
            let fence = target
                .fence
                .as_ref()
                .ok_or_else(|| failed("a run taken by an instance without a lease".to_string()))?;
            session.within("taking the run", session.client.execute(TAKE_OWNER, &[run, &fence.instance])).await
        }
        OwnerChange::End(run) => {
            session.within("ending the run's owner", session.client.execute(END_OWNER, &[run])).await
        }
    };
    changed.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    Ok(())
}

async fn owners(target: &PostgresTarget, after: &str) -> Result<Vec<(String, String)>, DbFailure> {
    let failed = DbFailure::rolled_back;
    let session = begun(target).await?;
    let page = RECORD_RUNS_PAGE as i64;
    let asked = session.within("listing owners", session.client.query(OWNERS, &[&after, &page])).await;
    let rows = asked.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    let mut owners = Vec::with_capacity(rows.len());
    for row in rows {
        let run: String = row.try_get(0).map_err(|e| failed(describe(&e)))?;
        let instance: String = row.try_get(1).map_err(|e| failed(describe(&e)))?;
        checked_run(&run)?;
        checked_name(&instance)?;
        owners.push((run, instance));
    }
    Ok(owners)
}

async fn instances(target: &PostgresTarget) -> Result<Vec<(String, Lease)>, DbFailure> {
    let failed = DbFailure::rolled_back;
    let sql = format!("SELECT id, epoch, {REMAINING_MS} FROM warden_instances ORDER BY id LIMIT $1");
    let session = begun(target).await?;
    let most = INSTANCES_LISTED_MAX as i64;
    let asked = session.within("listing instances", session.client.query(&sql, &[&most])).await;
    let rows = asked.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    let mut listed = Vec::with_capacity(rows.len());
    for row in rows {
        let id: String = row.try_get(0).map_err(|e| failed(describe(&e)))?;
        checked_name(&id)?;
        let epoch: i64 = row.try_get(1).map_err(|e| failed(describe(&e)))?;
        let remaining: i64 = row.try_get(2).map_err(|e| failed(describe(&e)))?;
        let lease = Lease { epoch: epoch as u64, remaining_ms: remaining.max(0) as u64, replaced_remaining_ms: 0 };
        listed.push((id, lease));
    }
    Ok(listed)
}

async fn claim(target: &PostgresTarget, run: &str, after: u64) -> Result<Option<bool>, DbFailure> {
    let failed = DbFailure::rolled_back;
    checked_run(run)?;
    let fence =
        target.fence.as_ref().ok_or_else(|| failed("a run claimed by an instance without a lease".to_string()))?;
    // Under the ledger's lock, no settle or release can land between the check and the COMMIT:
    // a run its caller read open is still open if no line came after.
    let session = locked(target, LEDGER_LOCK).await?;
    let last: i64 = single(&session, "reading the ledger's end", LAST_SEQ, &[]).await.map_err(failed)?;
    let last = u64::try_from(last).unwrap_or(0);
    if last < after {
        return Err(DbFailure::untrusted(format!(
            "the shared ledger ends at line {last}, before line {after} this instance has read: was the database \
             restored from an older copy? Stop every instance and ask a person"
        )));
    }
    if last > after {
        return Ok(None);
    }
    let inserted = session.within("claiming a run", session.client.execute(CLAIM, &[&run, &fence.instance])).await;
    inserted.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    let owner: String = single(&session, "reading the run's owner", OWNER_OF, &[&run]).await.map_err(failed)?;
    fenced(&session, target).await?;
    session.commit().await?;
    Ok(Some(owner == fence.instance))
}

async fn take_over(target: &PostgresTarget, instance: &str, epoch: u64) -> Result<Option<Vec<String>>, DbFailure> {
    let failed = DbFailure::rolled_back;
    checked_name(instance)?;
    let fence = target.fence.as_ref().ok_or_else(|| failed("a takeover by an instance without a lease".to_string()))?;
    let epoch = i64::try_from(epoch).map_err(|_| failed(format!("an epoch of {epoch}")))?;
    let session = begun(target).await?;
    let ended = session.within("locking the ended lease", session.client.query_opt(ENDED, &[&instance, &epoch])).await;
    if ended.map_err(failed)?.map_err(|e| failed(describe(&e)))?.is_none() {
        return Ok(None);
    }
    let page = RECORD_RUNS_PAGE as i64;
    let params: [&(dyn ToSql + Sync); 3] = [&instance, &fence.instance, &page];
    let taken = session.within("taking the runs over", session.client.query(TAKE_RUNS, &params)).await;
    let rows = taken.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    let mut runs = Vec::with_capacity(rows.len());
    for row in rows {
        let run: String = row.try_get(0).map_err(|e| failed(describe(&e)))?;
        checked_run(&run)?;
        runs.push(run);
    }
    fenced(&session, target).await?;
    session.commit().await?;
    Ok(Some(runs))
}

/// Refuses, inside the write's transaction and just before its COMMIT, a write whose instance
/// no longer holds the lease its target is fenced by (`Fence`).
async fn fenced(session: &Session, target: &PostgresTarget) -> Result<(), DbFailure> {
    let failed = DbFailure::rolled_back;
    let Some(fence) = &target.fence else { return Ok(()) };
    let epoch = i64::try_from(fence.epoch).map_err(|_| failed(fence.refusal()))?;
    let params: [&(dyn ToSql + Sync); 2] = [&fence.instance, &epoch];
    let held = session.within("checking the lease", session.client.query_opt(HOLDS_LEASE, &params)).await;
    match held.map_err(failed)?.map_err(|e| failed(describe(&e)))? {
        Some(_) => Ok(()),
        None => Err(failed(fence.refusal())),
    }
}

fn checked_run(run: &str) -> Result<(), DbFailure> {
    match (1..=RUN_ID_BYTES_MAX).contains(&run.len()) {
        true => Ok(()),
        false => Err(DbFailure::rolled_back(format!("a run id of {} bytes (1 to {RUN_ID_BYTES_MAX})", run.len()))),
    }
}

async fn record_write(target: &PostgresTarget, write: RecordWrite) -> Result<(), DbFailure> {
    let failed = DbFailure::rolled_back;
    checked_run(&write.run)?;
    let RecordWrite { run, kind, seq, line, replace } = write;
    let what = format!("line {seq} of run {run}'s {}", kind.name());
    if line.len() > RECORD_LINE_BYTES_MAX {
        return Err(failed(format!("{what} is {} bytes, over {RECORD_LINE_BYTES_MAX}", line.len())));
    }
    let seq = i64::try_from(seq).ok().filter(|seq| *seq > 0).ok_or_else(|| failed(format!("{what}: no such place")))?;
    let session = begun(target).await?;
    if replace {
        let params: [&(dyn ToSql + Sync); 2] = [&run, &kind.name()];
        let removed = session.within("replacing a record", session.client.execute(REMOVE_RECORD, &params)).await;
        removed.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    }
    let params: [&(dyn ToSql + Sync); 4] = [&run, &kind.name(), &seq, &line];
    let inserted = session.within("writing a record", session.client.execute(INSERT_RECORD, &params)).await;
    let inserted = inserted.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    if inserted == 0 {
        return Err(failed(format!("{what} is already written")));
    }
    fenced(&session, target).await?;
    session.commit().await
}

async fn record_read(target: &PostgresTarget, run: &str, kind: RecordKind) -> Result<Option<Vec<Vec<u8>>>, DbFailure> {
    let failed = DbFailure::rolled_back;
    checked_run(run)?;
    let session = begun(target).await?;
    let params: [&(dyn ToSql + Sync); 2] = [&run, &kind.name()];
    let asked = session.within("reading a record", session.client.query(READ_RECORD, &params)).await;
    let rows = asked.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut lines = Vec::with_capacity(rows.len());
    for (index, row) in rows.iter().enumerate() {
        let seq: i64 = row.try_get(0).map_err(|e| failed(describe(&e)))?;
        let line: Vec<u8> = row.try_get(1).map_err(|e| failed(describe(&e)))?;
        let what = format!("run {run}'s {}", kind.name());
        if seq != index as i64 + 1 {
            return Err(failed(format!("{what} lacks line {}: the record is damaged; ask a person", index + 1)));
        }
        // The table's CHECK holds this limit; a table that lost it is not trusted.
        if line.len() > RECORD_LINE_BYTES_MAX {
            return Err(failed(format!("{what}'s line {seq} is {} bytes, over {RECORD_LINE_BYTES_MAX}", line.len())));
        }
        lines.push(line);
    }
    Ok(Some(lines))
}

async fn record_remove(target: &PostgresTarget, run: &str, kind: RecordKind) -> Result<bool, DbFailure> {
    let failed = DbFailure::rolled_back;
    checked_run(run)?;
    let session = begun(target).await?;
    let params: [&(dyn ToSql + Sync); 2] = [&run, &kind.name()];
    let removed = session.within("removing a record", session.client.execute(REMOVE_RECORD, &params)).await;
    let removed = removed.map_err(failed)?.map_err(|e| failed(describe(&e)))?;
    fenced(&session, target).await?;
    session.commit().await?;
    Ok(removed > 0)
}
