//! The I/O seam. Every source of nondeterminism the server touches (clock, timers, disk,
//! the protocol stream, the log sink, the network, databases, randomness, task spawning,
//! child processes and the process environment) is reached through one `Env` value.
//!
//! Production implementations live in `crate::io`; the simulator (`warden-sim`) supplies
//! its own. Code outside `io/` never names tokio, `std::fs`, `std::time`, threads or
//! processes: the tidy test (`server/tests/tidy.rs`) fails the build when it does.
//!
//! The server is single-threaded (a tokio current-thread runtime in production, a seeded
//! executor in the simulator), so every future here is `!Send` and handles are `Rc`.

use std::any::Any;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use crate::program::job::{Executed, Job, Stopped};

/// A boxed, single-threaded future: what every seam method returns.
pub type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Wall time in UTC milliseconds since 1970, and timers.
pub trait Clock {
    /// The wall clock. It may be skewed or stepped (both ways); the ledger guards against it.
    fn now_ms(&self) -> u64;
    /// A clock that never steps: milliseconds since an arbitrary origin. Deadlines are
    /// measured on it, so a wall-clock step cannot expire (or extend) a run in progress.
    fn monotonic_ms(&self) -> u64;
    /// The monotonic clock in microseconds, for latencies under a millisecond (an fsync).
    fn monotonic_us(&self) -> u64 {
        self.monotonic_ms().saturating_mul(1000)
    }
    /// Completes after `ms` milliseconds of (real or virtual) time.
    fn sleep(&self, ms: u64) -> LocalBoxFuture<'static, ()>;
}

