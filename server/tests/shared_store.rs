//! The PostgreSQL store's first parts (issue 28) against a real PostgreSQL server (the throwaway
//! cluster of `scripts/postgres.sh`): `warden migrate` creates and migrates the schema and
//! refuses a newer one, and the shared ledger holds a quota and a `once` key across instances
//! whose decisions race on separate connections, reads a ledger longer than a page, and refuses
//! a ledger that went back or was damaged; an instance paused holding the ledger's lock loses
//! it and the others go on; an instance's lease is renewed while it holds it and fenced once it
//! ends or a later epoch takes it.

mod common;

use std::path::Path;
use std::process::Command;
use std::rc::Rc;

use common::postgres::Pg;
use futures_util::future::join_all;
use warden::env::{PostgresTarget, LEDGER_PAGE_LINES};
use warden::store::ledger::{Counting, Event, OnceRecord, State};
use warden::store::shared::{SharedError, SharedLedger};

const URL_ENV: &str = "WARDEN_STORE_URL";

/// A manifest whose state is kept in PostgreSQL, with one tool, in a new directory.
fn manifest_dir() -> tempfile::TempDir {
    manifest_dir_leased(None)
}

/// The same, with `server.store.postgres.lease` set when given.
fn manifest_dir_leased(lease: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("echo.star"), "def main(text: str) -> str:\n    \"\"\"Echoes.\n\n    Args:\n        text: what to echo\n    \"\"\"\n    return text\n").unwrap();
    let mut store = serde_json::json!({"url": {"env": URL_ENV}});
    if let Some(lease) = lease {
        store["lease"] = lease.into();
    }
    let manifest = serde_json::json!({
        "server": {"name": "shared", "journals": "journals", "store": {"postgres": store}},
        "tools": [{"name": "echo", "program": "echo.star"}]
    });
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    dir
}

/// `warden <args> <dir>/manifest.json` with the store's URL set (or not): exit success, and
/// everything it printed.
fn warden(args: &[&str], dir: &Path, url: Option<&str>) -> (bool, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
    command.args(args).arg(dir.join("manifest.json")).env_remove(URL_ENV);
    if let Some(url) = url {
        command.env(URL_ENV, url);
    }
    let output = command.output().unwrap();
    let printed = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), printed)
}

#[test]
fn migrate_creates_the_schema_once_and_refuses_a_newer_one() {
    let pg = Pg::create("migrate");
    let dir = manifest_dir();
    let (ok, printed) = warden(&["migrate"], dir.path(), None);
    assert!(!ok && printed.contains(URL_ENV) && printed.contains("not set"), "{printed}");

    let (ok, printed) = warden(&["migrate"], dir.path(), Some(&pg.url));
    assert!(ok && printed.contains("schema created at version 5"), "{printed}");
    assert_eq!(pg.sql("SELECT version FROM warden_schema"), "5");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_ledger"), "0");
    let (ok, printed) = warden(&["migrate"], dir.path(), Some(&pg.url));
    assert!(ok && printed.contains("already at version 5"), "{printed}");

    pg.sql("UPDATE warden_schema SET version = 7");
    let (ok, printed) = warden(&["migrate"], dir.path(), Some(&pg.url));
    assert!(!ok && printed.contains("version 7, newer than this warden's (5)"), "{printed}");
    assert_eq!(pg.sql("SELECT version FROM warden_schema"), "7", "a refused migration changes nothing");

    let (ok, printed) = warden(&["migrate"], dir.path(), Some(&pg.url_with_password("not-the-password")));
    assert!(!ok && printed.contains("password"), "{printed}");
    assert!(!printed.contains("not-the-password"), "{printed}");

    // The operator's commands read the store.
    let (ok, printed) = warden(&["mcp", "status"], dir.path(), Some(&pg.url));
    assert!(ok && printed.contains("warden_ledger") && printed.contains("unfinished runs: none"), "{printed}");
    let (ok, printed) = warden(&["check"], dir.path(), Some(&pg.url));
    assert!(ok, "{printed}");
    assert!(!printed.contains(&pg.password()));
}

#[test]
fn migrations_started_together_create_the_schema_once() {
    let pg = Pg::create("migrate_race");
    let dir = manifest_dir();
    let started: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_warden"))
                .arg("migrate")
                .arg(dir.path().join("manifest.json"))
                .env(URL_ENV, &pg.url)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let created = started
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .inspect(|output| assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr)))
        .filter(|output| String::from_utf8_lossy(&output.stdout).contains("created"))
        .count();
    assert_eq!(created, 1);
    assert_eq!(pg.sql("SELECT count(*) FROM warden_schema"), "1");
}

