//! Replays every committed fuzz input (`fuzz/corpus/<target>/*`, `fuzz/artifacts/<target>/*`)
//! through the same property functions the cargo-fuzz targets call, on stable: a fixed crash
//! stays fixed even where nightly is absent. The canary's artifacts must still fail.

use std::path::Path;

use warden_sim::fuzzing::{self, TARGETS};

fn inputs(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

#[test]
fn every_committed_input_replays() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for (target, property) in TARGETS {
        let corpus = inputs(&root.join("corpus").join(target));
        assert!(!corpus.is_empty(), "fuzz/corpus/{target} has no seed inputs");
        for file in corpus.iter().chain(inputs(&root.join("artifacts").join(target)).iter()) {
            let data = std::fs::read(file).unwrap();
            let is_canary_crash = *target == "canary" && file.starts_with(root.join("artifacts"));
            let outcome = std::panic::catch_unwind(|| property(&data));
            match (outcome.is_ok(), is_canary_crash) {
                (true, false) | (false, true) => replayed += 1,
                (false, false) => panic!("{} breaks the `{target}` property", file.display()),
                (true, true) => {
                    panic!("{}: the canary's crash no longer crashes: the planted bug is gone", file.display())
                }
            }
        }
    }
    assert!(replayed >= TARGETS.len());
}

#[test]
fn the_canary_fails_on_its_planted_input() {
    assert!(std::panic::catch_unwind(|| fuzzing::canary(b"WARD!")).is_err());
    assert!(std::panic::catch_unwind(|| fuzzing::canary(b"WARM")).is_ok());
}