/// The filesystem, with the operations durability needs and nothing more.
///
/// Semantics the simulator models exactly: written data is durable only after `fsync` of
/// the file; a newly created or renamed entry survives a crash only after `fsync_dir` of
/// its parent directory; at a crash, unsynced writes are lost or torn at any byte. The
/// suite `sim/tests/disk_contract.rs` runs one set of checks on both disks.
pub trait Disk {
    fn read(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<Vec<u8>>>;
    /// Appends `bytes`, creating the file when absent.
    fn append(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>>;
    /// Creates or truncates the file and writes `bytes`.
    fn write(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>>;
    fn fsync(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<()>>;
    fn fsync_dir(&self, dir: &Path) -> LocalBoxFuture<'static, io::Result<()>>;
    /// Writes a new file and makes it durable with its directory entry: `write`, `fsync`, then
    /// `fsync_dir` of its folder, stopping at the first failure. One operation so the real
    /// disk does all three in one blocking job (on a fast disk the hop to a blocking thread
    /// costs more than the fsync); a crash part-way leaves what a crash between them would.
    fn write_new_durably(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>>;
    /// Appends `bytes` and fsyncs the file, as one operation (`append`, then `fsync`).
    fn append_durably(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>>;
    fn rename(&self, from: &Path, to: &Path) -> LocalBoxFuture<'static, io::Result<()>>;
    fn remove(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<()>>;
    fn create_dir_all(&self, dir: &Path) -> LocalBoxFuture<'static, io::Result<()>>;
    /// Names of the entries of `dir`, sorted, so iteration order is deterministic.
    fn list(&self, dir: &Path) -> LocalBoxFuture<'static, io::Result<Vec<String>>>;
    fn exists(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<bool>>;
    /// Takes an exclusive lock on `path` (created when absent) without waiting. `Ok(None)`
    /// means another holder has it. The lock is freed when the guard drops or the process dies.
    fn try_lock(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<Option<DiskLock>>>;
}

/// An exclusive lock held on a file; released on drop.
pub struct DiskLock {
    _holder: Box<dyn Any + Send>,
}

impl DiskLock {
    pub fn new(holder: Box<dyn Any + Send>) -> DiskLock {
        DiskLock { _holder: holder }
    }
}

/// The protocol stream (private duplicates of fds 0 and 1 in production) and the log sink.
pub trait Stdio {
    /// Reads the next chunk of at most `max` bytes from the client. An empty chunk is EOF.
    fn read(&self, max: usize) -> LocalBoxFuture<'static, io::Result<Vec<u8>>>;
    /// Writes one whole line (the caller includes the trailing newline) and flushes it.
    /// Lines never interleave: the implementation serialises writers, retries short writes
    /// and interrupted calls, and only returns once every byte is written or a write failed
    /// for good.
    fn write_line(&self, line: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>>;
    /// One log line for the operator (stderr in production). Never the protocol stream.
    fn log(&self, line: &LogLine<'_>);
}

/// How much a log line matters (what `RUST_LOG` filters on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

/// One line of the server's log: what happened, and what it concerns as fields an operator
/// can filter on (`run`, `tool`, `principal`, `action`), already scrubbed of secrets.
#[derive(Clone, Copy, Debug)]
pub struct LogLine<'a> {
    pub level: Level,
    pub message: &'a str,
    pub fields: &'a [(&'static str, &'a str)],
}

impl LogLine<'_> {
    /// The field `name`, if the line has it.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| *n == name).map(|(_, value)| *value)
    }

    /// The line as text, on one line (a message's line breaks become spaces): a run's lines
    /// begin `tool T run R: `, and any other field follows the message as ` name=value`.
    pub fn text(&self) -> String {
        let message = crate::base::text::printable(&self.message.replace('\n', " "));
        let mut text = match (self.field("tool"), self.field("run")) {
            (Some(tool), Some(run)) => format!("tool {tool} run {run}: {message}"),
            _ => message,
        };
        for (name, value) in self.fields.iter().filter(|(name, _)| !matches!(*name, "tool" | "run")) {
            text.push_str(&format!(" {name}={value}"));
        }
        text
    }
}

/// One request to the server's own HTTP endpoint, as the listener hands it over: its body
/// already read, within the listener's limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboundRequest {
    pub method: String,
    /// The path of the request target, without its query.
    pub path: String,
    /// The request target's query (after `?`), if it has one: bounded by the listener's limit
    /// on a request's head.
    pub query: Option<String>,
    /// Header names in lowercase, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The client's address, where the listener knows it (logged with a refusal).
    pub peer: Option<core::net::IpAddr>,
}

impl InboundRequest {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// The answer to an `InboundRequest`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboundAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The rest of the body, written as it comes after `body` (an event stream); none for
    /// an answer whose body is whole.
    pub more: Option<MoreBody>,
}

/// Where a streamed answer's later chunks come from. The listener writes each chunk `next`
/// gives until it gives none, and drops the source when the client is gone or has taken no
/// bytes for `ListenLimits::body_write_ms` (then the connection is closed, not ended
/// cleanly, so the client cannot mistake a cut stream for a whole one).
pub trait BodySource {
    fn next(&self) -> LocalBoxFuture<'static, Option<Vec<u8>>>;
}

/// A streamed answer's source, shared by nothing else: its drop tells it the stream ended.
#[derive(Clone)]
pub struct MoreBody(pub Rc<dyn BodySource>);

impl std::fmt::Debug for MoreBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MoreBody(..)")
    }
}

impl PartialEq for MoreBody {
    fn eq(&self, other: &MoreBody) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for MoreBody {}

/// What serves the requests a listener takes.
pub trait InboundService {
    /// Decides from the request line and headers alone (`body` empty, not yet read): an
    /// answer ends the request there, so nothing unauthenticated or misdirected is read.
    fn screen(&self, head: &InboundRequest) -> Option<OutboundAnswer>;
    /// Answers a request that passed `screen`, its body read. The future is dropped when
    /// the client closes the connection first.
    fn answer(&self, request: InboundRequest) -> LocalBoxFuture<'static, OutboundAnswer>;
    /// A request the listener itself refused, before `answer` (a body over the limit, or
    /// arriving too slowly, or past the bodies' memory): counted and logged as the handler's
    /// own refusals are.
    fn refused(&self, _head: &InboundRequest, _answer: &OutboundAnswer) {}
    /// A connection closed at once: every place in the listener's table was taken by one with
    /// a request in flight (or `peer` held its share).
    fn connection_refused(&self, _peer: core::net::IpAddr) {}
}

pub type InboundHandler = Rc<dyn InboundService>;

/// What the listener bounds before a request reaches the handler.
#[derive(Clone, Copy, Debug)]
pub struct ListenLimits {
    /// A longer body is answered 413 without reaching the handler.
    pub body_bytes_max: usize,
    /// Connections open at once; past it the oldest that has sent no request is closed for
    /// the new one, or the new one is closed when every open one has sent a request.
    pub connections_max: usize,
    /// Connections one peer address keeps open at once, likewise.
    pub connections_per_peer_max: usize,
    /// A client must send a request's headers within this time, and its body within
    /// `body_read_ms` once the headers passed, never waiting `body_chunk_wait_ms` for more.
    pub header_read_ms: u64,
    pub body_read_ms: u64,
    pub body_chunk_wait_ms: u64,
    /// The buffer a request's line and headers may take while they arrive.
    pub head_bytes_max: usize,
    /// The memory bodies being read take, in bodies of `body_bytes_max`: counted as bytes
    /// arrive; a request past it is refused at once.
    pub bodies_read_at_once: usize,
    /// A streamed answer whose client takes none of its bytes for this long is cut off.
    pub body_write_ms: u64,
}

impl ListenLimits {
    /// A loopback listener that only reads (the metrics, the console): GET requests without a
    /// body, each within 10 s, `connections` open at once.
    pub fn bodiless(connections: usize) -> ListenLimits {
        ListenLimits {
            body_bytes_max: 0,
            connections_max: connections,
            connections_per_peer_max: connections,
            header_read_ms: 10_000,
            body_read_ms: 10_000,
            body_chunk_wait_ms: 10_000,
            head_bytes_max: 16 * 1024,
            bodies_read_at_once: 1,
            body_write_ms: 10_000,
        }
    }
}

/// Serving HTTP: sockets and the HTTP/1.1 codec, nothing of MCP.
pub trait HttpServe {
    /// Listens on `address` and answers each request with `handler` until listening fails
    /// or `stop` completes: then it accepts no connection, lets each request in flight be
    /// answered and written, closes every connection, and returns. `ready` is told the
    /// address bound (port 0 picks a free one).
    fn serve(
        &self,
        address: core::net::SocketAddr,
        limits: ListenLimits,
        handler: InboundHandler,
        ready: Box<dyn FnOnce(core::net::SocketAddr)>,
        stop: LocalBoxFuture<'static, ()>,
    ) -> LocalBoxFuture<'static, io::Result<()>>;
}

/// Answers one request line of the admin channel with one answer line.
pub type AdminHandler = Rc<dyn Fn(Vec<u8>) -> LocalBoxFuture<'static, Vec<u8>>>;

/// The operator's local channel to a live server: a Unix socket in the journals directory,
/// for the operator's account alone (created 0600, and a peer of another account is refused
/// whatever the file's mode), one request line and one answer line per connection.
pub trait AdminChannel {
    /// Listens at `path` (a socket left there by a server that died is replaced: the caller
    /// holds the journals' lock) and answers each connection with `handler`, until listening
    /// fails. A request line is at most `request_bytes_max`.
    fn serve(
        &self,
        path: &Path,
        request_bytes_max: usize,
        handler: AdminHandler,
    ) -> LocalBoxFuture<'static, io::Result<()>>;
    /// Sends `request` (one line) to the server listening at `path` and returns its answer
    /// line, within `timeout_ms`.
    fn ask(&self, path: &Path, request: Vec<u8>, timeout_ms: u64) -> LocalBoxFuture<'static, io::Result<Vec<u8>>>;
}

/// One HTTP request, as the broker sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub connect_timeout_ms: u64,
    pub timeout_ms: u64,
    /// The longest body the caller keeps: an implementation may stop reading after one byte
    /// more (the caller sees the body is over and fails the action).
    pub body_bytes_max: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A failed HTTP request, and whether the service may have acted on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetError {
    /// True when the request may have been sent (a timeout or reset after sending): the
    /// action is in doubt. False when it certainly was not (refused, DNS failure).
    pub may_have_been_sent: bool,
    pub message: String,
}

pub trait Net {
    fn request(&self, request: HttpRequest) -> LocalBoxFuture<'static, Result<HttpResponse, NetError>>;
}

/// The database a `db.*` grant reaches.
#[derive(Clone, Debug, PartialEq)]
pub enum Database {
    /// `db.sqlite`: a file, opened per statement.
    Sqlite(PathBuf),
    /// `db.postgres`: a server, connected to per statement.
    Postgres(PostgresTarget),
}

/// A PostgreSQL server and the time one statement may take (the tool's `net`).
#[derive(Clone, PartialEq)]
pub struct PostgresTarget {
    /// The connection URL, from the environment variable the grant names. A secret: it may
    /// hold a password, so it is never printed (`Debug` leaves it out).
    pub url: String,
    pub connect_timeout_ms: u64,
    pub statement_timeout_ms: u64,
    /// The lease the store's writes are fenced by (`Fence`): set for a serving instance once
    /// it registered, `None` for a grant's database and for reading.
    pub fence: Option<Fence>,
}

/// A serving instance's writes to the store are fenced by its lease: the database refuses a
/// write, in the write's own transaction, unless `instance` still holds its lease at `epoch`
/// (not expired by the database's clock, not taken by a later registration). An instance
/// paused past its lease, or replaced by a later start, can no longer write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub instance: String,
    pub epoch: u64,
}

impl Fence {
    /// What a fenced write is refused with.
    pub fn refusal(&self) -> String {
        format!(
            "instance `{}` no longer holds its lease at epoch {} (it expired while the instance was paused or \
             cut off, or a later start took it): nothing was written; this instance stops, and a start takes \
             its runs up",
            self.instance, self.epoch
        )
    }
}

impl std::fmt::Debug for PostgresTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresTarget")
            .field("url", &"(secret)")
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("statement_timeout_ms", &self.statement_timeout_ms)
            .field("fence", &self.fence)
            .finish()
    }
}

/// A statement for a `db.*` capability.
#[derive(Clone, Debug, PartialEq)]
pub struct DbRequest {
    pub database: Database,
    pub write: bool,
    pub sql: String,
    pub params: Vec<serde_json::Value>,
    /// For a write: the (run id, action number) recorded in `warden_actions` in the same
    /// transaction, so a resumed run can tell whether the write happened.
    pub action: Option<(String, u64)>,
    /// The most bytes of rows (as JSON) read back; past it the statement fails (a write is
    /// rolled back).
    pub rows_bytes_max: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DbReply {
    pub rows: Vec<serde_json::Map<String, serde_json::Value>>,
    pub changes: u64,
}

/// A statement that failed, and whether its transaction may have committed anyway (the
/// connection was lost while COMMIT was on its way: only `warden_actions` can tell).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbFailure {
    pub message: String,
    pub may_have_committed: bool,
    /// The database answered, and what it holds cannot be trusted (a shared ledger that went
    /// back, a line over the limit): not a moment's unavailability, so the server stops.
    pub untrusted: bool,
}

impl DbFailure {
    /// A failure that certainly committed nothing.
    pub fn rolled_back(message: impl Into<String>) -> DbFailure {
        DbFailure { message: message.into(), may_have_committed: false, untrusted: false }
    }

    /// The database holds what cannot be trusted (nothing was committed).
    pub fn untrusted(message: impl Into<String>) -> DbFailure {
        DbFailure { message: message.into(), may_have_committed: false, untrusted: true }
    }
}

pub trait Db {
    fn execute(&self, request: DbRequest) -> LocalBoxFuture<'static, Result<DbReply, DbFailure>>;
    /// Creates the SQLite database at `path` by running `sql` (several statements) in one
    /// transaction. Used only when the database does not exist yet.
    fn initialize(&self, path: &Path, sql: &str) -> LocalBoxFuture<'static, Result<(), String>>;
    /// Whether `warden_actions` holds (run id, action number): the write is known to have
    /// happened. `Ok(false)` means it is known not to have happened.
    fn action_recorded(
        &self,
        database: &Database,
        run: &str,
        action: u64,
    ) -> LocalBoxFuture<'static, Result<bool, String>>;
}

/// The version of the schema Warden keeps its own state in, in a PostgreSQL database shared by
/// several instances (`docs/design/several-instances.md`). A database at a newer version is
/// refused; an older one is migrated.
pub const STATE_SCHEMA_VERSION: u32 = 5;

/// What `StateDb::migrate` found and left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// The schema's version before (0: no schema yet).
    pub found: u32,
    /// Its version now (`STATE_SCHEMA_VERSION`).
    pub now: u32,
}

/// One line of the shared ledger: the same checksummed line as a line of `server.ledger`,
/// with its place in the order every instance folds the lines in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerLine {
    pub seq: u64,
    pub line: Vec<u8>,
}

/// The most lines one ledger exchange reads: an instance further behind catches up over
/// several exchanges.
pub const LEDGER_PAGE_LINES: u64 = 256;
/// The longest line of the shared ledger (the database refuses a longer one, and so does the
/// writer first): a page read is at most `LEDGER_PAGE_LINES` of these.
pub const LEDGER_LINE_BYTES_MAX: usize = 64 * 1024;

/// What a ledger exchange decides, given the lines after the caller's last one (in order) and,
/// when they are the whole rest of the ledger, the database's time (UTC ms): a line to append
/// after them, or none. Without the time (a page was cut: more lines follow), nothing may be
/// appended: the caller folds the lines and asks again.
pub type Decide = Box<dyn FnOnce(&[LedgerLine], Option<u64>) -> Option<Vec<u8>>>;

/// How a ledger exchange ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchanged {
    /// The sequence number of the line appended, if `decide` gave one.
    pub appended: Option<u64>,
    /// The last sequence number the caller has now seen (the appended line's, if any).
    pub seen: u64,
    /// Whether lines after `seen` were left for another exchange.
    pub more: bool,
}

