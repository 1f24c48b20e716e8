#!/usr/bin/env bash
# cargo-mutants over Warden's durable core (docs/RELIABILITY.md, "Mutation testing"): every
# mutant cargo-mutants makes of the admission of calls, the run machine and the ledger's state,
# each tested by the test set .cargo/mutants.toml names (the server's and the simulator's unit
# tests, the fast simulator tests, every scenario file, the first hundred seeds). A documented
# command, not a CI step: about 200 mutants at about 30 s each on two cores.
#
#   scripts/cargo-mutants.sh                  the three files; results in target/mutants/
#   scripts/cargo-mutants.sh --in-diff FILE   only the mutants on the lines a diff changes
#   scripts/cargo-mutants.sh --file PATH      other files (any cargo-mutants argument passes)
#
# Each mutant is made in place (one target directory, incremental builds), so the script
# refuses to start when the server has uncommitted changes, and cargo-mutants puts every file
# back when it ends. cargo-mutants 27 builds its baseline for the mutated package alone, not
# the workspace the config names, and so fails on the simulator's test targets: the script
# runs the baseline itself on the clean tree, then skips cargo-mutants' own.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

version=27.1.0
if ! cargo mutants --version 2>/dev/null | grep -q "$version"; then
    cargo install cargo-mutants --version "$version" --locked
fi
if ! git diff --quiet HEAD -- server sim; then
    echo "scripts/cargo-mutants.sh: server/ or sim/ has uncommitted changes; commit or stash them first" >&2
    exit 2
fi

files=(--file server/src/call/admission.rs --file server/src/run/machine.rs --file server/src/store/ledger/state.rs)
for arg in "$@"; do
    case "$arg" in
        --file|--in-diff) files=() ;;
    esac
done

echo "== the baseline: the test set on the clean tree"
cargo test --profile mutants --workspace --lib --test scenarios --test short_sweep --test actions --test durable \
    --test steps --test defects --test input -- --include-ignored >/dev/null

echo "== the mutants"
cargo mutants --in-place --no-shuffle --baseline=skip --timeout 240 -o target "${files[@]}" "$@"
