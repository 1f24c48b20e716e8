//! The `db.*` kinds: SQLite through rusqlite (bundled) here, PostgreSQL in `postgres.rs`.
//! A write runs in one transaction with its row in `warden_actions`, so a resumed run can
//! tell whether it happened (DESIGN.md section 5).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value};

use super::off_reactor;
use super::postgres;
use crate::env::{Database, Db, DbFailure, DbReply, DbRequest, LocalBoxFuture};

/// How long a statement waits for a locked database (seed 000 section 3).
const BUSY_TIMEOUT_MS: u64 = 5000;
const ACTIONS_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS warden_actions (run TEXT NOT NULL, action INTEGER NOT NULL, PRIMARY KEY (run, action))";

pub struct RealDb;

fn open(path: &Path, write: bool) -> rusqlite::Result<Connection> {
    let flags = if write {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
    } else {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    };
    let connection = Connection::open_with_flags(path, flags)?;
    connection.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
    Ok(connection)
}

/// JSON to an SQLite value (shared with the simulator's in-memory SQLite).
pub fn to_sql(value: &Value) -> SqlValue {
    match value {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Integer(*b as i64),
        Value::Number(n) => {
            n.as_i64().map(SqlValue::Integer).unwrap_or_else(|| SqlValue::Real(n.as_f64().unwrap_or(0.0)))
        }
        Value::String(s) => SqlValue::Text(s.clone()),
        other => SqlValue::Text(other.to_string()),
    }
}

/// An SQLite value to JSON (shared with the simulator's in-memory SQLite).
pub fn from_sql(value: ValueRef) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::String(b.iter().map(|x| format!("{x:02x}")).collect()),
    }
}

/// Reads a statement's rows as JSON objects, failing past `bytes_max` bytes of them as JSON
/// (shared with the simulator's in-memory SQLite): a query cannot hold unbounded memory, and a
/// write that returns too much is rolled back.
pub fn read_rows(
    cursor: &mut rusqlite::Rows<'_>,
    names: &[String],
    bytes_max: usize,
) -> Result<Vec<Map<String, Value>>, String> {
    let mut rows = Vec::new();
    let mut bytes = 0usize;
    while let Some(row) = cursor.next().map_err(|e| e.to_string())? {
        let mut object = Map::new();
        for (index, name) in names.iter().enumerate() {
            object.insert(name.clone(), from_sql(row.get_ref(index).map_err(|e| e.to_string())?));
        }
        bytes = bytes.saturating_add(serde_json::to_string(&object).map(|text| text.len()).unwrap_or(usize::MAX));
        if bytes > bytes_max {
            return Err(format!("the statement's rows are over the limit of {bytes_max} bytes; nothing was kept"));
        }
        rows.push(object);
    }
    Ok(rows)
}

fn execute(path: &Path, request: DbRequest) -> Result<DbReply, String> {
    let text = |e: rusqlite::Error| e.to_string();
    let mut connection = open(path, request.write).map_err(text)?;
    let transaction = connection.transaction().map_err(text)?;
    let params: Vec<SqlValue> = request.params.iter().map(to_sql).collect();
    let rows;
    let changes;
    {
        let mut statement = transaction.prepare(&request.sql).map_err(text)?;
        let names: Vec<String> = statement.column_names().iter().map(|s| s.to_string()).collect();
        let mut cursor = statement.query(rusqlite::params_from_iter(params.iter())).map_err(text)?;
        rows = read_rows(&mut cursor, &names, request.rows_bytes_max)?;
        changes = transaction.changes();
    }
    if let Some((run, action)) = &request.action {
        transaction.execute(ACTIONS_TABLE, []).map_err(text)?;
        transaction
            .execute("INSERT INTO warden_actions (run, action) VALUES (?1, ?2)", rusqlite::params![run, *action as i64])
            .map_err(text)?;
    }
    transaction.commit().map_err(text)?;
    Ok(DbReply { rows, changes })
}

fn recorded(path: PathBuf, run: String, action: u64) -> rusqlite::Result<bool> {
    let connection = open(&path, true)?;
    connection.execute(ACTIONS_TABLE, [])?;
    let count: i64 = connection.query_row(
        "SELECT COUNT(*) FROM warden_actions WHERE run = ?1 AND action = ?2",
        rusqlite::params![run, action as i64],
        |row| row.get(0),
    )?;
    Ok(count > 0)
}

fn initialize(path: PathBuf, sql: String) -> rusqlite::Result<()> {
    let mut connection = open(&path, true)?;
    let transaction = connection.transaction()?;
    transaction.execute_batch(&sql)?;
    transaction.commit()
}

impl Db for RealDb {
    fn initialize(&self, path: &Path, sql: &str) -> LocalBoxFuture<'static, Result<(), String>> {
        let (path, sql) = (path.to_path_buf(), sql.to_string());
        Box::pin(async move {
            off_reactor(move || initialize(path, sql).map_err(std::io::Error::other)).await.map_err(|e| e.to_string())
        })
    }

    fn execute(&self, request: DbRequest) -> LocalBoxFuture<'static, Result<DbReply, DbFailure>> {
        let write = request.write;
        Box::pin(async move {
            let reply = match request.database.clone() {
                Database::Sqlite(path) => off_reactor(move || execute(&path, request).map_err(std::io::Error::other))
                    .await
                    .map_err(|e| DbFailure::rolled_back(e.to_string())),
                Database::Postgres(target) => postgres::execute(request, target).await,
            };
            if write && reply.is_ok() {
                committed();
            }
            reply
        })
    }

    fn action_recorded(
        &self,
        database: &Database,
        run: &str,
        action: u64,
    ) -> LocalBoxFuture<'static, Result<bool, String>> {
        let (database, run) = (database.clone(), run.to_string());
        Box::pin(async move {
            match database {
                Database::Sqlite(path) => {
                    off_reactor(move || recorded(path, run, action).map_err(std::io::Error::other))
                        .await
                        .map_err(|e| e.to_string())
                }
                Database::Postgres(target) => postgres::action_recorded(target, run, action).await,
            }
        })
    }
}

/// A crash-test build can abort right after a write committed, before its done record: the
/// gap a resumed run closes by looking the write up in `warden_actions`.
fn committed() {
    #[cfg(feature = "crash-points")]
    fail::eval("db-committed", |_| {
        eprintln!("warden: crash point `db-committed` reached; aborting");
        std::process::abort()
    });
}