/// An instance's lease on the runs it owns, as the database granted it: the epoch that fences
/// its writes, and how long the lease has left by the database's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub epoch: u64,
    pub remaining_ms: u64,
    /// For a registration: how long the lease of the epoch it replaced had left (0 when that
    /// lease had ended, or there was none). Runs that epoch owned are taken up once it ends.
    pub replaced_remaining_ms: u64,
}

/// What an appended ledger line does to its run's owner (`warden_owners`), in the line's own
/// transaction: a reserve makes the appending instance the run's owner, a settle or a
/// release ends the ownership, so the table holds the open runs only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerChange {
    Keep,
    Take(String),
    End(String),
}

/// The most instances that serve one store at once: each holds a slot (`StateDb::hold_slot`),
/// so the instances table and a lookup of expired leases stay bounded.
pub const INSTANCE_SLOTS_MAX: u32 = 64;

/// The most instances `StateDb::instances` lists: every slot, and as many names again left by
/// Warden versions before slots.
pub const INSTANCES_LISTED_MAX: usize = 2 * INSTANCE_SLOTS_MAX as usize;

/// The name the instance holding slot `slot` registers under (a restart in the same slot takes
/// its runs up at once, under the next epoch).
pub fn instance_name(slot: u32) -> String {
    format!("instance-{slot}")
}

