//! The first seeds find no violation: the short sweep that `cargo mutants` runs on every mutant
//! of the durable core (see `.cargo/mutants.toml`), beside the scenario files and the server's
//! unit tests. The planted bugs of `mutants/` are caught at seeds 0 to 11; a hundred seeds cost
//! about fifteen seconds in a debug build.

use warden_sim::plan::plan_for_seed;
use warden_sim::sweep::simulate;

const SEEDS: u64 = 100;

#[test]
#[ignore = "run by cargo mutants; CI's `explore --seeds 0..500` covers these seeds"]
fn the_first_hundred_seeds_find_no_violation() {
    for seed in 0..SEEDS {
        let report = simulate(&plan_for_seed(seed));
        assert!(report.violations.is_empty(), "seed {seed}: {:?}", report.violations);
    }
}