fn target(pg: &Pg) -> PostgresTarget {
    PostgresTarget { url: pg.url.clone(), connect_timeout_ms: 10_000, statement_timeout_ms: 30_000, fence: None }
}

/// A database with the schema, as `warden migrate` leaves it.
fn migrated(label: &str) -> Pg {
    let pg = Pg::create(label);
    let (ok, printed) = warden(&["migrate"], manifest_dir().path(), Some(&pg.url));
    assert!(ok, "{printed}");
    pg
}

fn reserve(run: String, at_ms: u64, once: Option<&str>) -> Event {
    Event::Reserve {
        run,
        tool: "refund".into(),
        at_ms,
        calls: 1,
        money: Vec::new(),
        once: once.map(|key| OnceRecord { key: key.into(), arguments: "same".into() }),
        principal: None,
        tokens: 0,
    }
}

/// A reserve for `run` if one more call of `refund` fits a quota of `calls_max` an hour and
/// the `once` key (if any) is not held yet: what admission decides.
fn admit(state: &State, now: u64, run: String, calls_max: u64, once: Option<&str>) -> Option<Event> {
    if let Some(key) = once {
        if state.once_lookup(key, 3_600_000, now) != warden::store::ledger::OnceLookup::None {
            return None;
        }
    }
    state.quota_admits("refund", 3_600_000, Some(calls_max), None, &[], (None, 0), now, Counting::AllRuns).ok()?;
    Some(reserve(run, now, once))
}

/// `decisions` admissions, alternating between two instances, all in flight at once (each
/// on its own connection): how many each instance admitted.
fn race(pg: &Pg, decisions: usize, calls_max: u64, once: Option<&'static str>) -> Vec<usize> {
    warden::io::run(async {
        let env = warden::io::command_env();
        let instances = [
            Rc::new(SharedLedger::open(&env, target(pg)).await.unwrap()),
            Rc::new(SharedLedger::open(&env, target(pg)).await.unwrap()),
        ];
        let attempts = (0..decisions).map(|n| {
            let instance = Rc::clone(&instances[n % 2]);
            async move {
                let run = format!("run{n:04}");
                let decided = instance.decide(move |state, now| admit(state, now, run, calls_max, once)).await;
                (n % 2, decided.expect("every exchange succeeds, however they race"))
            }
        });
        let mut admitted = vec![0, 0];
        for (instance, decided) in join_all(attempts).await {
            admitted[instance] += usize::from(decided.is_some());
        }
        // Each instance, caught up, folds the same state.
        for instance in &instances {
            instance.decide(|_, _| None).await.unwrap();
        }
        assert_eq!(*instances[0].state(), *instances[1].state());
        admitted
    })
}

#[test]
fn a_quota_holds_across_instances_racing_on_separate_connections() {
    let pg = migrated("quota_race");
    let admitted = race(&pg, 24, 5, None);
    assert_eq!(admitted.iter().sum::<usize>(), 5, "{admitted:?}");
    // Gapless, one line per admission, in the order they were made.
    assert_eq!(pg.sql("SELECT count(*) || ' ' || max(seq) FROM warden_ledger"), "5 5");
}

/// Every decision appends: an instance's decisions in flight at once each fold the lines the
/// others appended, and each line is folded once (found by the benchmark, not by the race
/// above, where most decisions append nothing).
#[test]
fn decisions_in_flight_on_one_instance_each_fold_every_line_once() {
    let pg = migrated("all_admitted");
    let admitted = race(&pg, 40, 1000, None);
    assert_eq!(admitted, vec![20, 20]);
    assert_eq!(pg.sql("SELECT count(*) || ' ' || max(seq) FROM warden_ledger"), "40 40");
}

#[test]
fn a_once_key_admits_one_run_across_instances() {
    let pg = migrated("once_race");
    let admitted = race(&pg, 12, 100, Some("the-same-refund"));
    assert_eq!(admitted.iter().sum::<usize>(), 1, "{admitted:?}");
}

