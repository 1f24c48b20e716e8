//! PostgreSQL through tokio-postgres, on the server's own runtime. One connection per
//! statement, as SQLite opens its file per statement: nothing is pooled, and the connection's
//! task is aborted when the statement is done, so no socket outlives its action.
//!
//! A write runs in one transaction whose first act is its `(run, action)` row in
//! `warden_actions`: the row's key is locked from the start, so a lookup (which tries to
//! insert the same row) waits for an attempt still in flight instead of racing it, and a
//! second attempt of the same write can never commit beside the first. A read runs READ
//! ONLY, so a read grant cannot change the database whatever its SQL says. A statement that
//! would end or reshape the transaction (COMMIT, ROLLBACK, SET...) is refused.
//!
//! Time: `statement_timeout` (SET LOCAL, the tool's `net.timeout_ms`) on the server, and one
//! deadline on this side for the whole exchange after connecting, for a server that stops
//! answering altogether.

use std::pin::pin;
use std::time::Duration;

use futures_util::TryStreamExt;
use serde_json::{Map, Value};
use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, NoTls, Row};

use crate::env::{DbFailure, DbReply, DbRequest, PostgresTarget};

const ACTIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS warden_actions \
     (run TEXT NOT NULL, action BIGINT NOT NULL, PRIMARY KEY (run, action))";
const INSERT_ACTION: &str = "INSERT INTO warden_actions (run, action) VALUES ($1, $2)";
const TRANSACTION_ID: &str = "SELECT txid_current()::text";
const STILL_WRITING: &str = "SELECT txid_current_if_assigned()::text, \
     EXISTS (SELECT 1 FROM warden_actions WHERE run = $1 AND action = $2)";
const STILL_READ_ONLY: &str = "SELECT current_setting('transaction_read_only')";

/// The time this side waits past the server's own `statement_timeout` before it gives up
/// on an exchange (the server's error is the one a reader should see).
const CLIENT_GRACE_MS: u64 = crate::limits::POSTGRES_CLIENT_GRACE_MS;

/// Statements a program may not send: they would end the transaction its write's
/// `warden_actions` row is in, or lift the bounds Warden set on it.
const TRANSACTION_CONTROL: &[&str] = &[
    "ABORT",
    "BEGIN",
    "COMMIT",
    "DISCARD",
    "END",
    "PREPARE",
    "RELEASE",
    "RESET",
    "ROLLBACK",
    "SAVEPOINT",
    "SET",
    "START",
];

/// The most bytes of an error's text taken from the server: a misbehaving server's message is
/// cut here. The broker keeps `broker::ERROR_TEXT_CHARS_MAX` of it once scrubbed, so a secret
/// the server quoted (up to this limit less four times that many bytes) is scrubbed whole before
/// any cut could split it.
pub const ERROR_TEXT_BYTES_MAX: usize = 16 * 1024;
const _: () = assert!(ERROR_TEXT_BYTES_MAX >= 2 * 4 * crate::broker::ERROR_TEXT_CHARS_MAX);
/// The longest connection URL taken from the environment.
pub const URL_BYTES_MAX: usize = 4096;

type Failed = DbFailure;

/// What an exchange with the server failed with, in words a program's author can act on:
/// the server's message, or the client's error with its cause (tokio-postgres's own text is
/// only the kind of failure). Neither holds the URL or its password.
pub(super) fn describe(error: &tokio_postgres::Error) -> String {
    let text = match (error.as_db_error(), std::error::Error::source(error)) {
        (Some(db), _) => match db.detail() {
            Some(detail) => format!("PostgreSQL: {} ({detail})", db.message()),
            None => format!("PostgreSQL: {}", db.message()),
        },
        (None, Some(cause)) => format!("PostgreSQL: {error}: {cause}"),
        (None, None) => format!("PostgreSQL: {error}"),
    };
    bounded(text)
}

