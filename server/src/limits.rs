//! The bounds that cross modules, in one place, with their relations checked when the crate
//! compiles: a writer never writes what its reader would refuse, and every depth stays below
//! the one serde's parser stops at. Limits that one module alone checks stay with it.

/// serde_json's own nesting limit: a deeper document is an error from the parser itself.
pub const SERDE_DEPTH_MAX: usize = 128;

// The wire: one frame of a client, one HTTP body, one result.

/// The longest line accepted, newline excluded (seed 000 section 3).
pub const LINE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// The deepest nesting of arrays and objects accepted (seed 000 section 3).
pub const DEPTH_MAX: usize = 64;

/// The largest tool result sent, as JSON (seed 000 section 3).
pub const RESULT_BYTES_MAX: usize = 1024 * 1024;

// The journal: one record line and the values it carries.

/// The longest record line accepted when reading (a journal's end record holds a result of
/// up to 1 MiB, escaped).
pub const RECORD_LINE_BYTES_MAX: usize = 8 * 1024 * 1024;

/// The deepest JSON value a record carries (a result, a response's parsed body). The reader
/// parses a line with serde's limit of 128 nested levels; records wrap a value a few levels
/// deep, so values are held to half of it where they enter.
pub const VALUE_DEPTH_MAX: usize = 64;

/// The most actions one run may take; a bound on every replay loop.
pub const ACTIONS_PER_RUN_MAX: u64 = 1000;

/// The longest payment intent id a refund takes.
pub const PAYMENT_INTENT_BYTES_MAX: usize = 255;

// Input rounds: runs waiting for their client.

/// How long a run waits for its client's answers to one round before it ends (`deadline`).
pub const INPUT_WAIT_MS: u64 = 10 * 60 * 1000;

/// The most runs waiting for input at once; a run that would be one more ends instead.
pub const AWAITING_RUNS_MAX: usize = 1024;

/// The most runs of one tool waiting for one caller's input (a principal's, or every
/// unauthenticated caller's): one caller cannot fill the server's.
pub const AWAITING_RUNS_PER_CALLER_MAX: usize = 64;

/// The longest `requestState` read.
pub const REQUEST_STATE_BYTES_MAX: usize = 2048;

/// The most bytes of `inputResponses` read, as JSON.
pub const INPUT_RESPONSES_BYTES_MAX: usize = 256 * 1024;

// The relations.

// A frame's depth is refused by Warden's own scan, never by serde's parser.
/// The action rule on the PostgreSQL store (issue 28): an action is sent only while the
/// instance's lease, as last confirmed, outlasts the action's longest send by this margin (the
/// time between the check and the first byte); `warden check` holds every grant's longest send
/// and the margin within two thirds of the lease, so a healthy renewal never holds one back.
pub const LEASE_SEND_MARGIN_MS: u64 = 500;
/// A keyed write whose answer was lost is sent again with the same key: first after this
/// wait, each next wait doubled up to `KEYED_RESEND_WAIT_MS_MAX`, at most `KEYED_RESENDS_MAX`
/// times, and only while the run's deadline (or, without one, `KEYED_RESEND_FOR_MS_MAX`) is not
/// reached; still unanswered, it is in doubt and waits for a person.
pub const KEYED_RESEND_WAIT_MS_FIRST: u64 = 250;
pub const KEYED_RESEND_WAIT_MS_MAX: u64 = 8_000;
pub const KEYED_RESENDS_MAX: u32 = 16;
pub const KEYED_RESEND_FOR_MS_MAX: u64 = 2 * 60 * 1000;
/// How many times a decision on the shared ledger is made again when other instances keep
/// appending to it between the decision and its write: a call's admission (`LedgerError::Moved`)
/// and a start's claim of a run left without an owner.
pub const ADMISSION_TRIES_MAX: u32 = 16;
/// How long past its statement timeout a PostgreSQL session may still be open (the client's
/// grace, `io/postgres.rs`): a `db.postgres` write's COMMIT can land that late.
pub const POSTGRES_CLIENT_GRACE_MS: u64 = 1000;
/// The drift bound between the database's clock and an instance's monotonic clock, per
/// thousand: a lease of `r` ms left by the database's clock lasts at least `r - r/1000` ms
/// by the instance's.
pub const LEASE_DRIFT_PER_MILLE: u64 = 1;

const _: () = assert!(DEPTH_MAX < SERDE_DEPTH_MAX);
// A record wraps its value a few levels deep and is parsed with serde's limit.
const _: () = assert!(VALUE_DEPTH_MAX * 2 <= SERDE_DEPTH_MAX);
// A result the server sends fits one line its own reader (and the simulator's) accepts.
const _: () = assert!(RESULT_BYTES_MAX < LINE_BYTES_MAX);
// A run's end record holds a result of up to RESULT_BYTES_MAX even with every byte escaped
// at its longest (`\u00XX`, six bytes), beside the record's other fields.
const _: () = assert!(RESULT_BYTES_MAX * 6 + 64 * 1024 <= RECORD_LINE_BYTES_MAX);
// A request's state and responses arrive inside one frame.
const _: () = assert!(REQUEST_STATE_BYTES_MAX + INPUT_RESPONSES_BYTES_MAX < LINE_BYTES_MAX);
// One caller's share of the waiting runs is a share of the whole.
const _: () = assert!(AWAITING_RUNS_PER_CALLER_MAX <= AWAITING_RUNS_MAX);

/// What a waiting record keeps of a run's arguments, for the person who decides: past this
/// (serialised) they are left out, saying so (the kept arguments record has them whole).
pub const WAITING_ARGUMENTS_BYTES_MAX: usize = 64 * 1024;
/// What a waiting record keeps of an action's request body in its shown form.
pub const SHOWN_BODY_CHARS_MAX: usize = 4 * 1024;
// A waiting record's shown parts, escaped at their longest, leave its action room in a line.
const _: () = assert!((WAITING_ARGUMENTS_BYTES_MAX + SHOWN_BODY_CHARS_MAX * 4) * 6 < RECORD_LINE_BYTES_MAX / 4);
