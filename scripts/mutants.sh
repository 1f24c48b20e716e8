#!/usr/bin/env bash
# Planted bugs, measured: applies each patch of mutants/ alone to the server, builds the
# simulator, and sweeps seeds until a violation is found. Every mutant must be caught within
# its budget of seeds; the table (seeds to detection, the first violation) is what
# docs/RELIABILITY.md reports.
#
#   scripts/mutants.sh                 every mutant, release build, up to 2000 seeds each
#   scripts/mutants.sh --quick         the CI subset (debug build, shares the test build)
#   scripts/mutants.sh 04 10           only the mutants whose names start so
#   scripts/mutants.sh --debug 06      the same with a debug build
#
# A patch whose header has a line "Test: <cargo test arguments>" is caught by that test instead
# of the sweep (a failure mode the simulator's one-instance worlds cannot reach, such as two
# instances racing: run with WARDEN_TEST_PG_URL set, as scripts/test-all.sh does).
#
# The patches are applied to the working tree and reverted on exit; the script refuses to
# start when the server has uncommitted changes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

profile=release
seeds_max=2000
quick_set=(02 09 14)
selected=()
for arg in "$@"; do
    case "$arg" in
        --quick) profile=debug; selected=("${quick_set[@]}") ;;
        --debug) profile=debug ;;
        --seeds=*) seeds_max="${arg#--seeds=}" ;;
        *) selected+=("$arg") ;;
    esac
done

if ! git diff --quiet -- server; then
    echo "mutants.sh: server/ has uncommitted changes; commit or stash them first" >&2
    exit 2
fi

applied=""
revert() {
    if [ -n "$applied" ]; then git apply -R "$applied"; applied=""; fi
}
trap revert EXIT

build() {
    if [ "$profile" = release ]; then cargo build --quiet --release -p warden-sim; else cargo build --quiet -p warden-sim; fi
}

scratch="$(mktemp -d)"
sim="$root/target/$profile/warden-sim"
failed=0
echo "| mutant | caught at seed | seeds swept | first violation |"
echo "|---|---|---|---|"
for patch in mutants/*.patch; do
    name="$(basename "$patch" .patch)"
    if [ "${#selected[@]}" -gt 0 ]; then
        keep=no
        for prefix in "${selected[@]}"; do [[ "$name" == "$prefix"* ]] && keep=yes; done
        [ "$keep" = yes ] || continue
    fi
    git apply "$patch"
    applied="$patch"
    test_args="$(sed -n 's/^Test: \(.*\)$/\1/p' "$patch" | head -1)"
    if [ -n "$test_args" ]; then
        # shellcheck disable=SC2086
        if cargo test --locked --quiet $test_args >"$scratch/$name.log" 2>&1; then
            echo "| $name | NOT CAUGHT | test: $test_args | - |"
            failed=1
        else
            echo "| $name | by a test | - | cargo test $test_args failed |"
        fi
        revert
        continue
    fi
    build
    report="$scratch/$name.json"
    # A patch may state its own budget on a line "Seeds: N" of its header.
    budget="$(sed -n 's/^Seeds: \([0-9]*\)$/\1/p' "$patch" | head -1)"
    budget="${budget:-$seeds_max}"
    # A patch names the invariant it must break on a line "Invariant: N" of its header: a
    # violation of another one (an unrelated panic) does not count as caught.
    invariant="$(sed -n 's/^Invariant: \([0-9]*\)$/\1/p' "$patch" | head -1)"
    expect=(--expect-violation)
    [ -n "$invariant" ] && expect+=(--expect-invariant "$invariant")
    if "$sim" explore --seeds "0..$budget" "${expect[@]}" --out "$scratch/found" --json "$report" >/dev/null 2>&1; then
        python3 - "$report" "$name" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
seed = report["violations"][0]
first = (report.get("first_violation") or "").replace("|", "/")[:120]
print(f"| {sys.argv[2]} | {seed} | {seed - report['seeds']['from'] + 1} | {first} |")
PY
    else
        echo "| $name | NOT CAUGHT | $budget | - |"
        failed=1
    fi
    revert
done
build
rm -rf "$scratch"
if [ "$failed" -ne 0 ]; then
    echo "mutants.sh: a planted bug survived: the checker has a gap" >&2
    exit 1
fi