/// A slot of the store held while `hold` lives (`StateDb::hold_slot`).
pub struct SlotHold {
    pub slot: u32,
    pub hold: HoldLost,
}

/// The longest instance name the store keeps.
pub const INSTANCE_NAME_BYTES_MAX: usize = 128;

/// Which of a run's records a line belongs to: the same lines the file store keeps in
/// `<run>.inputs.json`, `<run>.journal` and `waiting/<run>.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecordKind {
    Inputs,
    Journal,
    Waiting,
}

impl RecordKind {
    /// The name the database keeps the kind under.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Inputs => "inputs",
            RecordKind::Journal => "journal",
            RecordKind::Waiting => "waiting",
        }
    }
}

/// The longest run id the store keeps (run ids are 32 hex digits; the bound is the table's).
pub const RUN_ID_BYTES_MAX: usize = 64;

/// The most runs one `StateDb::record_runs` lists.
pub const RECORD_RUNS_PAGE: usize = 256;

/// One line written to a run's record, in one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordWrite {
    pub run: String,
    pub kind: RecordKind,
    /// The line's place in the record, from 1; a line already there is refused.
    pub seq: u64,
    /// One checksummed line, without its newline, at most `limits::RECORD_LINE_BYTES_MAX`.
    pub line: Vec<u8>,
    /// The record's earlier lines go in the same transaction (a waiting record replaced).
    pub replace: bool,
}