#[test]
fn an_instance_far_behind_catches_up_over_pages() {
    let pg = migrated("pages");
    let lines = 2 * LEDGER_PAGE_LINES + 7;
    warden::io::run(async {
        let env = warden::io::command_env();
        let writer = SharedLedger::open(&env, target(&pg)).await.unwrap();
        for n in 0..lines {
            let appended = writer.decide(move |_, now| Some(reserve(format!("run{n:04}"), now, None))).await;
            assert!(appended.unwrap().is_some());
        }
        let late = SharedLedger::open(&env, target(&pg)).await.unwrap();
        assert_eq!(late.seen(), lines);
        assert_eq!(late.state().runs.len() as u64, lines);
        // Its first decision, made after the whole ledger, sees every run.
        let seen = late.decide(|state, _| Some(reserve(format!("run{:04}", state.runs.len()), 0, None))).await;
        assert!(seen.unwrap().is_some());
        assert_eq!(late.seen(), lines + 1);
    });
}

#[test]
fn a_ledger_that_went_back_or_is_damaged_is_refused() {
    let pg = migrated("damage");
    warden::io::run(async {
        let env = warden::io::command_env();
        let instance = SharedLedger::open(&env, target(&pg)).await.unwrap();
        for n in 0..4 {
            instance.decide(move |_, now| Some(reserve(format!("run{n}"), now, None))).await.unwrap();
        }
        // Restored from an older copy: this instance has read past its end.
        pg.sql("DELETE FROM warden_ledger WHERE seq > 2");
        let refused = instance.decide(|_, _| None).await.unwrap_err();
        assert!(refused.to_string().contains("restored from an older copy"), "{refused}");
    });

    // A line over the limit, in a table that lost its CHECK, is refused where it enters. (Out
    // of the runtime: the refused exchange's connection closes when its runtime next turns.)
    pg.sql("ALTER TABLE warden_ledger DROP CONSTRAINT warden_ledger_line_check");
    pg.sql("INSERT INTO warden_ledger (seq, line) VALUES (3, convert_to(repeat('x', 70000), 'UTF8'))");
    warden::io::run(async {
        let env = warden::io::command_env();
        let late = SharedLedger::open(&env, target(&pg)).await.err().expect("an oversized line is refused");
        assert!(late.to_string().contains("line 3 is 70000 bytes, over the limit of 65536"), "{late}");
        pg.sql("DELETE FROM warden_ledger WHERE seq = 3");

        // A line whose sum no longer matches is named by its number.
        pg.sql("UPDATE warden_ledger SET line = convert_to(replace(convert_from(line, 'UTF8'), 'run1', 'runX'), 'UTF8') WHERE seq = 2");
        let damaged = SharedLedger::open(&env, target(&pg)).await.err().expect("a damaged line is refused");
        assert!(matches!(damaged, SharedError::Damaged { seq: 2, .. }), "{damaged}");
    });
}

/// An instance that pauses (a stall, SIGSTOP, a long GC-like freeze) while it holds the ledger's
/// lock, between reading the ledger and appending its decision, must not hold every other
/// instance's admissions: the database ends its idle transaction, the others go on, and its
/// decision, if it wakes, is refused rather than appended late.
#[test]
fn an_instance_paused_holding_the_ledger_lock_loses_it_and_the_others_go_on() {
    let pg = migrated("paused");
    let quick = PostgresTarget { statement_timeout_ms: 300, ..target(&pg) };
    let paused = std::thread::spawn(move || {
        warden::io::run(async move {
            let env = warden::io::command_env();
            let instance = SharedLedger::open(&env, quick).await.unwrap();
            instance
                .decide(|_, now| {
                    // Paused inside the transaction, the lock held: over three times its
                    // session's deadline (300 ms and a second's grace).
                    std::thread::sleep(std::time::Duration::from_millis(4_500));
                    Some(reserve("paused".into(), now, None))
                })
                .await
        })
    });
    // The other instance waits for the lock at most its own timeout, well within the pause.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let patient = PostgresTarget { statement_timeout_ms: 2_500, ..target(&pg) };
    warden::io::run(async {
        let env = warden::io::command_env();
        let other = SharedLedger::open(&env, patient).await.unwrap();
        let admitted = other.decide(|_, now| Some(reserve("other".into(), now, None))).await;
        assert!(admitted.unwrap().is_some());
    });
    paused.join().unwrap().expect_err("the paused instance's late decision is refused");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_ledger"), "1");
    assert_eq!(pg.sql("SELECT position('paused' in convert_from(line, 'UTF8')) FROM warden_ledger"), "0");
}