/// `text` cut to `ERROR_TEXT_BYTES_MAX` bytes at a character boundary, saying so.
fn bounded(mut text: String) -> String {
    if text.len() > ERROR_TEXT_BYTES_MAX {
        let mut end = ERROR_TEXT_BYTES_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(&format!(" ... (cut at {ERROR_TEXT_BYTES_MAX} bytes)"));
    }
    text
}

/// The settings, after BEGIN, that bound a transaction: each statement by the statement
/// timeout, and the wait between two statements by the session's own deadline (the statement
/// timeout and `CLIENT_GRACE_MS`, so work between statements that the deadline allows is never
/// cut). A process paused between two statements (a stall, SIGSTOP) has its transaction ended
/// by the server, its locks released, rather than holding every other client for as long as it
/// sleeps. (A pause while the server is still sending a result is not covered: the server is
/// then writing, not idle.)
pub(super) fn bounded_transaction(target: &PostgresTarget) -> String {
    let (timeout, idle) = (target.statement_timeout_ms, target.statement_timeout_ms.saturating_add(CLIENT_GRACE_MS));
    format!("SET LOCAL statement_timeout = {timeout}; SET LOCAL idle_in_transaction_session_timeout = {idle}")
}

/// A connection, its I/O task aborted when dropped (which closes the socket: the server
/// rolls back whatever was not committed).
pub(super) struct Session {
    pub(super) client: Client,
    io: tokio::task::JoinHandle<()>,
    /// The end of the exchange after connecting.
    deadline: Instant,
    deadline_ms: u64,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.io.abort();
    }
}

impl Session {
    pub(super) async fn open(target: &PostgresTarget) -> Result<Session, String> {
        if target.url.len() > URL_BYTES_MAX {
            return Err(format!("PostgreSQL: the connection URL is over {URL_BYTES_MAX} bytes"));
        }
        // The URL's own text never appears in an error: it may hold the password.
        let mut config: Config = target.url.parse().map_err(|_| {
            "PostgreSQL: the connection URL does not parse (its value is secret and not shown)".to_string()
        })?;
        config.connect_timeout(Duration::from_millis(target.connect_timeout_ms));
        let connecting = tokio::time::timeout(Duration::from_millis(target.connect_timeout_ms), config.connect(NoTls));
        let (client, connection) = match connecting.await {
            Ok(Ok(connected)) => connected,
            Ok(Err(error)) => return Err(describe(&error)),
            Err(_) => return Err(format!("PostgreSQL: connecting took longer than {} ms", target.connect_timeout_ms)),
        };
        let io = tokio::task::spawn_local(async move {
            let _ = connection.await;
        });
        let deadline_ms = target.statement_timeout_ms.saturating_add(CLIENT_GRACE_MS);
        Ok(Session { client, io, deadline: Instant::now() + Duration::from_millis(deadline_ms), deadline_ms })
    }

    /// Resolves when the connection ends (the server closed it, or it broke).
    pub(super) async fn closed(&mut self) {
        let _ = (&mut self.io).await;
    }

