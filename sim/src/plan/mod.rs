//! Fault plans: from a seed (swarm testing: each fault kind switched on for some seeds only,
//! at its own rate, drawn from a table) or from a scenario file, and arming a planned fault
//! in the world before the call it precedes.

pub mod coverage;
pub mod fired;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use warden::env::Point;
use warden_faults::{CrashPoint, DamagedFile, Fault, NetworkFault, Planned, Scenario};

use crate::env::services::NetFault;
use crate::env::world::{CrashAt, World};
use crate::report::Report;

/// The most calls a generated workload holds.
pub const CALLS_MAX: u32 = 40;

/// One kind of fault a seed's plan can hold: how to draw one, and how much rarer than the
/// others it is (1 in `rarity` of its draws is kept).
struct FaultKind {
    draw: fn(&mut ChaCha8Rng) -> Fault,
    rarity: u64,
}

fn pick(rng: &mut ChaCha8Rng, below: u64) -> u64 {
    rng.next_u64() % below
}

/// How much time a `time passes` fault lets pass, from a draw below an hour: mostly that, and
/// one time in eight a thousand times as long (up to about 42 days), so that worlds cross
/// every `keep`, `once.keep` and quota window and retention and compaction run. Derived from
/// the one draw, so no other draw of a seed moves.
fn time_passing(drawn_ms: u64) -> u64 {
    match drawn_ms % 8 {
        0 => drawn_ms * 1000,
        _ => drawn_ms,
    }
}

/// Every fault kind of the swarm, in the order a seed's plan draws them.
const FAULT_KINDS: &[FaultKind] = &[
    FaultKind {
        draw: |r| Fault::CrashAtPoint { point: CrashPoint::ALL[pick(r, CrashPoint::ALL.len() as u64) as usize] },
        rarity: 1,
    },
    FaultKind { draw: |r| Fault::CrashAtDiskOperation { after: 1 + pick(r, 40) }, rarity: 1 },
    FaultKind {
        draw: |r| Fault::Network {
            url: ["notes.sim", "refunds", "payment_intents", "pg.sim"][pick(r, 4) as usize].into(),
            kind: [NetworkFault::Refuse, NetworkFault::LoseResponse, NetworkFault::CrashAfterActing]
                [pick(r, 3) as usize],
        },
        rarity: 1,
    },
    // A service slower than some timeouts (1 s in generated worlds) and deadlines (1 s, 2 s).
    FaultKind {
        draw: |r| Fault::Network {
            url: ["notes.sim", "refunds", "payment_intents", "echo.sim", "pg.sim"][pick(r, 5) as usize].into(),
            kind: NetworkFault::Slow { ms: 100 + pick(r, 2500) },
        },
        rarity: 1,
    },
    // Damage ends a seed: keep it rare.
    FaultKind { draw: |r| Fault::RotByte { file: DamagedFile::ALL[pick(r, 2) as usize], at: r.next_u64() }, rarity: 8 },
    FaultKind { draw: |r| Fault::FlipLedgerRead { at: r.next_u64() }, rarity: 2 },
    FaultKind { draw: |r| Fault::MisdirectLedgerAppend { at: r.next_u64() }, rarity: 8 },
    FaultKind { draw: |r| Fault::StepClock { ms: pick(r, 7_200_000) as i64 - 3_600_000 }, rarity: 1 },
    FaultKind { draw: |r| Fault::AdvanceTime { ms: time_passing(pick(r, 3_600_000)) }, rarity: 1 },
    FaultKind { draw: |_| Fault::MalformedLine, rarity: 1 },
    FaultKind { draw: |_| Fault::Cancel, rarity: 1 },
    FaultKind { draw: |_| Fault::ClientGone, rarity: 2 },
    FaultKind { draw: |_| Fault::FailFsync, rarity: 1 },
    FaultKind { draw: |_| Fault::FillDisk, rarity: 1 },
    FaultKind { draw: |r| Fault::DriftClock { ppm: pick(r, 200_001) as i64 - 100_000 }, rarity: 1 },
    FaultKind { draw: |r| Fault::NotifyHangs { times: 1 + pick(r, 2) as u32 }, rarity: 1 },
    // A 4 MiB line costs real time to build and scan: keep it rare.
    FaultKind { draw: |_| Fault::OversizedLine, rarity: 10 },
    FaultKind { draw: |r| Fault::NotifyFails { times: 1 + pick(r, 2) as u32 }, rarity: 1 },
    // Forward mostly: a step back cannot expire a deadline.
    FaultKind { draw: |r| Fault::StepClockDuringRun { ms: pick(r, 7_200_000) as i64 - 600_000 }, rarity: 2 },
    FaultKind { draw: |_| Fault::PoisonRun, rarity: 4 },
    // Slow operations and stalls, all within the 60 s an instance may run ahead while quiet.
    FaultKind {
        draw: |r| {
            let ms = [5, 50, 500, 5_000, 20_000][pick(r, 5) as usize];
            Fault::SlowDisk { ms, ops: 1 + pick(r, (40_000 / ms).min(20)) }
        },
        rarity: 1,
    },
    FaultKind {
        draw: |r| Fault::SlowReader { ms: [1, 100, 1_000, 5_000][pick(r, 4) as usize], lines: 1 + pick(r, 8) as u32 },
        rarity: 1,
    },
    // More calls at once than the smallest servers take in progress (4 x 1 + 16).
    FaultKind { draw: |r| Fault::Flood { calls: 10 + pick(r, 60) as u32 }, rarity: 1 },
    // An operator's stop, at some moment of the call (a drain, then a start).
    FaultKind { draw: |r| Fault::Shutdown { after_ms: [0, 10, 100, 1_000, 5_000][pick(r, 5) as usize] }, rarity: 2 },
    // Calls the server must refuse before running anything (last, so the kinds before it are
    // switched on for the same seeds as before it was added).
    FaultKind { draw: |_| Fault::RefusableCalls, rarity: 1 },
    FaultKind { draw: |r| Fault::StreamCut { after: pick(r, 4) as u32, stalls: pick(r, 2) == 1 }, rarity: 1 },
    // The PostgreSQL store failing under a world on the store (none fires in a world on files).
    FaultKind { draw: |r| Fault::StoreRefuses { times: 1 + pick(r, 3) as u32 }, rarity: 1 },
    FaultKind { draw: |_| Fault::StoreLosesCommitAnswer, rarity: 1 },
    FaultKind { draw: |_| Fault::StoreLosesCommit, rarity: 1 },
    FaultKind { draw: |_| Fault::StoreRestarts, rarity: 1 },
];

