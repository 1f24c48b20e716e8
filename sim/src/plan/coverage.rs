//! Crash-window coverage: each crash is counted by where it landed (after a durable step, or
//! at a disk operation) and what was in flight at that moment (no action, an action of each
//! kind begun and not done, a run waiting for an operator, a ledger compaction). `explore`
//! reports the windows hit and lists the required ones never hit; CI fails on those.

use warden::manifest::kinds::{Kind, Method};
use warden::store::ledger::LEDGER_TEMP_FILE;

use crate::env::world::World;
use crate::workload::operator::waiting_records;

/// What was in flight when a crash landed, most telling first.
pub fn in_flight(world: &World) -> &'static str {
    let journals = World::path("journals");
    if world.disk.peek(&journals.join(LEDGER_TEMP_FILE)).is_some() {
        return "a compaction";
    }
    if !waiting_records(world).is_empty() {
        return "a waiting run";
    }
    // An action begun and not done is its journal's last record but for restarts noted
    // after it (a journal's actions are strictly ordered: begin, done, begin...); only the
    // last lines are read.
    let journal_files = world.disk.files().into_iter().filter(|p| p.extension().is_some_and(|e| e == "journal"));
    for path in journal_files {
        let begun = world.disk.with_bytes(&path, |bytes| {
            for line in crate::env::oracle::lines_from_end(bytes) {
                match crate::env::oracle::record_tag(line) {
                    Some("resumed" | "retried") => continue,
                    Some("begin") => {
                        let line = serde_json::from_slice::<serde_json::Value>(line).ok()?;
                        return Some(kind_of(&line["rec"]["action"]));
                    }
                    _ => return None,
                }
            }
            None
        });
        if let Some(Some(kind)) = begun {
            return kind;
        }
    }
    "no action"
}

fn kind_of(action: &serde_json::Value) -> &'static str {
    let Ok(action) = serde_json::from_value::<warden::broker::Action>(action.clone()) else {
        return "an unreadable action";
    };
    match (action.kind, action.method, action.idempotency_key.is_some()) {
        (Kind::Sqlite, Method::Execute, _) => "an SQLite write begun",
        (Kind::Sqlite, _, _) => "an SQLite read begun",
        (Kind::Postgres, Method::Execute, _) => "a PostgreSQL write begun",
        (Kind::Postgres, _, _) => "a PostgreSQL read begun",
        (Kind::Model, _, _) => "a model call begun",
        (_, Method::Refund, true) => "a keyed refund begun",
        (_, Method::Refund, false) => "a plain refund begun",
        (_, Method::Get, _) => "an HTTP read begun",
        (_, _, true) => "a keyed HTTP write begun",
        (_, _, false) => "a plain HTTP write begun",
    }
}

/// The windows a sweep of 0..500 seeds must hit (CI's sweep): those hit often enough there that
/// a change to the worlds cannot leave them out by chance (an action of a rarer kind begun at a
/// crash is reported, and hit by 10,000 seeds, but not required). Where: a step's point name,
/// or "a disk operation".
pub const REQUIRED: &[(&str, &str)] = &[
    ("reserved", "no action"),
    ("inputs-kept", "no action"),
    ("journal-created", "no action"),
    ("run-recorded", "no action"),
    ("settled", "no action"),
    ("answered", "no action"),
    ("action-begun", "an HTTP read begun"),
    ("a disk operation", "no action"),
    ("a disk operation", "a waiting run"),
    ("a disk operation", "an HTTP read begun"),
    ("a takeover", "an action begun"),
    ("a write after its lease", "refused by its fence"),
];

/// Where a crash can land besides right after a durable step; and, in a world of several
/// instances on one store, the windows of a takeover (`TAKEOVER_WINDOWS`).
pub const OTHER_PLACES: &[&str] = &[
    "a disk operation",
    "a service's answer (the server crashed after it acted)",
    "a program's execution",
    "a stop (a failed write, a refused start)",
    "a takeover",
    "a write after its lease",
];

/// The windows of a takeover between instances on one store, each from the simulated
/// database's witness (its kind): a run taken over with an action begun (its instance stalled
/// or killed in it), a write refused because its instance's lease had ended (a stalled
/// instance woke). (witness, place, what was in flight)
pub const TAKEOVER_WINDOWS: &[(&str, &str, &str)] = &[
    ("a run taken over with an action begun", "a takeover", "an action begun"),
    ("a write refused after its runs were taken over", "a write after its lease", "refused by its fence"),
];

/// Every window the report names, required or not: each place a crash can land by each thing
/// in flight.
pub const IN_FLIGHT: &[&str] = &[
    "no action",
    "an HTTP read begun",
    "a keyed HTTP write begun",
    "a plain HTTP write begun",
    "a keyed refund begun",
    "a plain refund begun",
    "an SQLite write begun",
    "an SQLite read begun",
    "a PostgreSQL write begun",
    "a PostgreSQL read begun",
    "a model call begun",
    "a waiting run",
    "a compaction",
    "an action begun",
    "refused by its fence",
];

/// A window's name in reports.
pub fn window(place: &str, in_flight: &str) -> String {
    format!("{place} x {in_flight}")
}
