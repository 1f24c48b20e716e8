//! How fast each fuzz property runs over its committed corpus, without sanitizers (libFuzzer
//! with ASAN is slower by a constant factor): executions per second, printed. A measurement,
//! not a check, so it is ignored by default:
//!
//!   cargo test --release -p warden-sim --test fuzz_speed -- --ignored --nocapture

use std::path::Path;
use std::time::{Duration, Instant};

use warden_sim::fuzzing;

/// A whole simulated workload per input (`sim`) and a planted crash (`canary`) say nothing
/// about speed.
const UNTIMED: &[&str] = &["sim", "canary"];

#[test]
#[ignore]
fn executions_per_second() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    for (target, property) in fuzzing::TARGETS.iter().filter(|(target, _)| !UNTIMED.contains(target)) {
        let mut corpus: Vec<Vec<u8>> = std::fs::read_dir(root.join(target))
            .unwrap()
            .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
            .collect();
        // Mutated copies too, as a fuzzer would feed: each input with a byte flipped.
        let flipped: Vec<Vec<u8>> = (corpus.iter())
            .filter(|input| !input.is_empty())
            .map(|input| {
                let mut copy = input.clone();
                let at = copy.len() / 2;
                copy[at] ^= 0x20;
                copy
            })
            .collect();
        corpus.extend(flipped);
        let started = Instant::now();
        let mut runs = 0u64;
        while started.elapsed() < Duration::from_secs(2) {
            for input in &corpus {
                let _ = std::panic::catch_unwind(|| property(input));
                runs += 1;
            }
        }
        println!("{target}: {:.0} executions/s", runs as f64 / started.elapsed().as_secs_f64());
    }
}
