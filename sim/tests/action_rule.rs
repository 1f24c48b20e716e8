//! The action rule in the simulator (issue 28): a server on the PostgreSQL store paused past
//! its lease right after an action's begin record is durable (a stall, SIGSTOP) sends nothing
//! it may no longer own once it wakes. The simulated services count every write that reaches
//! them while no instance holds a lease (invariant 6); planted bug 64 (the rule skipped) makes
//! this test fail.

use warden_faults::{Fault, Planned, Scenario};

/// Seeds whose worlds keep their state in the store and send writes.
const SEEDS: [u64; 4] = [53, 61, 68, 98];

#[test]
fn a_server_paused_past_its_lease_after_an_actions_begin_sends_nothing_more() {
    let mut pauses = 0;
    for seed in SEEDS {
        let planned = warden_sim::plan::plan_for_seed(seed);
        let calls = planned.calls;
        // A pause longer than the 30 s lease before every call: each fires at the next begin.
        let faults = (0..calls)
            .map(|call| Planned { before_call: call, fault: Fault::PausesAfterActionBegun { ms: 100_000 } })
            .collect();
        let mut scenario = Scenario::passing("paused past the lease after each begin".into(), seed, calls, faults);
        scenario.world = planned.world;
        let report = warden_sim::sweep::simulate(&scenario);
        let unleased: Vec<_> =
            report.violations.iter().filter(|v| v.message.contains("after the sender's lease ended")).collect();
        assert!(unleased.is_empty(), "seed {seed}: {unleased:?}");
        pauses += report.fired.get("a pause after an action's begin").copied().unwrap_or(0);
    }
    assert!(pauses >= 4, "only {pauses} pause(s) fired: the test would show nothing");
}
