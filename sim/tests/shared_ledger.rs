//! The ledger several instances share (issue 28, `store/shared.rs`) attacked in the simulator:
//! three instances over one simulated PostgreSQL, many decisions of each in flight at once,
//! interleaved by the seeded scheduler (the simulated store lets other tasks run before its
//! caller resumes, as a connection does), COMMITs whose answer is lost and a database that
//! goes away for a while. Whatever the interleaving, a quota holds across the instances, a
//! `once` key admits one run, every line is folded exactly once by every instance, and what an
//! instance folds is what the database holds.

use std::cell::RefCell;
use std::rc::Rc;

use warden::env::{Env, PostgresTarget};
use warden::store::ledger::{Counting, Event, OnceLookup, OnceRecord, State};
use warden::store::record;
use warden::store::shared::{SharedError, SharedLedger};
use warden_sim::env::world::World;

const INSTANCES: usize = 3;
const DECISIONS_PER_INSTANCE: usize = 12;
const QUOTA: u64 = 20;

fn target() -> PostgresTarget {
    PostgresTarget {
        url: "postgres://simulated".into(),
        connect_timeout_ms: 1000,
        statement_timeout_ms: 1000,
        fence: None,
    }
}

/// What admission decides: a reserve if one more call fits the quota and the `once` key (if
/// any) is free.
fn admit(state: &State, now: u64, run: String, once: Option<&str>) -> Option<Event> {
    if let Some(key) = once {
        if state.once_lookup(key, u64::MAX / 4, now) != OnceLookup::None {
            return None;
        }
    }
    state.quota_admits("refund", 3_600_000, Some(QUOTA), None, &[], (None, 0), now, Counting::AllRuns).ok()?;
    Some(Event::Reserve {
        run,
        tool: "refund".into(),
        at_ms: now,
        calls: 1,
        money: Vec::new(),
        once: once.map(|key| OnceRecord { key: key.into(), arguments: "same".into() }),
        principal: None,
        tokens: 0,
    })
}

/// How the decisions of one seed went.
#[derive(Default)]
struct Outcome {
    appended: usize,
    in_doubt: usize,
    refused_by_database: usize,
}

/// Three instances making their decisions at once, with the database's faults; then each
/// instance catches up, and its state is checked against the database's lines.
fn sweep_one(seed: u64, once: Option<&'static str>) -> Outcome {
    let world = World::new(seed);
    let db = Rc::clone(&world.shared_db);
    db.set_schema(warden::env::STATE_SCHEMA_VERSION);
    let outcome = Rc::new(RefCell::new(Outcome::default()));
    let told = Rc::clone(&outcome);
    let finished = world.start_command(move |env: Env| {
        Box::pin(async move {
            let mut instances = Vec::new();
            for _ in 0..INSTANCES {
                instances.push(Rc::new(SharedLedger::open(&env, target()).await.map_err(|e| e.to_string())?));
            }
            let left = Rc::new(std::cell::Cell::new(INSTANCES * DECISIONS_PER_INSTANCE));
            for n in 0..INSTANCES * DECISIONS_PER_INSTANCE {
                let (instance, left, told, db) =
                    (Rc::clone(&instances[n % INSTANCES]), Rc::clone(&left), Rc::clone(&told), Rc::clone(&db));
                env.spawn.spawn(Box::pin(async move {
                    // Some COMMITs' answers are lost, and the database goes away for a while,
                    // in whatever order the scheduler runs the decisions.
                    match n % 7 {
                        3 => db.lose_commit_answers.set(db.lose_commit_answers.get() + 1),
                        5 => db.unreachable.set(true),
                        6 => db.unreachable.set(false),
                        _ => {}
                    }
                    let run = format!("run{n:03}");
                    match instance.decide(move |state, now| admit(state, now, run, once)).await {
                        Ok(Some(_)) => told.borrow_mut().appended += 1,
                        Ok(None) => {}
                        Err(SharedError::Database(failure)) if failure.may_have_committed => {
                            told.borrow_mut().in_doubt += 1
                        }
                        Err(SharedError::Database(_)) => told.borrow_mut().refused_by_database += 1,
                        Err(damaged) => panic!("seed {seed}: {damaged}"),
                    }
                    left.set(left.get() - 1);
                }));
            }
            while left.get() > 0 {
                env.clock.sleep(1).await;
            }
            db.unreachable.set(false);
            // Every instance, caught up, folds exactly the database's lines.
            let mut expected = State::default();
            for line in db.ledger() {
                expected.apply(&record::decode::<Event>(&line).expect("lines read back")).expect("lines fold");
            }
            for instance in &instances {
                instance.decide(|_, _| None).await.map_err(|e| e.to_string())?;
                assert_eq!(*instance.state(), expected, "seed {seed}: an instance's fold differs from the database");
                assert_eq!(instance.seen() as usize, db.ledger().len());
            }
            Ok(String::new())
        })
    });
    finished.unwrap_or_else(|problem| panic!("seed {seed}: {problem}"));
    Rc::try_unwrap(outcome).ok().expect("the command ended").into_inner()
}

#[test]
fn a_quota_holds_across_three_instances_whatever_the_interleaving_and_the_faults() {
    let (mut in_doubt, mut refused, mut filled) = (0, 0, 0);
    for seed in 0..40 {
        let world_lines = {
            let outcome = sweep_one(seed, None);
            in_doubt += outcome.in_doubt;
            refused += outcome.refused_by_database;
            outcome.appended + outcome.in_doubt
        };
        // The quota counts every line, those whose COMMIT's answer was lost included.
        assert!(world_lines as u64 <= QUOTA, "seed {seed}: {world_lines} admitted over a quota of {QUOTA}");
        filled += usize::from(world_lines as u64 == QUOTA);
    }
    assert!(in_doubt > 0 && refused > 0, "the faults fired: {in_doubt} in doubt, {refused} refused");
    assert!(filled > 0, "some seeds fill the quota, and the decisions after are refused by it");
}

#[test]
fn a_once_key_admits_one_run_across_three_instances() {
    for seed in 0..40 {
        let outcome = sweep_one(seed, Some("the-same-refund"));
        assert!(outcome.appended + outcome.in_doubt <= 1, "seed {seed}: the key admitted more than one run");
    }
}