/// Warden's own state in a PostgreSQL database that several instances share (issue 28). The
/// seam takes typed operations, each one transaction, so the simulator can model each one's
/// meaning (and its faults) directly, and the SQL lives in `io/` only.
pub trait StateDb {
    /// Creates the schema or migrates it to `STATE_SCHEMA_VERSION`, in one transaction that
    /// one instance at a time takes; refuses a database whose schema is newer.
    fn migrate(&self, target: &PostgresTarget) -> LocalBoxFuture<'static, Result<Migration, DbFailure>>;
    /// One exchange with the shared ledger, under its lock (so instances append one at a
    /// time, and every line's sequence number is one more than the last): hands `decide` the
    /// lines after `after` (a page of them), in order, then appends what it returns. Refuses an
    /// `after` past the ledger's end (the database was restored from an older copy), and a line
    /// over `LEDGER_LINE_BYTES_MAX`. A line appended changes its run's owner as `owner` says
    /// (`Take` needs a fenced target: the fence's instance becomes the owner).
    fn ledger_exchange(
        &self,
        target: &PostgresTarget,
        after: u64,
        owner: OwnerChange,
        decide: Decide,
    ) -> LocalBoxFuture<'static, Result<Exchanged, DbFailure>>;
    /// Registers `instance` with a lease of `lease_ms` from now (the database's now): a new
    /// instance gets epoch 1, one registering again (a restart) the next epoch, which fences
    /// every write its earlier self could still try.
    fn register(
        &self,
        target: &PostgresTarget,
        instance: &str,
        lease_ms: u64,
    ) -> LocalBoxFuture<'static, Result<Lease, DbFailure>>;
    /// Renews the lease of `instance` at `epoch` to `lease_ms` from now, if it still holds it
    /// (not expired by the database's clock, not taken by a later epoch); `None`: it does not.
    fn renew(
        &self,
        target: &PostgresTarget,
        instance: &str,
        epoch: u64,
        lease_ms: u64,
    ) -> LocalBoxFuture<'static, Result<Option<Lease>, DbFailure>>;
    /// The instances whose lease has ended by the database's clock, with their epochs.
    fn expired(&self, target: &PostgresTarget) -> LocalBoxFuture<'static, Result<Vec<(String, u64)>, DbFailure>>;
    /// Writes one line of a run's record (`RecordWrite`): durable once it returns. Refuses a
    /// line over `limits::RECORD_LINE_BYTES_MAX`, a run id over `RUN_ID_BYTES_MAX`, and a
    /// line whose place is taken.
    fn record_write(
        &self,
        target: &PostgresTarget,
        write: RecordWrite,
    ) -> LocalBoxFuture<'static, Result<(), DbFailure>>;
    /// A run's record, its lines in order (`None`: the run has no such record). Refuses a
    /// record with a line missing or over the line limit.
    fn record_read(
        &self,
        target: &PostgresTarget,
        run: &str,
        kind: RecordKind,
    ) -> LocalBoxFuture<'static, Result<Option<Vec<Vec<u8>>>, DbFailure>>;
    /// Removes a run's record; whether it had one.
    fn record_remove(
        &self,
        target: &PostgresTarget,
        run: &str,
        kind: RecordKind,
    ) -> LocalBoxFuture<'static, Result<bool, DbFailure>>;
    /// The runs that have a record of `kind`, after `after` in order, at most
    /// `RECORD_RUNS_PAGE` of them (recovery finds the kept arguments and waiting records a crash
    /// left behind this way, as it lists files).
    fn record_runs(
        &self,
        target: &PostgresTarget,
        kind: RecordKind,
        after: &str,
    ) -> LocalBoxFuture<'static, Result<Vec<String>, DbFailure>>;
    /// Takes the first free slot of the store (1 to `INSTANCE_SLOTS_MAX`): a lock held while the
    /// hold lives and given up when it is dropped or the process ends; the hold resolves, with
    /// why, if the lock is lost (the connection holding it ended: a database restart).
    fn hold_slot(&self, target: &PostgresTarget) -> LocalBoxFuture<'static, Result<SlotHold, DbFailure>>;
    /// The owners of open runs, `(run, instance)`, after run `after` in order, at most
    /// `RECORD_RUNS_PAGE` of them.
    fn owners(
        &self,
        target: &PostgresTarget,
        after: &str,
    ) -> LocalBoxFuture<'static, Result<Vec<(String, String)>, DbFailure>>;
    /// Every registered instance with its epoch and how long its lease has left by the
    /// database's clock (0: ended), by name, at most `INSTANCES_LISTED_MAX` (slots keep them few).
    fn instances(&self, target: &PostgresTarget) -> LocalBoxFuture<'static, Result<Vec<(String, Lease)>, DbFailure>>;
    /// Makes the fenced target's instance the owner of `run` if it has none (a run left open by
    /// a version before owners were kept), under the ledger's lock and only if the ledger ends
    /// at line `after`, which its caller has read: whether it owns it now, or `None` when lines
    /// came after (the run may have ended since it was read open: read them and decide again).
    fn claim(
        &self,
        target: &PostgresTarget,
        run: &str,
        after: u64,
    ) -> LocalBoxFuture<'static, Result<Option<bool>, DbFailure>>;
    /// Takes over the runs of `instance`, whose lease at `epoch` has ended, for the fenced
    /// target's instance, in one transaction that first waits for every write of `instance`
    /// in flight: the runs taken, or `None` when the lease is not ended at that epoch (renewed,
    /// or registered again).
    fn take_over(
        &self,
        target: &PostgresTarget,
        instance: &str,
        epoch: u64,
    ) -> LocalBoxFuture<'static, Result<Option<Vec<String>>, DbFailure>>;
}