    /// `exchange`, cut at the session's deadline.
    pub(super) async fn within<T>(
        &self,
        what: &str,
        exchange: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<Result<T, tokio_postgres::Error>, String> {
        tokio::time::timeout_at(self.deadline, exchange).await.map_err(|_| {
            format!("PostgreSQL: {what} did not finish within {} ms (net.timeout_ms and a second)", self.deadline_ms)
        })
    }

    pub(super) async fn run(&self, what: &str, sql: &str) -> Result<(), String> {
        self.within(what, self.client.batch_execute(sql)).await?.map_err(|e| describe(&e))
    }

    /// BEGIN, bounded (`bounded_transaction`): a process paused inside a program's write has
    /// its transaction ended by the server, the operator's rows released; awake, its COMMIT
    /// fails and the write is looked up as any in doubt.
    async fn begin(&self, target: &PostgresTarget, read_only: bool) -> Result<(), String> {
        let mode = if read_only { " READ ONLY" } else { "" };
        let sql = format!("BEGIN{mode}; {}", bounded_transaction(target));
        self.run("BEGIN", &sql).await
    }

    /// Commits the open transaction; a failure says whether it may have committed anyway.
    pub(super) async fn commit(&self) -> Result<(), DbFailure> {
        match self.within("COMMIT", self.client.batch_execute("COMMIT")).await {
            Ok(Ok(())) => Ok(()),
            // The server answered: it refused the commit (a serialization failure, a deferred
            // constraint) and rolled the transaction back.
            Ok(Err(error)) if error.as_db_error().is_some() => Err(Failed::rolled_back(describe(&error))),
            // The connection broke or went silent with COMMIT on its way: it may have committed.
            Ok(Err(error)) => Err(DbFailure { message: describe(&error), may_have_committed: true, untrusted: false }),
            Err(problem) => Err(DbFailure { message: problem, may_have_committed: true, untrusted: false }),
        }
    }

    /// The open write transaction's id (assigned by the row just inserted).
    async fn transaction_id(&self) -> Result<String, String> {
        let asked = self.within("reading the transaction's id", self.client.query_one(TRANSACTION_ID, &[])).await?;
        asked.map_err(|e| describe(&e))?.try_get::<_, String>(0).map_err(|e| describe(&e))
    }

    /// Whether the transaction is still the one `begin` opened: for a write, the same id and
    /// its `warden_actions` row there; for a read, still read-only.
    async fn still_ours(&self, write: Option<(&str, i64, String)>) -> Result<(), DbFailure> {
        let ended = "the statement ended the transaction Warden opened for it";
        let Some((run, action, id)) = write else {
            let asked = self.within("checking the transaction", self.client.query_one(STILL_READ_ONLY, &[])).await;
            let read_only = asked.map_err(Failed::rolled_back)?.map_err(|e| Failed::rolled_back(describe(&e)))?;
            return match read_only.try_get::<_, String>(0).as_deref() {
                Ok("on") => Ok(()),
                _ => Err(Failed::rolled_back(format!("{ended}; its result is not used"))),
            };
        };
        let params: [&(dyn ToSql + Sync); 2] = [&run, &action];
        let asked = self.within("checking the transaction", self.client.query_one(STILL_WRITING, &params)).await;
        let row = asked.map_err(Failed::rolled_back)?.map_err(|e| Failed::rolled_back(describe(&e)))?;
        let same = row.try_get::<_, Option<String>>(0).ok().flatten().as_deref() == Some(id.as_str());
        match (same, row.try_get::<_, bool>(1).unwrap_or(false)) {
            (true, true) => Ok(()),
            // Its row is there outside the transaction: something committed, so it is looked up.
            (false, true) => Err(DbFailure {
                message: format!("{ended}, and committed"),
                may_have_committed: true,
                untrusted: false,
            }),
            (_, false) => Err(Failed::rolled_back(format!("{ended}; nothing was committed"))),
        }
    }

    /// Inserts the write's `warden_actions` row, in the open transaction.
    async fn insert_action(&self, run: &str, action: i64) -> Result<Result<u64, tokio_postgres::Error>, String> {
        self.within("recording the action", self.client.execute(INSERT_ACTION, &[&run, &action])).await
    }
}

fn action_number(action: u64) -> Result<i64, String> {
    i64::try_from(action).map_err(|_| "the action number is over PostgreSQL's bigint".to_string())
}

/// Runs one statement in its own transaction, after its `warden_actions` row for a write.
pub async fn execute(request: DbRequest, target: PostgresTarget) -> Result<DbReply, DbFailure> {
    refuse_transaction_control(&request.sql).map_err(Failed::rolled_back)?;
    let session = Session::open(&target).await.map_err(Failed::rolled_back)?;
    // Until COMMIT is sent, any failure leaves nothing: dropping the connection rolls back.
    session.begin(&target, !request.write).await.map_err(Failed::rolled_back)?;
    let mut recorded = None;
    if let Some((run, action)) = &request.action {
        let action = action_number(*action).map_err(Failed::rolled_back)?;
        record_action(&session, &target, run, action).await?;
        recorded = Some((run.as_str(), action, session.transaction_id().await.map_err(Failed::rolled_back)?));
    }
    let reply = statement(&session, &request).await.map_err(Failed::rolled_back)?;
    // Not parsing alone: the transaction about to be committed must still be the one opened
    // here, holding the write's row (a statement that ended it would otherwise leave the
    // action journaled done without its row, or its row committed without its write).
    session.still_ours(recorded).await?;
    before_commit();
    session.commit().await.map(|()| reply)
}

/// A crash-test build can stall here, the transaction open and its locks held
/// (`FAILPOINTS="db-before-commit=1*sleep(8000)"`): a process paused by the machine.
fn before_commit() {
    #[cfg(feature = "crash-points")]
    fail::eval("db-before-commit", |_| ());
}

/// The write's row first: a database that has no `warden_actions` yet gets it (outside the
/// write's transaction, so two first writes at once do not collide on creating it).
async fn record_action(session: &Session, target: &PostgresTarget, run: &str, action: i64) -> Result<(), DbFailure> {
    let inserted = session.insert_action(run, action).await.map_err(Failed::rolled_back)?;
    let error = match inserted {
        Ok(_) => return Ok(()),
        Err(error) => error,
    };
    if error.code() == Some(&SqlState::UNIQUE_VIOLATION) {
        // Another attempt of this very write committed first: it happened, once.
        return Err(DbFailure {
            message: format!("warden_actions already holds run {run} action {action}: an earlier attempt committed"),
            may_have_committed: true,
            untrusted: false,
        });
    }
    if error.code() != Some(&SqlState::UNDEFINED_TABLE) {
        return Err(Failed::rolled_back(describe(&error)));
    }
    session.run("ROLLBACK", "ROLLBACK").await.map_err(Failed::rolled_back)?;
    if let Err(problem) = session.run("creating warden_actions", ACTIONS_TABLE).await {
        // Another connection created it at the same moment: it is there either way.
        if !problem.contains("already exists") {
            return Err(Failed::rolled_back(problem));
        }
    }
    session.begin(target, false).await.map_err(Failed::rolled_back)?;
    match session.insert_action(run, action).await.map_err(Failed::rolled_back)? {
        Ok(_) => Ok(()),
        Err(error) => Err(Failed::rolled_back(describe(&error))),
    }
}

/// Refuses a statement whose first word (after comments) controls the transaction.
fn refuse_transaction_control(sql: &str) -> Result<(), String> {
    let first = first_word(sql).to_ascii_uppercase();
    match TRANSACTION_CONTROL.contains(&first.as_str()) {
        true => Err(format!(
            "`{first}` statements are refused: Warden runs each statement in a transaction of its own, \
             with its own time limit"
        )),
        false => Ok(()),
    }
}

/// The first word of `sql`, past whitespace, empty statements (`;`), `--` comments and
/// (nested) `/* */` comments.
fn first_word(sql: &str) -> &str {
    let mut rest = sql;
    loop {
        // Empty statements first are dropped by PostgreSQL: `;ROLLBACK` is a ROLLBACK.
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, tail)| tail);
        } else if rest.starts_with("/*") {
            let mut depth = 0usize;
            let mut at = 0;
            let bytes = rest.as_bytes();
            while at < bytes.len() {
                if bytes[at..].starts_with(b"/*") {
                    depth += 1;
                    at += 2;
                } else if bytes[at..].starts_with(b"*/") {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    at += 1;
                }
            }
            rest = &rest[at.min(rest.len())..];
        } else {
            let end = rest.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len());
            return &rest[..end];
        }
    }
}