/// The fault plan a seed implies: each fault kind is switched on for some seeds only
/// (swarm testing), at its own rate.
pub fn plan_for_seed(seed: u64) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_fa17);
    let mut chance = |per_mille: u64| rng.next_u64() % 1000 < per_mille;
    let calls = 8 + (seed % (CALLS_MAX as u64 - 8)) as u32;
    let enabled: Vec<bool> = FAULT_KINDS.iter().map(|_| chance(500)).collect();
    let rates: Vec<u64> = (0..FAULT_KINDS.len()).map(|k| 30 + (seed.rotate_left(k as u32 * 7) % 250)).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xfa17_5eed);
    let mut faults = Vec::new();
    for call in 0..calls {
        for (index, kind) in FAULT_KINDS.iter().enumerate() {
            if !enabled[index] || rng.next_u64() % 1000 >= rates[index] {
                continue;
            }
            if kind.rarity > 1 && rng.next_u64() % kind.rarity != 0 {
                continue;
            }
            faults.push(Planned { before_call: call, fault: (kind.draw)(&mut rng) });
        }
    }
    let mut scenario = Scenario::passing(format!("seed {seed}"), seed, calls, faults);
    // The fixed world stays one world among many.
    if seed % FIXED_WORLD_EVERY != 0 {
        scenario.world = Some(crate::workload::generate::world_for_seed(seed));
    }
    scenario
}