/// A slot of the store, held while this lives (`StateDb::hold_slot`); resolves with why if
/// the lock is lost.
pub type HoldLost = LocalBoxFuture<'static, String>;

/// Randomness: run ids and anything else random.
pub trait Rng {
    fn fill(&self, bytes: &mut [u8]);
}

/// Runs tasks: concurrent ones on the server's single thread, and CPU-bound closures
/// (Starlark) off the reactor in production, inline in the simulator.
pub trait Spawn {
    fn spawn(&self, task: LocalBoxFuture<'static, ()>);
    fn run_blocking(&self, job: Box<dyn FnOnce() + Send>) -> LocalBoxFuture<'static, ()>;
}

/// A child process (the operator's notify command).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessRequest {
    pub argv: Vec<String>,
    /// The working directory (the manifest's folder for the notify command).
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub stdin: Vec<u8>,
    pub timeout_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessOutcome {
    /// None when the process was killed at its timeout or by a signal.
    pub exit_code: Option<i32>,
}

pub trait Process {
    fn run(&self, request: ProcessRequest) -> LocalBoxFuture<'static, io::Result<ProcessOutcome>>;
    /// An environment variable of the server process (secrets are named in the manifest).
    fn var(&self, name: &str) -> Option<String>;
    /// What the server process uses of its machine, for `/metrics`; `None` where it cannot be
    /// read (not Linux, or a simulated process).
    fn usage(&self) -> Option<ProcessUsage> {
        None
    }
    /// Shutdown signals (SIGTERM, SIGINT, SIGHUP) received since listening began (0 before).
    fn shutdown_signals(&self) -> u64;
    /// Resolves once `nth` shutdown signals have been received (the first asks for a drain,
    /// the second for an exit at once); one received before the call counts. The first call
    /// starts listening: from then on a signal is counted, and no longer ends the process.
    fn shutdown_signal(&self, nth: u64) -> LocalBoxFuture<'static, ()>;
}

/// What a process uses of its machine (`Process::usage`), as Prometheus's process metrics say it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessUsage {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    pub resident_memory_bytes: u64,
    pub open_fds: u64,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// The durable steps of a call (seed 000 section 7), and the gap inside an action. The
/// server reports reaching each; the simulator (and a crash-test build of the binary) can
/// crash the process right there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Point {
    /// Step 1: the reserve event is durable.
    Reserved,
    /// Step 2: the inputs file is durable.
    InputsKept,
    /// Step 3: the journal's header is durable.
    JournalCreated,
    /// Step 4: the run's records, its end included, are durable.
    RunRecorded,
    /// Step 5: the waiting record of a stopped run is durable.
    WaitingRecorded,
    /// Step 6: the settle event is durable.
    Settled,
    /// Step 7: the answer was written to the client.
    Answered,
    /// Inside step 4: an action's begin record is durable, its done record is not.
    ActionBegun,
    /// Inside step 4: a run resumed at start has journaled that it was resumed.
    Resumed,
}

