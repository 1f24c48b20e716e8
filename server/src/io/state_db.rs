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
    DbFailure, Decide, Exchanged, Lease, LedgerLine, LocalBoxFuture, Migration, PostgresTarget, StateDb,
    INSTANCE_NAME_BYTES_MAX, LEDGER_LINE_BYTES_MAX, LEDGER_PAGE_LINES, STATE_SCHEMA_VERSION,
};

/// The advisory lock keys ("wardmigr", "wardledg" as ASCII): any 64-bit values, fixed so every
/// version of Warden takes the same ones.
const MIGRATION_LOCK: i64 = 0x7761_7264_6d69_6772;
const LEDGER_LOCK: i64 = 0x7761_7264_6c65_6467;

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
];
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
        decide: Decide,
    ) -> LocalBoxFuture<'static, Result<Exchanged, DbFailure>> {
        let target = target.clone();
        Box::pin(async move { ledger_exchange(&target, after, decide).await })
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
    Ok(Lease { epoch: epoch as u64, remaining_ms: remaining.max(0) as u64 })
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
    let version = env!("CARGO_PKG_VERSION");
    let asked = session.within("registering", session.client.query_one(&sql, &[&instance, &lease, &version])).await;
    let row = asked.map_err(DbFailure::rolled_back)?.map_err(|e| DbFailure::rolled_back(describe(&e)))?;
    let granted = lease_of(&row)?;
    session.commit().await?;
    Ok(granted)
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

async fn ledger_exchange(target: &PostgresTarget, after: u64, decide: Decide) -> Result<Exchanged, DbFailure> {
    let failed = DbFailure::rolled_back;
    let after_seq = i64::try_from(after).map_err(|_| failed(format!("ledger position {after} is over bigint")))?;
    let session = locked(target, LEDGER_LOCK).await?;
    let last: i64 = single(&session, "reading the ledger's end", LAST_SEQ, &[]).await.map_err(failed)?;
    if last < after_seq {
        return Err(failed(format!(
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
            return Err(failed(format!(
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
    session.commit().await?;
    Ok(Exchanged { appended: Some(seq), seen: seq, more: false })
}