/// A seed's scenario in an operator's own world (`explore --manifest`: the seed draws the
/// calls and faults, not the world), or else in the world the seed draws.
pub fn plan_in(seed: u64, own: Option<&warden_faults::WorldFile>) -> Scenario {
    let mut scenario = plan_for_seed(seed);
    if let Some(world) = own {
        let mut world = world.clone();
        // A quarter of the seeds serve the operator's tools over Streamable HTTP (behind a
        // bearer token), as a remote client meets them: live streams, sessions, cut streams.
        if own_world_over_http(seed) {
            world.transport = warden_faults::Transport::Http;
        }
        // Half the seeds take the operator's services to ignore idempotency keys: what a
        // manifest relies on a service to do is found by trying it both ways.
        if let Some(own) = world.own.as_mut() {
            own.services_ignore_keys = own_services_ignore_keys(seed);
        }
        aim_network_faults_at(&mut scenario.faults, &own_hosts(&world.manifest));
        scenario.world = Some(world);
    }
    scenario
}

/// The hosts of generated worlds' services, which an operator's world does not have.
const GENERATED_HOSTS: [&str; 3] = ["notes.sim", "echo.sim", "pg.sim"];

/// Network faults drawn for a generated world's services, aimed instead at the services an
/// operator's manifest reaches (in turn, by the fault's position): a lost answer, a refusal or
/// a slow answer from the operator's own webhook is what `explore --manifest` is for.
fn aim_network_faults_at(faults: &mut [Planned], hosts: &[String]) {
    if hosts.is_empty() {
        return;
    }
    for (position, planned) in faults.iter_mut().enumerate() {
        if let Fault::Network { url, .. } = &mut planned.fault {
            if GENERATED_HOSTS.contains(&url.as_str()) {
                *url = hosts[position % hosts.len()].clone();
            }
        }
    }
}

/// The host of each URL pattern an operator's HTTP grants allow (the part after a wildcard
/// in a host like `*.example.com`), in the manifest's order, each once.
fn own_hosts(manifest: &str) -> Vec<String> {
    let Ok(manifest) = serde_json::from_str::<serde_json::Value>(manifest) else { return Vec::new() };
    let mut hosts: Vec<String> = Vec::new();
    let tools = manifest["tools"].as_array().into_iter().flatten();
    let grants = tools.flat_map(|tool| tool["grants"].as_object().into_iter().flat_map(|grants| grants.values()));
    for grant in grants.filter(|grant| grant["cap"].as_str().is_some_and(|cap| cap.starts_with("net.http."))) {
        for pattern in grant["only"].as_array().into_iter().flatten().filter_map(|pattern| pattern.as_str()) {
            let after_scheme = pattern.split_once("://").map_or(pattern, |(_, rest)| rest);
            let host = after_scheme.split('/').next().unwrap_or_default();
            let host = host.rsplit('*').next().unwrap_or_default();
            if !host.is_empty() && !hosts.iter().any(|known| known == host) {
                hosts.push(host.to_string());
            }
        }
    }
    hosts
}

/// Whether an operator's world is served over Streamable HTTP at `seed`: drawn apart from
/// the seed's other draws, so the calls and faults stay as they were.
fn own_world_over_http(seed: u64) -> bool {
    (seed ^ 0x6f77_6e48).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 62 == 0
}

/// Whether an operator's services ignore idempotency keys at `seed`: drawn apart from the
/// seed's other draws, as the transport is.
fn own_services_ignore_keys(seed: u64) -> bool {
    (seed ^ 0x6b65_7973).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 63 == 1
}

/// One seed in this many simulates the fixed world (`fixture.rs`); the others a generated one.
pub const FIXED_WORLD_EVERY: u64 = 8;

/// The server's point for a scenario's crash point.
pub fn server_point(point: CrashPoint) -> Point {
    match point {
        CrashPoint::Reserved => Point::Reserved,
        CrashPoint::InputsKept => Point::InputsKept,
        CrashPoint::JournalCreated => Point::JournalCreated,
        CrashPoint::RunRecorded => Point::RunRecorded,
        CrashPoint::WaitingRecorded => Point::WaitingRecorded,
        CrashPoint::Settled => Point::Settled,
        CrashPoint::Answered => Point::Answered,
        CrashPoint::ActionBegun => Point::ActionBegun,
        CrashPoint::Resumed => Point::Resumed,
    }
}

/// The simulated services' form of a network fault.
pub fn net_fault(kind: NetworkFault) -> NetFault {
    match kind {
        NetworkFault::Refuse => NetFault::Refuse,
        NetworkFault::LoseResponse => NetFault::LoseResponse,
        NetworkFault::CrashAfterActing => NetFault::CrashAfterActing,
        NetworkFault::Slow { ms } => NetFault::Slow(ms),
    }
}