#[test]
fn a_schema_of_an_earlier_version_is_migrated_and_keeps_its_ledger() {
    let pg = migrated("upgrade");
    warden::io::run(async {
        let env = warden::io::command_env();
        let instance = SharedLedger::open(&env, target(&pg)).await.unwrap();
        instance.decide(|_, now| Some(reserve("kept".into(), now, None))).await.unwrap();
    });
    // As version 1 left it: the ledger, no instances, no records, no owners.
    pg.sql("DROP TABLE warden_instances; DROP TABLE warden_records; DROP TABLE warden_owners; UPDATE warden_schema SET version = 1");
    let (ok, printed) = warden(&["migrate"], manifest_dir().path(), Some(&pg.url));
    assert!(ok && printed.contains("migrated from version 1 to 5"), "{printed}");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_records"), "0");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_ledger"), "1");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_instances"), "0");
}

#[test]
fn a_lease_is_renewed_while_held_and_fenced_once_it_ends_or_is_taken() {
    let pg = migrated("leases");
    warden::io::run(async {
        let env = warden::io::command_env();
        let (db, target) = (&env.state_db, target(&pg));
        let first = db.register(&target, "desk-a", 60_000).await.unwrap();
        assert_eq!(first.epoch, 1);
        assert!(first.remaining_ms > 50_000 && first.remaining_ms <= 60_000, "{first:?}");
        assert_eq!(db.register(&target, "desk-b", 60_000).await.unwrap().epoch, 1);
        // Renewed to a lease that ends at once: ended by the database's clock a moment later.
        assert!(db.renew(&target, "desk-a", 1, 1).await.unwrap().is_some());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(db.expired(&target).await.unwrap(), vec![("desk-a".to_string(), 1)]);
        assert_eq!(db.renew(&target, "desk-a", 1, 60_000).await.unwrap(), None, "an ended lease is not renewed");
        // Registering again (a restart) takes the next epoch; the earlier one is fenced.
        let again = db.register(&target, "desk-a", 60_000).await.unwrap();
        assert_eq!(again.epoch, 2);
        assert_eq!(db.renew(&target, "desk-a", 1, 60_000).await.unwrap(), None, "the earlier epoch is fenced");
        assert!(db.renew(&target, "desk-a", 2, 60_000).await.unwrap().is_some());
        assert!(db.expired(&target).await.unwrap().is_empty());
        let refused = db.register(&target, &"x".repeat(129), 60_000).await.unwrap_err();
        assert!(refused.message.contains("instance name of 129 bytes"), "{refused:?}");
    });
}

/// Writes fenced by a lease (the simulated store's model holds the same): accepted while the
/// writer holds its lease at its epoch; once it ended, or a later registration took it, a
/// record write, a removal and a ledger append are each refused in their own transaction with
/// nothing written, saying so; the current epoch writes on.
#[test]
fn a_write_is_refused_once_its_lease_ended_or_a_later_start_took_it() {
    use warden::env::{Fence, RecordKind, RecordWrite};
    let pg = migrated("fenced");
    let journal = |seq: u64, line: &str| RecordWrite {
        run: "r1".into(),
        kind: RecordKind::Journal,
        seq,
        line: line.as_bytes().to_vec(),
        replace: false,
    };
    warden::io::run(async {
        let env = warden::io::command_env();
        let db = &env.state_db;
        let first = db.register(&target(&pg), "desk", 60_000).await.unwrap();
        let fenced =
            PostgresTarget { fence: Some(Fence { instance: "desk".into(), epoch: first.epoch }), ..target(&pg) };
        db.record_write(&fenced, journal(1, "header")).await.unwrap();
        // The lease ends at once by the database's clock: the next write is refused.
        assert!(db.renew(&target(&pg), "desk", first.epoch, 1).await.unwrap().is_some());
        std::thread::sleep(std::time::Duration::from_millis(50));
        let refused = db.record_write(&fenced, journal(2, "late")).await.unwrap_err();
        assert!(
            !refused.may_have_committed && refused.message.contains("no longer holds its lease at epoch 1"),
            "{refused:?}"
        );
        // A later start takes the next epoch: the earlier one stays fenced, on every write.
        let second = db.register(&target(&pg), "desk", 60_000).await.unwrap();
        assert!(db.record_remove(&fenced, "r1", RecordKind::Journal).await.unwrap_err().message.contains("epoch 1"));
        let decide: warden::env::Decide = Box::new(|_, now| now.map(|_| b"a line".to_vec()));
        assert!(db
            .ledger_exchange(&fenced, 0, warden::env::OwnerChange::Keep, decide)
            .await
            .unwrap_err()
            .message
            .contains("epoch 1"));
        assert_eq!(pg.sql("SELECT count(*) FROM warden_ledger"), "0");
        assert_eq!(pg.sql("SELECT string_agg(convert_from(line, 'UTF8'), ',') FROM warden_records"), "header");
        let current =
            PostgresTarget { fence: Some(Fence { instance: "desk".into(), epoch: second.epoch }), ..target(&pg) };
        db.record_write(&current, journal(2, "resumed")).await.unwrap();
        assert!(db.record_remove(&current, "r1", RecordKind::Journal).await.unwrap());
    });
}

