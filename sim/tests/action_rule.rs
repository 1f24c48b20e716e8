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
        // Every violation fails the test, not only the rule's own: a pause past the lease is a
        // world the server must come through whole. One is known to be the checker's (kept in
        // docs/DEFERRED.md): a settled run's inputs judged at rest while its server is still
        // stopping on the lease it lost, before the next start's recovery removes them.
        let judged_while_stopping = |v: &&warden_sim::report::Violation| {
            v.invariant == 6 && v.message.ends_with("ended but its inputs file is still kept")
        };
        let other: Vec<_> = report.violations.iter().filter(|v| !judged_while_stopping(v)).collect();
        assert!(other.is_empty(), "seed {seed}: {other:?}");
        pauses += report.fired.get("a pause after an action's begin").copied().unwrap_or(0);
    }
    assert!(pauses >= 4, "only {pauses} pause(s) fired: the test would show nothing");
}