/// Arms one planned fault for the coming call. Returns lines the client sends first.
pub fn arm(world: &World, fault: &Fault, report: &mut Report) -> bool {
    *report.faults.entry(fault.kind()).or_insert(0) += 1;
    report.events.push((world.clock.now(), "faults".into(), fault.to_string()));
    let state = crate::plan::coverage::window(fault.kind(), crate::plan::coverage::in_flight(world));
    *report.fault_states.entry(state).or_insert(0) += 1;
    match fault {
        Fault::CrashAtPoint { point } => {
            let point = server_point(*point);
            let seen = world.probes.seen.borrow().iter().filter(|(p, _)| *p == point).count() as u32;
            world.probes.crash_at.set(Some(CrashAt { point, nth: seen + 1 }));
        }
        Fault::CrashAtDiskOperation { after } => {
            world.disk.crash_at_operation.set(Some(world.disk.operations.get() + after))
        }
        Fault::FailFsync => world.disk.fail_next_fsync.set(true),
        Fault::FillDisk => world.disk.faults.borrow_mut().capacity_bytes = Some(world.disk.used()),
        Fault::StepClock { ms } => world.clock.step_wall(*ms),
        Fault::StepClockDuringRun { ms } => world.sandbox.step_wall_ms.set(*ms),
        Fault::PoisonRun => world.sandbox.poison_next.set(true),
        Fault::AdvanceTime { ms } => world.clock.advance(*ms),
        Fault::SlowDisk { ms, ops } => world.disk.slow.set((*ms, *ops)),
        Fault::SlowReader { ms, lines } => world.slow_reader.armed.set((*ms, *lines)),
        Fault::Network { url, kind } => world.services.fault_next(url, net_fault(*kind)),
        Fault::NotifyFails { times } => world.services.notify_failures.set(*times),
        Fault::NotifyHangs { times } => world.services.notify_hangs.set(*times),
        Fault::DriftClock { ppm } => world.clock.set_drift_ppm(*ppm),
        Fault::Shutdown { after_ms } => world.services.arm_shutdown(*after_ms),
        Fault::StreamCut { after, stalls } => world.stream_cut.armed.set(Some((*after, *stalls))),
        Fault::MalformedLine
        | Fault::Cancel
        | Fault::OversizedLine
        | Fault::ClientGone
        | Fault::Flood { .. }
        | Fault::RefusableCalls => return true,
        // Applied by the sweep, which stops the server first (`sweep::rot`).
        Fault::RotByte { .. } => {}
        Fault::FlipLedgerRead { at } => {
            *world.disk.flip_next_read_of.borrow_mut() = Some((warden::store::ledger::LEDGER_FILE.into(), *at))
        }
        Fault::MisdirectLedgerAppend { at } => {
            *world.disk.misdirect_next_append_to.borrow_mut() = Some((warden::store::ledger::LEDGER_FILE.into(), *at))
        }
        Fault::StoreRefuses { times } => world.shared_db.refuse_next.set(*times),
        Fault::StoreLosesCommitAnswer => world.shared_db.lose_commit_answers.set(1),
        Fault::StoreLosesCommit => world.shared_db.lose_commits.set(1),
        Fault::StoreRestarts => world.shared_db.restart_next.set(true),
        // A pause is the store's concern (the lease); in a world on files it never fires.
        Fault::PausesAfterActionBegun { ms } if world.on_the_store() => world.probes.pause_after_begin.set(Some(*ms)),
        Fault::PausesAfterActionBegun { .. } => {}
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scenario's crash point names the server's point of the same name, and every point the
    /// server has can be named.
    #[test]
    fn crash_points_and_the_servers_points_are_one_vocabulary() {
        for point in CrashPoint::ALL {
            let written = serde_json::to_value(point).unwrap();
            assert_eq!(written.as_str(), Some(server_point(point).name()), "{point:?}");
        }
        let mapped: Vec<Point> = CrashPoint::ALL.iter().map(|&point| server_point(point)).collect();
        assert_eq!(mapped, Point::ALL.to_vec());
    }
}