/// A claim of an ownerless run is made only on the ledger as its claimer read it: with a line
/// after that (another instance's settle of the run, say) it is refused to be decided again, and
/// a run another instance owns is not taken (the sweep's seed 1069: a run reserved and settled
/// between a start's reads looked ownerless and open).
#[test]
fn a_claim_is_made_only_on_the_ledger_as_read() {
    use warden::env::Fence;
    let pg = migrated("claim");
    warden::io::run(async {
        let env = warden::io::command_env();
        let db = &env.state_db;
        let lease = db.register(&target(&pg), "desk", 60_000).await.unwrap();
        let fenced =
            PostgresTarget { fence: Some(Fence { instance: "desk".into(), epoch: lease.epoch }), ..target(&pg) };
        let decide: warden::env::Decide = Box::new(|_, now| now.map(|_| b"a line".to_vec()));
        db.ledger_exchange(&fenced, 0, warden::env::OwnerChange::Keep, decide).await.unwrap();
        assert_eq!(db.claim(&fenced, "r1", 0).await.unwrap(), None, "a line came after the one read");
        assert_eq!(pg.sql("SELECT count(*) FROM warden_owners"), "0");
        assert_eq!(db.claim(&fenced, "r1", 1).await.unwrap(), Some(true));
        let other = db.register(&target(&pg), "beside", 60_000).await.unwrap();
        let beside =
            PostgresTarget { fence: Some(Fence { instance: "beside".into(), epoch: other.epoch }), ..target(&pg) };
        assert_eq!(db.claim(&beside, "r1", 1).await.unwrap(), Some(false), "another instance owns it");
    });
}

/// A later start's registration waits for a write of the earlier epoch in flight (its fence
/// checked, its COMMIT not yet sent), so no write of an earlier epoch lands after a later start
/// registered. The write is held open by psql with the fence's own statement; a renewal is not
/// held off by it (the server's own writes would otherwise starve its renewals).
#[test]
fn a_registration_waits_for_a_fenced_write_in_flight_and_a_renewal_does_not() {
    let pg = migrated("fence_wait");
    let register =
        || warden::io::run(async { warden::io::command_env().state_db.register(&target(&pg), "desk", 60_000).await });
    assert_eq!(register().unwrap().epoch, 1);
    let holds = warden::io::state_db::HOLDS_LEASE.replace("$1", "'desk'").replace("$2", "1");
    let row_share = "SELECT count(*) FROM pg_locks l JOIN pg_class c ON l.relation = c.oid \
                     WHERE c.relname = 'warden_instances' AND l.mode = 'RowShareLock' AND l.granted";
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            pg.sql(&format!(
                "BEGIN; {holds}; SELECT pg_sleep(2); \
                 CREATE TABLE fenced_write AS SELECT clock_timestamp() AS committed_after; COMMIT;"
            ))
        });
        while pg.sql(row_share) != "1" {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let renewed =
            warden::io::run(async { warden::io::command_env().state_db.renew(&target(&pg), "desk", 1, 60_000).await });
        assert!(renewed.unwrap().is_some());
        assert_eq!(pg.sql("SELECT to_regclass('fenced_write') IS NULL"), "t", "the renewal did not wait for the write");
        assert_eq!(register().unwrap().epoch, 2);
        writer.join().unwrap();
    });
    assert_eq!(pg.sql("SELECT started_at > committed_after FROM warden_instances, fenced_write"), "t");
}

