#!/usr/bin/env bash
# Fuzzing in CI: installs cargo-fuzz if missing; when a nightly toolchain is present, runs
# each target for a bounded time (FUZZ_SECONDS each, default 30; 5 minutes in all at most)
# and fails on any crash. The canary must crash. When nightly is absent it says so plainly;
# the stable replay test (sim/tests/fuzz_replay.rs) still runs with `cargo test`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${FUZZ_SECONDS:-30}"
targets=(framing ledger journal manifest inputs sim)

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz: no nightly toolchain on this machine; skipping the libFuzzer runs (the stable replay test ran)"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
cd "$root/fuzz"
cargo +nightly fuzz build -O
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for target in "${targets[@]}"; do
  # Run on a scratch copy of the corpus, so CI never rewrites the committed one.
  mkdir -p "$work/$target"
  cp corpus/"$target"/* "$work/$target/"
  echo "fuzz: $target for ${seconds}s"
  cargo +nightly fuzz run -O "$target" "$work/$target" -- -max_total_time="$seconds" -print_final_stats=1 2>&1 \
    | grep -E "stat::number_of_executed_units|stat::average_exec_per_sec|DONE|SUMMARY|panicked" | tail -4
done
echo "fuzz: canary (must crash)"
mkdir -p "$work/canary-corpus" "$work/canary-artifacts"
cp corpus/canary/* "$work/canary-corpus/"
cargo +nightly fuzz run -O canary "$work/canary-corpus" -- -max_total_time=$(( seconds > 30 ? seconds : 30 )) \
  -artifact_prefix="$work/canary-artifacts/" >"$work/canary.log" 2>&1 || true
if ! ls "$work/canary-artifacts"/crash-* >/dev/null 2>&1 || ! grep -q "planted bug was found" "$work/canary.log"; then
  echo "fuzz: the canary did not crash: the fuzzing set-up finds nothing" >&2
  tail -5 "$work/canary.log" >&2
  exit 1
fi
echo "fuzz: the canary crashed, as it must ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/canary.log" || echo 'found quickly'))"
