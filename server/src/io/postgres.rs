//! PostgreSQL through tokio-postgres, on the server's own runtime. One connection per
//! statement, as SQLite opens its file per statement: nothing is pooled, so nothing outlives
//! the action. A write runs in one transaction with its row in `warden_actions`, so a resumed
//! run can tell whether it committed (DESIGN.md section 5); a read runs READ ONLY, so a read
//! grant cannot change the database whatever its SQL says.
//!
//! Time is bounded twice: `statement_timeout` on the server, and the same bound (plus the
//! connect timeout) on this side, for a server that stops answering altogether.

use std::pin::pin;
use std::time::Duration;

use futures_util::TryStreamExt;
use serde_json::{Map, Value};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, NoTls, Row};

use crate::env::{DbFailure, DbReply, DbRequest, PostgresTarget};

const ACTIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS warden_actions \
     (run TEXT NOT NULL, action BIGINT NOT NULL, PRIMARY KEY (run, action))";

/// The time this side waits past the server's own `statement_timeout` before it gives up
/// on an exchange (the server's error is the one a reader should see).
const CLIENT_GRACE_MS: u64 = 1000;

type Failed = DbFailure;

/// What an exchange with the server failed with, in words a program's author can act on.
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("PostgreSQL: {} ({detail})", db.message()),
            None => format!("PostgreSQL: {}", db.message()),
        },
        None => format!("PostgreSQL: {error}"),
    }
}

async fn within<T>(
    ms: u64,
    what: &str,
    exchange: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(Duration::from_millis(ms), exchange).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(describe(&error)),
        Err(_) => Err(format!("PostgreSQL: {what} took longer than {ms} ms")),
    }
}

async fn connect(target: &PostgresTarget) -> Result<Client, String> {
    // The URL's own text never appears in an error: it may hold the password.
    let mut config: Config = target
        .url
        .parse()
        .map_err(|_| "PostgreSQL: the connection URL does not parse (its value is secret and not shown)".to_string())?;
    config.connect_timeout(Duration::from_millis(target.connect_timeout_ms));
    let (client, connection) = within(target.connect_timeout_ms, "connecting", config.connect(NoTls)).await?;
    // The connection's I/O runs beside the client; it ends when the client is dropped.
    tokio::task::spawn_local(async move {
        let _ = connection.await;
    });
    let set = format!("SET statement_timeout = {}", target.statement_timeout_ms);
    within(target.statement_timeout_ms, "setting statement_timeout", client.batch_execute(&set)).await?;
    Ok(client)
}

/// Runs one statement in its own transaction, with its `warden_actions` row for a write.
pub async fn execute(request: DbRequest, target: PostgresTarget) -> Result<DbReply, DbFailure> {
    let client = connect(&target).await.map_err(Failed::rolled_back)?;
    let wait = target.statement_timeout_ms.saturating_add(CLIENT_GRACE_MS);
    let begin = if request.write { "BEGIN" } else { "BEGIN READ ONLY" };
    within(wait, "BEGIN", client.batch_execute(begin)).await.map_err(Failed::rolled_back)?;
    // Until COMMIT is sent, any failure leaves nothing: dropping the connection rolls back.
    let reply = statement(&client, &request, wait).await.map_err(Failed::rolled_back)?;
    if let Some((run, action)) = &request.action {
        record_action(&client, run, *action, wait).await.map_err(Failed::rolled_back)?;
    }
    match tokio::time::timeout(Duration::from_millis(wait), client.batch_execute("COMMIT")).await {
        Ok(Ok(())) => Ok(reply),
        // The server answered: it refused the commit (a serialization failure, a deferred
        // constraint) and rolled the transaction back.
        Ok(Err(error)) if error.as_db_error().is_some() => Err(Failed::rolled_back(describe(&error))),
        // The connection broke or went silent with COMMIT on its way: it may have committed.
        Ok(Err(error)) => Err(DbFailure { message: describe(&error), may_have_committed: true }),
        Err(_) => Err(DbFailure {
            message: format!("PostgreSQL: COMMIT took longer than {wait} ms"),
            may_have_committed: true,
        }),
    }
}

async fn statement(client: &Client, request: &DbRequest, wait: u64) -> Result<DbReply, String> {
    let prepared = within(wait, "preparing the statement", client.prepare(&request.sql)).await?;
    if prepared.params().len() != request.params.len() {
        return Err(format!(
            "the statement takes {} parameters and was given {}",
            prepared.params().len(),
            request.params.len()
        ));
    }
    let params = prepared
        .params()
        .iter()
        .zip(&request.params)
        .enumerate()
        .map(|(index, (ty, value))| parameter(index + 1, ty, value))
        .collect::<Result<Vec<_>, _>>()?;
    let reading = async {
        let stream = client.query_raw(&prepared, params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync))).await?;
        let mut stream = pin!(stream);
        let mut rows = Vec::new();
        let mut bytes = 0usize;
        while let Some(row) = stream.try_next().await? {
            let object = match row_object(&row) {
                Ok(object) => object,
                Err(problem) => return Ok(Err(problem)),
            };
            bytes = bytes.saturating_add(serde_json::to_string(&object).map(|t| t.len()).unwrap_or(usize::MAX));
            if bytes > request.rows_bytes_max {
                let max = request.rows_bytes_max;
                return Ok(Err(format!("the statement's rows are over the limit of {max} bytes; nothing was kept")));
            }
            rows.push(object);
        }
        Ok(Ok(DbReply { rows, changes: stream.rows_affected().unwrap_or(0) }))
    };
    within(wait, "the statement", reading).await?
}