/// A run's records as the PostgreSQL store keeps them (the simulated store's model holds the
/// same contract, `sim/src/env/state_db.rs`): lines in order, a place taken refused (a second
/// writer of one journal line), a waiting record replaced in one transaction, kinds apart; a
/// record with a line missing, or a line over the limit in a table that lost its CHECK,
/// refused on reading with what is wrong.
#[test]
fn a_runs_records_are_kept_line_by_line_and_refused_when_damaged() {
    use warden::env::{RecordKind, RecordWrite};
    let pg = migrated("records");
    let write = |run: &str, kind, seq, line: &str, replace| RecordWrite {
        run: run.into(),
        kind,
        seq,
        line: line.as_bytes().to_vec(),
        replace,
    };
    warden::io::run(async {
        let env = warden::io::command_env();
        let (db, target) = (&env.state_db, target(&pg));
        assert_eq!(db.record_read(&target, "r1", RecordKind::Journal).await.unwrap(), None);
        db.record_write(&target, write("r1", RecordKind::Inputs, 1, "inputs", false)).await.unwrap();
        for (seq, line) in [(1, "header"), (2, "begin"), (3, "done")] {
            db.record_write(&target, write("r1", RecordKind::Journal, seq, line, false)).await.unwrap();
        }
        let taken = db.record_write(&target, write("r1", RecordKind::Journal, 3, "again", false)).await.unwrap_err();
        assert!(taken.message.contains("line 3 of run r1's journal is already written"), "{taken:?}");
        assert!(!taken.may_have_committed);
        let journal = db.record_read(&target, "r1", RecordKind::Journal).await.unwrap().unwrap();
        assert_eq!(journal, vec![b"header".to_vec(), b"begin".to_vec(), b"done".to_vec()]);
        let inputs = db.record_read(&target, "r1", RecordKind::Inputs).await.unwrap();
        assert_eq!(inputs, Some(vec![b"inputs".to_vec()]), "kinds are apart");
        db.record_write(&target, write("r1", RecordKind::Waiting, 1, "first stop", false)).await.unwrap();
        db.record_write(&target, write("r1", RecordKind::Waiting, 1, "second stop", true)).await.unwrap();
        let waiting = db.record_read(&target, "r1", RecordKind::Waiting).await.unwrap();
        assert_eq!(waiting, Some(vec![b"second stop".to_vec()]));
        assert_eq!(db.record_runs(&target, RecordKind::Waiting, "").await.unwrap(), vec!["r1".to_string()]);
        assert!(db.record_runs(&target, RecordKind::Waiting, "r1").await.unwrap().is_empty());
        assert!(db.record_remove(&target, "r1", RecordKind::Waiting).await.unwrap());
        assert!(!db.record_remove(&target, "r1", RecordKind::Waiting).await.unwrap());
        assert_eq!(db.record_read(&target, "r1", RecordKind::Waiting).await.unwrap(), None);

        let long = "x".repeat(warden::limits::RECORD_LINE_BYTES_MAX + 1);
        let refused = db.record_write(&target, write("r2", RecordKind::Journal, 1, &long, false)).await.unwrap_err();
        assert!(refused.message.contains("over 8388608"), "{}", refused.message);
        let refused = db.record_write(&target, write(&"r".repeat(65), RecordKind::Inputs, 1, "i", false)).await;
        assert!(refused.unwrap_err().message.contains("run id of 65 bytes"));
    });
    // A line gone from the middle (damage, or a hand's DELETE): the record is refused.
    pg.sql("DELETE FROM warden_records WHERE run = 'r1' AND kind = 'journal' AND seq = 2");
    // A table that lost its CHECK holds a line over the limit: refused too.
    pg.sql("ALTER TABLE warden_records DROP CONSTRAINT warden_records_line_check");
    pg.sql("INSERT INTO warden_records VALUES ('r3', 'journal', 1, convert_to(repeat('y', 8388609), 'UTF8'))");
    warden::io::run(async {
        let env = warden::io::command_env();
        let (db, target) = (&env.state_db, target(&pg));
        let gap = db.record_read(&target, "r1", RecordKind::Journal).await.unwrap_err();
        assert!(gap.message.contains("run r1's journal lacks line 2"), "{}", gap.message);
        let over = db.record_read(&target, "r3", RecordKind::Journal).await.unwrap_err();
        assert!(over.message.contains("line 1 is 8388609 bytes"), "{}", over.message);
    });
}

