//! A sweep's memory does not grow with its seeds: every seed's world (its disk, services,
//! instances and their tasks) is freed when the seed ends, whatever transport it served.
//! Before, an HTTP instance's handler held the server's state, whose `Env` held the listener
//! that held the handler: each HTTP seed kept its whole world, about 450 KB per seed swept.

use std::collections::BTreeSet;

use warden_faults::Transport;
use warden_sim::env::disk::live_disks;
use warden_sim::plan::plan_for_seed;
use warden_sim::sweep::simulate;

#[test]
fn every_seed_frees_its_world_over_stdio_and_http() {
    let mut transports = BTreeSet::new();
    for seed in 0..40 {
        let scenario = plan_for_seed(seed);
        let transport = scenario.world.as_ref().map_or(Transport::Stdio, |world| world.transport);
        let before = live_disks();
        let report = simulate(&scenario);
        assert_eq!(live_disks(), before, "seed {seed} ({transport:?}) kept its world alive: {:?}", report.violations);
        transports.insert(format!("{transport:?}"));
    }
    assert_eq!(transports.len(), 3, "seeds 0..40 cover stdio, HTTP and HTTP with OAuth: {transports:?}");
}