async fn statement(session: &Session, request: &DbRequest) -> Result<DbReply, String> {
    let client = &session.client;
    let prepared = session.within("preparing the statement", client.prepare(&request.sql)).await?;
    let prepared = prepared.map_err(|e| describe(&e))?;
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
    session.within("the statement", reading).await?.map_err(|e| describe(&e))?
}

/// Whether (run, action) committed. It tries to insert the row itself, in a transaction it
/// then rolls back: the insert waits for an attempt still in flight (its row's key is
/// locked), so the answer is final. No table means no write ever committed.
pub async fn action_recorded(target: PostgresTarget, run: String, action: u64) -> Result<bool, String> {
    let action = action_number(action)?;
    let session = Session::open(&target).await?;
    session.begin(&target, false).await?;
    let probed = session.insert_action(&run, action).await?;
    let _ = session.run("ROLLBACK", "ROLLBACK").await;
    match probed {
        Ok(_) => Ok(false),
        Err(error) if error.code() == Some(&SqlState::UNIQUE_VIOLATION) => Ok(true),
        Err(error) if error.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(false),
        Err(error) => Err(describe(&error)),
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
        // Past f32's range the value would be stored as infinity: refused instead.
        Type::FLOAT4 => Box::new(nullable(value, |v| {
            v.as_f64().filter(|f| f.abs() <= f32::MAX as f64).map(|f| f as f32).ok_or_else(wrong)
        })?),
        Type::FLOAT8 => Box::new(nullable(value, |v| v.as_f64().ok_or_else(wrong))?),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
            Box::new(nullable(value, |v| Ok(v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())))?)
        }
        // JSON null is SQL NULL, as for every other type (not the JSON value `null`).
        Type::JSON | Type::JSONB => Box::new(nullable(value, |v| Ok(v.clone()))?),
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