impl Point {
    pub const ALL: [Point; 9] = [
        Point::Reserved,
        Point::InputsKept,
        Point::JournalCreated,
        Point::RunRecorded,
        Point::WaitingRecorded,
        Point::Settled,
        Point::Answered,
        Point::ActionBegun,
        Point::Resumed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Point::Reserved => "reserved",
            Point::InputsKept => "inputs-kept",
            Point::JournalCreated => "journal-created",
            Point::RunRecorded => "run-recorded",
            Point::WaitingRecorded => "waiting-recorded",
            Point::Settled => "settled",
            Point::Answered => "answered",
            Point::ActionBegun => "action-begun",
            Point::Resumed => "resumed",
        }
    }

    /// The step number of seed 000 section 7 (the action gap counts as step 4).
    pub fn step(self) -> u8 {
        match self {
            Point::Reserved => 1,
            Point::InputsKept => 2,
            Point::JournalCreated => 3,
            Point::RunRecorded | Point::ActionBegun | Point::Resumed => 4,
            Point::WaitingRecorded => 5,
            Point::Settled => 6,
            Point::Answered => 7,
        }
    }
}

pub trait Probe {
    /// Called right after `point`'s durable record, for run `run`.
    fn reached(&self, point: Point, run: &str);
}

/// Where programs execute: somewhere a limit holds even inside one builtin (a worker process
/// for the real server; the simulator runs them in-process). See `program::job`.
pub trait Sandbox {
    fn execute(&self, job: Job) -> LocalBoxFuture<'static, Result<Executed, Stopped>>;
}