/// One instance serves a PostgreSQL store until leases are built: a second `warden mcp` on
/// the same store (from another folder: the journals' own lock is not what stops it) is
/// refused, saying why and what to do; once the first is killed -9, the database gives its
/// lock up with its connection, and the second starts and finds the first's runs.
/// Two stdio servers on one manifest keep their state in one store and both serve (issue 28
/// item 5): each takes a slot of its own and registers as its instance, a call to either is
/// recorded once, and each run's owner is its admitting instance until it settles. A killed
/// server's slot is given up: the next start on its folder takes that slot again, at the next
/// epoch, once the killed epoch's lease has ended.
#[test]
fn two_servers_on_one_manifest_both_serve_and_a_killed_ones_slot_is_taken_again() {
    use common::{Era, Wire};
    use serde_json::json;
    let pg = migrated("two_on_one");
    let call = |text: &str| json!({"name": "echo", "arguments": {"text": text}});
    let mut first = Wire::start_dir(manifest_dir_leased(Some("3s")), &[(URL_ENV, &pg.url)]);
    first.initialize();
    let answer = first.request(Era::Legacy, json!(1), "tools/call", call("to the first"));
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let mut second = first.start_beside(&[(URL_ENV, &pg.url)]);
    second.initialize();
    let answer = second.request(Era::Legacy, json!(1), "tools/call", call("to the second"));
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let answer = first.request(Era::Legacy, json!(2), "tools/call", call("to the first again"));
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_ledger"), "6", "three reserves and three settles");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_owners"), "0", "no run is open");
    assert_eq!(
        pg.sql("SELECT string_agg(id || ':' || epoch, ',' ORDER BY id) FROM warden_instances"),
        "instance-1:1,instance-2:1"
    );
    assert!(first.stderr().contains("registered as instance `instance-1`"), "{}", first.stderr());
    assert!(second.stderr().contains("registered as instance `instance-2`"), "{}", second.stderr());
    assert!(!second.stderr().contains(&pg.password()), "{}", second.stderr());

    assert!(first.kill_now());
    let mut third = first.start_beside(&[(URL_ENV, &pg.url)]);
    third.initialize();
    let answer = third.request(Era::Legacy, json!(1), "tools/call", call("after the first died"));
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    assert!(third.stderr().contains("registered as instance `instance-1` with lease epoch 2"), "{}", third.stderr());
    let answer = second.request(Era::Legacy, json!(2), "tools/call", call("the second goes on"));
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_ledger"), "10");
}

/// A server paused past its lease (SIGSTOP for longer than `server.store.postgres.lease`)
/// writes nothing more once it wakes: the call it was sent while paused is not recorded, and
/// it stops saying its lease ended; a start takes the next epoch and serves.
#[test]
fn a_server_paused_past_its_lease_writes_nothing_more_and_stops() {
    use common::{Era, Wire};
    use serde_json::json;
    let pg = migrated("lease_paused");
    let mut paused = Wire::start_dir(manifest_dir_leased(Some("3s")), &[(URL_ENV, &pg.url)]);
    paused.initialize();
    let call = |text: &str| json!({"name": "echo", "arguments": {"text": text}});
    let answer = paused.request(Era::Legacy, json!(1), "tools/call", call("before the pause"));
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_ledger"), "2", "a reserve and a settle");
    let pid = paused.pid().to_string();
    let signal = |name: &str| {
        let sent = Command::new("kill").args([name, &pid]).status().unwrap();
        assert!(sent.success(), "kill {name}");
    };
    signal("-STOP");
    paused.send_request(Era::Legacy, json!(2), "tools/call", call("sent while paused"));
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert_eq!(
        pg.sql("SELECT epoch::text || ' ' || (lease_until < clock_timestamp())::text FROM warden_instances"),
        "1 true"
    );
    signal("-CONT");
    let status = paused.wait_exit(std::time::Duration::from_secs(30));
    assert!(!status.success());
    let said = paused.stderr();
    assert!(said.contains("no longer holds its lease at epoch 1"), "{said}");
    assert!(!said.contains(&pg.password()), "{said}");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_ledger"), "2", "the call sent while paused was not recorded");

    let mut next = Wire::start_dir(manifest_dir_leased(Some("3s")), &[(URL_ENV, &pg.url)]);
    next.initialize();
    let answer = next.request(Era::Legacy, json!(1), "tools/call", call("after the pause"));
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    assert_eq!(pg.sql("SELECT epoch FROM warden_instances"), "2");
    assert!(next.stderr().contains("with lease epoch 2 (3000 ms, renewed every 1000 ms)"), "{}", next.stderr());
}