/// A float column by its shortest decimal text (an f32's 0.1 stays 0.1, not the f64 nearest
/// it); NaN and the infinities, which JSON has no number for, as the strings PostgreSQL
/// writes them.
fn float(read: Result<Option<(String, bool)>, tokio_postgres::Error>) -> Result<Value, Option<String>> {
    match read.map_err(|e| Some(e.to_string()))? {
        None => Ok(Value::Null),
        Some((text, true)) => {
            Ok(text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number))
        }
        Some((text, false)) => Ok(Value::String(match text.as_str() {
            "inf" => "Infinity".to_string(),
            "-inf" => "-Infinity".to_string(),
            _ => "NaN".to_string(),
        })),
    }
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
        Type::FLOAT4 => float(row.try_get::<_, Option<f32>>(index).map(|f| f.map(|f| (f.to_string(), f.is_finite())))),
        Type::FLOAT8 => float(row.try_get::<_, Option<f64>>(index).map(|f| f.map(|f| (f.to_string(), f.is_finite())))),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => get::<String>(row, index),
        Type::JSON | Type::JSONB => get::<Value>(row, index),
        _ => Err(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_text_is_cut_at_its_limit_on_a_character_boundary() {
        assert_eq!(bounded("short".into()), "short");
        let long = bounded("é".repeat(ERROR_TEXT_BYTES_MAX));
        assert!(long.len() <= ERROR_TEXT_BYTES_MAX + 40 && long.ends_with("(cut at 16384 bytes)"), "{}", long.len());
    }

    #[test]
    fn transaction_control_is_found_past_comments() {
        let empty_first = [";ROLLBACK", " ; ;commit", "/* a */;\n-- b\n;SET x = 1"];
        for sql in ["COMMIT", " rollback;", "-- a\n/* b /* c */ d */ SET x = 1", "end", "Start transaction"]
            .into_iter()
            .chain(empty_first)
        {
            assert!(refuse_transaction_control(sql).is_err(), "{sql}");
        }
        for sql in ["SELECT 1", "UPDATE t SET a = 1", "/* COMMIT */ SELECT 1", "-- ROLLBACK\nDELETE FROM t", "settle()"]
        {
            assert!(refuse_transaction_control(sql).is_ok(), "{sql}");
        }
    }
}
