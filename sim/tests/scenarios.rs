//! Replays every scenario file in `scenarios/` and checks each one's stated expectation.

use warden_faults::{Expect, Scenario};
use warden_sim::sweep::simulate;

#[test]
fn every_scenario_meets_its_expectation() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 15, "expected the hand-written scenarios, found {}", files.len());
    let mut failures = Vec::new();
    for file in &files {
        let scenario: Scenario = serde_json::from_str(&std::fs::read_to_string(file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let report = simulate(&scenario);
        let found: Vec<u8> = report.violations.iter().map(|v| v.invariant).collect();
        let met = match scenario.expect {
            Expect::Pass => found.is_empty(),
            Expect::Fails { invariant } => found.contains(&invariant),
        };
        if !met {
            failures.push(format!("{}: expected {:?}, found {:?}", file.display(), scenario.expect, report.violations));
        }
        // A scenario says what it does: each of its faults must fire.
        for (position, kind) in &report.never_fired {
            failures.push(format!("{}: fault {position} ({kind}) never fired", file.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in [3, 17, 29] {
        let scenario = warden_sim::plan::plan_for_seed(seed);
        assert_eq!(simulate(&scenario).trace_hash, simulate(&scenario).trace_hash, "seed {seed}");
    }
}

/// A scenario file naming more instances beside the first than `PEERS_MAX` is refused where
/// it is read, naming the field and the limit (a world of a hundred peers would take every slot
/// of the store, and the sweep's time, for nothing).
#[test]
fn a_scenario_with_too_many_peers_is_refused_where_it_is_read() {
    let dir = std::env::temp_dir().join(format!("warden-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut scenario = warden_sim::plan::plan_for_seed(9);
    let world = scenario.world.as_mut().expect("seed 9 draws a generated world");
    world.peers = warden_faults::PEERS_MAX + 1;
    let file = dir.join("too-many-peers.json");
    std::fs::write(&file, serde_json::to_string(&scenario).unwrap()).unwrap();
    let output =
        std::process::Command::new(env!("CARGO_BIN_EXE_warden-sim")).arg("replay").arg(&file).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!output.status.success(), "refused: {said}");
    assert!(said.contains("world.peers is 3, over the limit of 2"), "{said}");
}

/// Issue 45 item 7: a scenario file's numbers are bounded where it is read, as `world.peers`
/// is: an endless flood or a clock step past what the simulated clock holds is refused with
/// the field and the limit, never replayed (a panic there was blamed on the server).
#[test]
fn a_scenario_with_an_endless_flood_or_an_impossible_clock_step_is_refused() {
    let dir = std::env::temp_dir().join(format!("warden-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let faults = [
        (warden_faults::Fault::Flood { calls: u32::MAX }, "faults[0].calls is 4294967295, over the limit of"),
        (warden_faults::Fault::StepClock { ms: i64::MIN + 1 }, "faults[0].ms is -9223372036854775807, over the limit"),
    ];
    for (index, (fault, said_wanted)) in faults.into_iter().enumerate() {
        let mut scenario = warden_sim::plan::plan_for_seed(9);
        scenario.faults = vec![warden_faults::Planned { before_call: 1, fault }];
        let file = dir.join(format!("bounds-{index}.json"));
        std::fs::write(&file, serde_json::to_string(&scenario).unwrap()).unwrap();
        let output =
            std::process::Command::new(env!("CARGO_BIN_EXE_warden-sim")).arg("replay").arg(&file).output().unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(!output.status.success(), "refused: {said}");
        assert!(said.contains(said_wanted), "{said}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