async fn record_action(client: &Client, run: &str, action: u64, wait: u64) -> Result<(), String> {
    let action = i64::try_from(action).map_err(|_| "the action number is over PostgreSQL's bigint".to_string())?;
    within(wait, "creating warden_actions", client.batch_execute(ACTIONS_TABLE)).await?;
    let insert = "INSERT INTO warden_actions (run, action) VALUES ($1, $2)";
    match tokio::time::timeout(Duration::from_millis(wait), client.execute(insert, &[&run, &action])).await {
        Ok(Ok(_)) => Ok(()),
        // Another attempt of this very write committed first (one sent just before a crash,
        // whose COMMIT the server was still finishing when this one was looked up).
        Ok(Err(error)) if error.code() == Some(&SqlState::UNIQUE_VIOLATION) => Err(format!(
            "warden_actions already holds run {run} action {action}: this write committed before; not done again"
        )),
        Ok(Err(error)) => Err(describe(&error)),
        Err(_) => Err(format!("PostgreSQL: recording the action took longer than {wait} ms")),
    }
}

/// Whether `warden_actions` holds (run, action). No table means no write ever committed.
pub async fn action_recorded(target: PostgresTarget, run: String, action: u64) -> Result<bool, String> {
    let client = connect(&target).await?;
    let action = i64::try_from(action).map_err(|_| "the action number is over PostgreSQL's bigint".to_string())?;
    let lookup = "SELECT 1 FROM warden_actions WHERE run = $1 AND action = $2";
    let wait = target.statement_timeout_ms.saturating_add(CLIENT_GRACE_MS);
    match tokio::time::timeout(Duration::from_millis(wait), client.query_opt(lookup, &[&run, &action])).await {
        Ok(Ok(found)) => Ok(found.is_some()),
        Ok(Err(error)) if error.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(false),
        Ok(Err(error)) => Err(describe(&error)),
        Err(_) => Err(format!("PostgreSQL: looking up warden_actions took longer than {wait} ms")),
    }
}

/// A JSON parameter as the type the server inferred for `$index`.
fn parameter(index: usize, ty: &Type, value: &Value) -> Result<Box<dyn ToSql + Sync + Send>, String> {
    let wrong = || format!("parameter ${index} must be {ty}, and {value} is not");
    let integer = |value: &Value| value.as_i64().ok_or_else(wrong);
    Ok(match *ty {
        Type::BOOL => Box::new(nullable(value, |v| v.as_bool().ok_or_else(wrong))?),
        Type::INT2 => Box::new(nullable(value, |v| i16::try_from(integer(v)?).map_err(|_| wrong()))?),
        Type::INT4 => Box::new(nullable(value, |v| i32::try_from(integer(v)?).map_err(|_| wrong()))?),
        Type::INT8 => Box::new(nullable(value, integer)?),
        Type::FLOAT4 => Box::new(nullable(value, |v| v.as_f64().map(|f| f as f32).ok_or_else(wrong))?),
        Type::FLOAT8 => Box::new(nullable(value, |v| v.as_f64().ok_or_else(wrong))?),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
            Box::new(nullable(value, |v| Ok(v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())))?)
        }
        Type::JSON | Type::JSONB => Box::new(value.clone()),
        _ => {
            return Err(format!(
            "parameter ${index} has type {ty}, which Warden does not bind; cast it in the statement (${index}::text)"
        ))
        }
    })
}

fn nullable<T>(value: &Value, convert: impl Fn(&Value) -> Result<T, String>) -> Result<Option<T>, String> {
    match value {
        Value::Null => Ok(None),
        other => convert(other).map(Some),
    }
}

/// A row as a JSON object, column by column.
fn row_object(row: &Row) -> Result<Map<String, Value>, String> {
    let mut object = Map::new();
    for (index, column) in row.columns().iter().enumerate() {
        let value = column_value(row, index, column.type_()).map_err(|problem| match problem {
            Some(problem) => format!("column `{}`: {problem}", column.name()),
            None => format!(
                "column `{}` has type {}, which Warden does not read; cast it in the statement ({}::text)",
                column.name(),
                column.type_(),
                column.name()
            ),
        })?;
        object.insert(column.name().to_string(), value);
    }
    Ok(object)
}

/// `Err(None)`: a type Warden does not read.
fn column_value(row: &Row, index: usize, ty: &Type) -> Result<Value, Option<String>> {
    fn get<'a, T: tokio_postgres::types::FromSql<'a> + Into<Value>>(
        row: &'a Row,
        index: usize,
    ) -> Result<Value, Option<String>> {
        let value: Option<T> = row.try_get(index).map_err(|e| Some(e.to_string()))?;
        Ok(value.map(Into::into).unwrap_or(Value::Null))
    }
    match *ty {
        Type::BOOL => get::<bool>(row, index),
        Type::INT2 => get::<i16>(row, index),
        Type::INT4 => get::<i32>(row, index),
        Type::INT8 => get::<i64>(row, index),
        Type::OID => get::<u32>(row, index),
        Type::FLOAT4 => get::<f32>(row, index),
        Type::FLOAT8 => get::<f64>(row, index),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => get::<String>(row, index),
        Type::JSON | Type::JSONB => get::<Value>(row, index),
        _ => Err(None),
    }
}
