#!/usr/bin/env bash
# Fuzzing in CI: installs cargo-fuzz if missing and runs every target for a bounded time
# (FUZZ_SECONDS each, default 30) on the nightly toolchain, failing on any crash. The canary
# must crash. Without a nightly toolchain (and none can be installed) it fails, unless
# FUZZ_WITHOUT_NIGHTLY=1 says to skip on purpose: a CI that fuzzed nothing never passes
# silently. The stable replay test (sim/tests/fuzz_replay.rs) runs with `cargo test` either way.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${FUZZ_SECONDS:-30}"
targets=(framing stream ledger journal manifest inputs sim)

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz: no nightly toolchain on this machine; installing it"
  rustup toolchain install nightly --profile minimal || true
fi
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  if [ "${FUZZ_WITHOUT_NIGHTLY:-0}" = 1 ]; then
    echo "fuzz: no nightly toolchain; skipped on purpose (FUZZ_WITHOUT_NIGHTLY=1); the stable replay test ran"
    exit 0
  fi
  echo "fuzz: no nightly toolchain, and none could be installed: nothing was fuzzed (FUZZ_WITHOUT_NIGHTLY=1 skips on purpose)" >&2
  exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
cd "$root/fuzz"
# No sanitizer: the targets drive safe Rust only (the `unsafe` blocks are the real Env's OS
# calls in server/src/io/, which no target reaches), so AddressSanitizer would find nothing
# and only double the build's disk and halve the executions a second. Every build and run
# below passes the same flags, or cargo-fuzz would build again.
fuzz_flags=(-O --sanitizer none)
cargo +nightly fuzz build "${fuzz_flags[@]}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for target in "${targets[@]}"; do
  # Run on a scratch copy of the corpus, so CI never rewrites the committed one.
  mkdir -p "$work/$target"
  cp corpus/"$target"/* "$work/$target/"
  echo "fuzz: $target for ${seconds}s"
  cargo +nightly fuzz run "${fuzz_flags[@]}" "$target" "$work/$target" -- -max_total_time="$seconds" -print_final_stats=1 2>&1 \
    | grep -E "stat::number_of_executed_units|stat::average_exec_per_sec|DONE|SUMMARY|panicked" | tail -4
done
echo "fuzz: canary (must crash)"
mkdir -p "$work/canary-corpus" "$work/canary-artifacts"
cp corpus/canary/* "$work/canary-corpus/"
cargo +nightly fuzz run "${fuzz_flags[@]}" canary "$work/canary-corpus" -- -max_total_time=$(( seconds > 30 ? seconds : 30 )) \
  -artifact_prefix="$work/canary-artifacts/" >"$work/canary.log" 2>&1 || true
if ! ls "$work/canary-artifacts"/crash-* >/dev/null 2>&1 || ! grep -q "planted bug was found" "$work/canary.log"; then
  echo "fuzz: the canary did not crash: the fuzzing set-up finds nothing" >&2
  tail -5 "$work/canary.log" >&2
  exit 1
fi
echo "fuzz: the canary crashed, as it must ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/canary.log" || echo 'found quickly'))"