/// A start lists the runs with kept arguments and with waiting records, a page at a time
/// (`record_runs`). The store keeps every journal line ever written (no retention on it yet),
/// so the listing must reach the few rows of its kind without reading the journals' many:
/// the plan the database runs, measured, removes no row by a filter and scans no table.
#[test]
fn listing_the_runs_with_a_kind_of_record_reads_no_row_of_another_kind() {
    let pg = migrated("record_runs_plan");
    pg.sql(
        "INSERT INTO warden_records (run, kind, seq, line) \
         SELECT 'run' || (n / 10), 'journal', n % 10 + 1, '\\x00' FROM generate_series(0, 49999) n; \
         INSERT INTO warden_records VALUES ('run42', 'inputs', 1, '\\x00'), ('run7', 'waiting', 1, '\\x00'); \
         ANALYZE warden_records",
    );
    let plan = pg.sql(&format!(
        "PREPARE listing (text, text, bigint) AS {}; EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE listing('inputs', '', 256)",
        warden::io::state_db::RECORD_RUNS
    ));
    assert!(plan.contains("\"Actual Rows\": 1"), "{plan}");
    assert!(!plan.contains("Seq Scan"), "the table is scanned: {plan}");
    assert!(!plan.contains("Rows Removed by Filter"), "rows of other kinds are read and dropped: {plan}");
}

/// Issue 46 item 3 on the PostgreSQL store: `warden runs cancel` finds the instance that owns
/// a run waiting for its client's input and hands it the word through that instance's admin
/// channel: the run settles cancelled, no instance owns it any more, and who cancelled it is
/// kept in its journal on the store. Then `warden once release` forgets the key it holds, and
/// the same call runs again.
#[test]
fn on_the_store_an_operator_cancels_a_run_waiting_for_input() {
    use common::{Era, Wire};
    use serde_json::json;
    let pg = migrated("cancel_on_store");
    let dir = common::private_copy(&common::fixture("ask"));
    let path = dir.path().join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    manifest["server"]["store"] = json!({"postgres": {"url": {"env": URL_ENV}}});
    std::fs::write(&path, manifest.to_string()).unwrap();
    let mut wire = Wire::start_dir(dir, &[(URL_ENV, &pg.url)]);
    let call = json!({"name": "close_ticket", "arguments": {"ticket_id": 1, "note": "fixed"},
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    let asked = wire.request(Era::Modern, json!(1), "tools/call", call);
    assert_eq!(asked["result"]["resultType"], json!("input_required"), "{asked}");
    let run = pg.sql("SELECT run FROM warden_owners WHERE instance = 'instance-1'");
    assert_eq!(run.len(), 32, "the run is owned: {run}");
    let manifest = wire.dir.path().join("manifest.json");
    let output = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["runs", "cancel", manifest.to_str().unwrap(), &run[..8], "--note", "withdrawn"])
        .env(URL_ENV, &pg.url)
        .env("USER", "carol")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && said.contains("cancelled by carol"), "{said}");
    assert_eq!(pg.sql("SELECT count(*) FROM warden_owners"), "0", "no instance owns it any more");
    let settled = "SELECT count(*) FROM warden_ledger WHERE position('\"outcome\":\"cancelled\"' in convert_from(line, 'UTF8')) > 0";
    assert_eq!(pg.sql(settled), "1", "settled cancelled");
    assert!(!said.contains(&pg.password()), "{said}");

    // The cancelled run holds its ticket's `once` key; released (by any instance serving the
    // store: the run has no owner now), a call for that ticket runs again.
    let output = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["once", "release", manifest.to_str().unwrap(), "close_ticket", &run[..8]])
        .env(URL_ENV, &pg.url)
        .env("USER", "carol")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && said.contains("key is released"), "{said}");
    let forgot =
        "SELECT count(*) FROM warden_ledger WHERE position('\"event\":\"forget\"' in convert_from(line, 'UTF8')) > 0";
    assert_eq!(pg.sql(forgot), "1", "the key forgotten as a ledger event");
    let call = json!({"name": "close_ticket", "arguments": {"ticket_id": 1, "note": "again"},
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    let asked = wire.request(Era::Modern, json!(2), "tools/call", call);
    assert_eq!(asked["result"]["resultType"], json!("input_required"), "a new run asks again: {asked}");
    wire.assert_serving(9);
}
