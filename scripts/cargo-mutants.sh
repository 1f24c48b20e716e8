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
#   scripts/cargo-mutants.sh --ci             CI: the durable core's lines the last commit changed
#                                             (at most CI_MUTANTS_MAX mutants, built in the dev
#                                             profile CI has just built; fails on a survivor)
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
install() {
    if ! cargo mutants --version 2>/dev/null | grep -q "$version"; then
        cargo install cargo-mutants --version "$version" --locked
    fi
}

# The durable core: what issue 26 names (the ledger and its state, the run machine and driver,
# admission, recovery, the journal and record formats, the broker's replay and in-doubt rules).
core=(server/src/call/admission.rs server/src/run/machine.rs server/src/run/machine server/src/run/driver.rs
      server/src/run/perform.rs server/src/run/recovery.rs server/src/run/retention.rs server/src/store
      server/src/broker)

# CI: the mutants on the lines of the durable core that the last commit changed. Runs after
# the whole test suite passed (so no baseline of its own) in the dev profile that suite built
# (so each mutant's build is incremental); a change with more mutants than CI_MUTANTS_MAX
# tests an evenly spread sample of them, chosen by the commit. A survivor fails CI.
if [ "${1:-}" = "--ci" ]; then
    # A shallow clone (a CI checkout's default) has no parent: fetch it; a repository of one
    # commit has none to fetch.
    if ! git rev-parse -q --verify HEAD~1 >/dev/null; then
        git fetch -q --deepen=1 2>/dev/null || true
    fi
    if ! git rev-parse -q --verify HEAD~1 >/dev/null; then
        if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
            echo "scripts/cargo-mutants.sh --ci: a shallow clone whose parent commit cannot be fetched" >&2
            exit 2
        fi
        echo "no parent commit: no change to test mutants of"
        exit 0
    fi
    diff="$(mktemp)"
    trap 'rm -f "$diff"' EXIT
    git diff HEAD~1 HEAD -- "${core[@]}" >"$diff"
    if [ ! -s "$diff" ]; then
        echo "the last commit changed no line of the durable core: no mutant to test"
        exit 0
    fi
    install
    listed="$(cargo mutants --list --in-diff "$diff" | wc -l)"
    if [ "$listed" -eq 0 ]; then
        echo "no mutant on the lines the last commit changed"
        exit 0
    fi
    max="${CI_MUTANTS_MAX:-6}"
    shards=$(( (listed + max - 1) / max ))
    if [ "$shards" -le 1 ]; then
        shard=()
        echo "== $listed mutant(s) on the lines the last commit changed"
    else
        pick=$(( 0x$(git rev-parse --short=6 HEAD) % shards ))
        shard=(--shard "$pick/$shards" --sharding round-robin)
        echo "== $listed mutants on the lines the last commit changed: shard $pick of $shards (about $max)"
    fi
    cargo mutants --in-place --no-shuffle --baseline=skip --profile dev --timeout 240 -o target \
        --in-diff "$diff" ${shard[@]+"${shard[@]}"}
    exit $?
fi

install
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
    --test steps --test defects --test input --test task_runs --test driver --test model --test shared_ledger \
    -- --include-ignored >/dev/null

echo "== the mutants"
cargo mutants --in-place --no-shuffle --baseline=skip --timeout 240 -o target "${files[@]}" "$@"