/// The whole seam, passed explicitly. Cloning is cheap.
#[derive(Clone)]
pub struct Env {
    pub clock: Rc<dyn Clock>,
    pub disk: Rc<dyn Disk>,
    pub stdio: Rc<dyn Stdio>,
    pub net: Rc<dyn Net>,
    pub db: Rc<dyn Db>,
    pub state_db: Rc<dyn StateDb>,
    pub rng: Rc<dyn Rng>,
    pub spawn: Rc<dyn Spawn>,
    pub process: Rc<dyn Process>,
    pub probe: Rc<dyn Probe>,
    pub sandbox: Rc<dyn Sandbox>,
    pub http: Rc<dyn HttpServe>,
    pub admin: Rc<dyn AdminChannel>,
    /// The secrets no log line may carry: every line and field is scrubbed of them here, in
    /// one place, whoever built it (a request's path can hold a bearer token).
    pub log_secrets: Rc<LogSecrets>,
}

/// The secret values the server's log is scrubbed of, registered once they are known.
#[derive(Default)]
pub struct LogSecrets(std::cell::RefCell<Vec<String>>);

impl LogSecrets {
    pub fn keep(&self, values: &[String]) {
        let mut kept = self.0.borrow_mut();
        for value in values {
            if !kept.contains(value) {
                kept.push(value.clone());
            }
        }
    }

    /// `text` with every secret replaced, as written, JSON-escaped or percent-encoded.
    pub fn scrub(&self, text: &str) -> String {
        let secrets = self.0.borrow();
        if secrets.is_empty() {
            return text.to_string();
        }
        crate::broker::scrub_decoded(text, &secrets)
    }
}

impl Env {
    /// A line of the server's log at level info.
    pub fn log(&self, line: &str) {
        self.log_at(Level::Info, line, &[]);
    }

    /// A line of the server's log at `level`, with fields (see `LogLine`).
    pub fn log_at(&self, level: Level, message: &str, fields: &[(&'static str, &str)]) {
        let message = self.log_secrets.scrub(message);
        let fields: Vec<(&'static str, String)> =
            fields.iter().map(|(name, value)| (*name, self.log_secrets.scrub(value))).collect();
        let fields: Vec<(&'static str, &str)> = fields.iter().map(|(name, value)| (*name, value.as_str())).collect();
        self.stdio.log(&LogLine { level, message: &message, fields: &fields });
    }

    pub fn reached(&self, point: Point, run: &str) {
        self.probe.reached(point, run);
    }

    /// 32 random lowercase hexadecimal characters.
    pub fn new_run_id(&self) -> String {
        let mut bytes = [0u8; 16];
        self.rng.fill(&mut bytes);
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Runs a CPU-bound closure off the reactor and returns its result, or the panic
    /// message when it panicked (a bug, reported as an internal failure, never a crash).
    pub async fn blocking<R, F>(&self, job: F) -> Result<R, String>
    where
        R: Send + 'static,
        F: FnOnce() -> R + Send + 'static,
    {
        blocking_on(self.spawn.as_ref(), job).await
    }
}

/// `Env::blocking` over a bare `Spawn` (for a sandbox that runs jobs in-process).
pub async fn blocking_on<R, F>(spawn: &dyn Spawn, job: F) -> Result<R, String>
where
    R: Send + 'static,
    F: FnOnce() -> R + Send + 'static,
{
    {
        type Slot<R> = Arc<Mutex<Option<Result<R, String>>>>;
        let slot: Slot<R> = Arc::new(Mutex::new(None));
        let filled = Arc::clone(&slot);
        spawn
            .run_blocking(Box::new(move || {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                    .map_err(|panic| panic_message(panic.as_ref()));
                *filled.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
            }))
            .await;
        let outcome = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        outcome.unwrap_or_else(|| Err("a blocking job ended without a result".to_string()))
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        text.to_string()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with no message".to_string()
    }
}
