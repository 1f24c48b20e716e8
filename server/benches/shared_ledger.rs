//! Benchmark: admissions through the ledger several instances share in PostgreSQL (issue 28,
//! `store/shared.rs`), with one, two and three instances deciding at once, each with some
//! decisions in flight, every one under the ledger's lock, as admission makes them.
//!
//!   source scripts/postgres.sh && postgres_start     # exports WARDEN_TEST_PG_URL
//!   cargo bench -p warden --bench shared_ledger
//!   BENCH_ADMISSIONS=2000 cargo bench -p warden --bench shared_ledger
//!
//! Prints admissions per second and the median and p99 time of one decision. Each decision
//! opens its own connection (the store's rule today, as `db.postgres` does), so the figures
//! include a connection's set-up and its password exchange.

use std::process::Command;
use std::rc::Rc;
use std::time::Instant;

use futures_util::future::join_all;
use warden::env::PostgresTarget;
use warden::store::ledger::Event;
use warden::store::shared::SharedLedger;

/// Decisions each instance keeps in flight.
const IN_FLIGHT: usize = 8;

fn psql(url: &str, sql: &str) {
    let status = Command::new("psql").args(["-q", "-v", "ON_ERROR_STOP=1", url, "-c", sql]).status();
    assert!(status.is_ok_and(|s| s.success()), "psql failed: {sql}");
}

/// A fresh database on the cluster, migrated.
fn database(cluster: &str, name: &str) -> PostgresTarget {
    psql(cluster, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    psql(cluster, &format!("CREATE DATABASE {name}"));
    let (root, _) = cluster.rsplit_once('/').expect("the cluster URL names a database");
    let target = PostgresTarget {
        url: format!("{root}/{name}"),
        connect_timeout_ms: 10_000,
        statement_timeout_ms: 30_000,
        fence: None,
    };
    warden::io::run(async {
        let env = warden::io::command_env();
        env.state_db.migrate(&target).await.expect("migrating");
    });
    target
}

fn reserve(run: String, at_ms: u64) -> Event {
    Event::Reserve {
        run,
        tool: "bench".into(),
        at_ms,
        calls: 1,
        money: Vec::new(),
        once: None,
        principal: None,
        tokens: 0,
    }
}

/// `admissions` decisions over `instances` instances; the time of each, in ms.
fn measure(target: &PostgresTarget, instances: usize, admissions: usize) -> (f64, Vec<f64>) {
    warden::io::run(async {
        let env = warden::io::command_env();
        let mut ledgers = Vec::new();
        for _ in 0..instances {
            ledgers.push(Rc::new(SharedLedger::open(&env, target.clone()).await.expect("opening")));
        }
        let started = Instant::now();
        let per_lane = admissions / (instances * IN_FLIGHT);
        let lanes = (0..instances * IN_FLIGHT).map(|lane| {
            let ledger = Rc::clone(&ledgers[lane % instances]);
            async move {
                let mut times = Vec::new();
                for n in 0..per_lane {
                    let run = format!("{lane:03}-{n:06}");
                    let began = Instant::now();
                    let appended = ledger.decide(move |_, now| Some(reserve(run, now))).await.expect("deciding");
                    assert!(appended.is_some());
                    times.push(began.elapsed().as_secs_f64() * 1000.0);
                }
                times
            }
        });
        let mut times: Vec<f64> = join_all(lanes).await.into_iter().flatten().collect();
        let elapsed = started.elapsed().as_secs_f64();
        times.sort_by(|a, b| a.total_cmp(b));
        (times.len() as f64 / elapsed, times)
    })
}

fn main() {
    let Ok(cluster) = std::env::var("WARDEN_TEST_PG_URL") else {
        eprintln!("WARDEN_TEST_PG_URL is not set: `source scripts/postgres.sh && postgres_start` first");
        std::process::exit(2);
    };
    let admissions: usize = std::env::var("BENCH_ADMISSIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(600);
    println!("shared ledger admissions, {IN_FLIGHT} in flight per instance, {admissions} per figure");
    println!("| instances | admissions/s | median ms | p99 ms |");
    println!("|---|---|---|---|");
    for instances in 1..=3 {
        let target = database(&cluster, &format!("warden_bench_shared_{instances}"));
        let (rate, times) = measure(&target, instances, admissions);
        let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
        println!("| {instances} | {rate:.0} | {:.1} | {:.1} |", at(0.5), at(0.99));
    }
}
