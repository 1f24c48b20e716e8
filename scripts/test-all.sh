#!/usr/bin/env bash
# Runs every test Warden has: unit and end-to-end tests (including the tidy test of the
# Env seam), the official MCP clients against the bundled example, and the simulator.
# Installs what the tests need on a new machine (the client harness, PostgreSQL); safe to
# re-run. The `db.postgres` tests run against a throwaway PostgreSQL cluster started here
# (scripts/postgres.sh) and stopped at exit.
#
#   scripts/test-all.sh
#
# Environment: MCP_CLIENTS_DIR (where the clients are installed; default ~/.cache/mcp-clients),
# WITH_RMCP=0 to skip the Rust SDK client (it takes ~75 s to build the first time).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
shared="$root/../shared"
export WITH_RMCP="${WITH_RMCP:-1}"

started=$SECONDS
step() { printf '\n== %s  (%ss so far)\n' "$*" "$((SECONDS - started))"; }

step "build, then the formatter's and clippy's gates"
cargo build --workspace --all-targets --locked
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

step "a throwaway PostgreSQL cluster for the db.postgres tests"
source "$root/scripts/postgres.sh"
trap postgres_stop EXIT
postgres_start

step "Debian's prometheus for the metrics test (it scrapes a real server)"
if [ ! -x /usr/bin/prometheus ]; then
  if [ "$(id -u)" = 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
  "${apt_get[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq --no-install-recommends prometheus >/dev/null
fi

step "cargo test (unit, tidy, end-to-end, simulator, fuzz replay)"
cargo test --workspace --locked

step "crash tests of the real binary: failpoints after each durable step, kill -9 under load"
# pipefail (set above) makes a failing test fail this step; grep only trims the output.
cargo test -p warden --features crash-points --test crash --locked -- --nocapture 2>&1 \
  | grep -E "^test |test result|crash after|kill -9|panicked|FAILED|error"
# The steps below use the plain binary, without failpoints.
cargo build -p warden --locked

clients_dir="${MCP_CLIENTS_DIR:-$HOME/.cache/mcp-clients}"
validate() {
  "$clients_dir/.venv/bin/python" "$root/scripts/validate_transcripts.py" "$clients_dir/out" "$root/tests/fixtures/mcp-schema"
}

step "real MCP clients against the support desk example (SQLite)"
bash "$shared/clients/setup.sh"
scratch="$(mktemp -d)"
trap 'postgres_stop; rm -rf "$scratch"' EXIT
cp -r "$root/examples/support-desk" "$scratch/support-desk"
rm -rf "$scratch/support-desk/journals" "$scratch/support-desk/desk.db"
bash "$shared/clients/run_all.sh" --tool search_tickets --args '{"query":"Refund"}' \
  --expect-text '[{"id":1,"title":"Refund not received after 10 days"},{"id":4,"title":"Refund requested for a duplicate order"}]' \
  --error-tool close_ticket -- "$root/target/debug/warden" mcp "$scratch/support-desk/manifest.json"
step "every message the clients received validates against its era's official schema"
validate

step "resources, prompts, progress and log messages through the Python SDK (auto, legacy, low-level)"
rm -rf "$scratch/support-desk/journals" "$scratch/support-desk/desk.db" "$clients_dir/out/py-surface.jsonl"
"$clients_dir/.venv/bin/python" "$root/scripts/clients/surface.py" --uri ticket://3 \
  --prompt triage '{"ticket_id": "3"}' --call search_tickets '{"query": "Refund"}' \
  -- "$clients_dir/.venv/bin/python" "$shared/clients/mcp_tee.py" --log "$clients_dir/out/py-surface.jsonl" \
  "$root/target/debug/warden" mcp "$scratch/support-desk/manifest.json" >/dev/null

step "a program that asks its user, through the Python SDK (2026-07-28 input_required, 2025-11-25 elicitation)"
rm -f "$clients_dir/out/py-ask.jsonl"
cp -r "$root/tests/fixtures/ask" "$scratch/ask"
"$clients_dir/.venv/bin/python" "$root/scripts/clients/ask.py" --call close_ticket '{"ticket_id": 1, "note": "fixed"}' \
  --expect-accepted '"closed"' --expect-declined '"left open"' \
  -- "$clients_dir/.venv/bin/python" "$shared/clients/mcp_tee.py" --log "$clients_dir/out/py-ask.jsonl" \
  "$root/target/debug/warden" mcp "$scratch/ask/manifest.json" >/dev/null

step "the same through the TypeScript SDK (2025-11-25) and inspector-cli"
rm -rf "$scratch/support-desk/journals" "$scratch/support-desk/desk.db" "$clients_dir/out/ts-surface.jsonl"
NODE_PATH="$clients_dir/node/node_modules" node "$root/scripts/clients/surface.mjs" ticket://3 \
  triage '{"ticket_id": "3"}' search_tickets '{"query": "Refund"}' \
  -- "$clients_dir/.venv/bin/python" "$shared/clients/mcp_tee.py" --log "$clients_dir/out/ts-surface.jsonl" \
  "$root/target/debug/warden" mcp "$scratch/support-desk/manifest.json" >/dev/null
inspector() {
  (cd "$clients_dir/node/.inspector-cwd" && "$clients_dir/node/node_modules/.bin/mcp-inspector-cli" --cli \
    "$root/target/debug/warden" mcp "$scratch/support-desk/manifest.json" "$@" 2>/dev/null)
}
inspector --method resources/read --uri ticket://3 | grep -q "Invoice shows the wrong address"
inspector --method prompts/get --prompt-name triage --prompt-args ticket_id=3 | grep -q "ticket://3"
inspector --method resources/templates/list | grep -q "ticket://{ticket_id}"
if [ "$WITH_RMCP" = 1 ]; then
  step "the same through the Rust SDK (rmcp: initialize, and 2026-07-28 discover)"
  # Built into the harness's rmcp target, so the pinned rmcp is compiled once.
  (cd "$root/scripts/clients/rmcp-surface" && CARGO_TARGET_DIR="$clients_dir/rmcp-client/target" cargo build --quiet --locked)
  rm -rf "$scratch/support-desk/journals" "$scratch/support-desk/desk.db" "$clients_dir/out/rmcp-surface.jsonl"
  "$clients_dir/rmcp-client/target/debug/rmcp-surface" ticket://3 triage '{"ticket_id": "3"}' \
    search_tickets '{"query": "Refund"}' \
    -- "$clients_dir/.venv/bin/python" "$shared/clients/mcp_tee.py" --log "$clients_dir/out/rmcp-surface.jsonl" \
    "$root/target/debug/warden" mcp "$scratch/support-desk/manifest.json" >/dev/null
fi
validate

step "the Python and TypeScript SDKs over Streamable HTTP (warden serve-http, a bearer token)"
rm -rf "$scratch/support-desk/journals" "$scratch/support-desk/desk.db"
export WARDEN_TEST_HTTP_TOKEN="test-token-$RANDOM-$RANDOM-0123456789"
"$root/target/debug/warden" serve-http "$scratch/support-desk/manifest.json" --listen 127.0.0.1:0 \
  --bearer-token-env WARDEN_TEST_HTTP_TOKEN 2>"$scratch/http.err" &
http_server=$!
url="$("$root/scripts/listening-url.sh" "$scratch/http.err")"
"$clients_dir/.venv/bin/python" "$root/scripts/clients/over_http.py" --url "$url" \
  --token-env WARDEN_TEST_HTTP_TOKEN --call search_tickets '{"query": "Refund"}' \
  --uri ticket://3 --prompt triage '{"ticket_id": "3"}' >/dev/null
NODE_PATH="$clients_dir/node/node_modules" node "$root/scripts/clients/over_http.mjs" "$url" \
  WARDEN_TEST_HTTP_TOKEN ticket://3 triage '{"ticket_id": "3"}' search_tickets '{"query": "Refund"}' >/dev/null
# The README's quickstart clients, over HTTP here and over stdio below.
"$clients_dir/.venv/bin/python" "$root/examples/clients/quickstart.py" http "$url" WARDEN_TEST_HTTP_TOKEN \
  | grep "Refund not received" >/dev/null
NODE_PATH="$clients_dir/node/node_modules" node "$root/examples/clients/quickstart.mjs" http "$url" WARDEN_TEST_HTTP_TOKEN \
  | grep "Refund not received" >/dev/null
kill "$http_server"; wait "$http_server" || true
if grep -rqF "$WARDEN_TEST_HTTP_TOKEN" "$scratch/http.err" "$scratch/support-desk/journals"; then
  echo "the bearer token appears in the server's log or journals"; exit 1
fi

step "live Streamable HTTP: the Python and TypeScript SDKs hear progress and a question before the answer"
rm -rf "$scratch/live" && mkdir -p "$scratch/live" "$clients_dir/out" && cp "$root"/conformance/*.json "$root"/conformance/*.star "$scratch/live/"
"$root/target/debug/warden" serve-http "$scratch/live/manifest.json" --listen 127.0.0.1:0 2>"$scratch/live.err" &
live_server=$!
url="$("$root/scripts/listening-url.sh" "$scratch/live.err")"
# The transcripts (each message's time since the call, in order) are kept beside the others.
"$clients_dir/.venv/bin/python" "$root/scripts/clients/live_http.py" --url "$url" >"$clients_dir/out/live-http-python.json"
NODE_PATH="$clients_dir/node/node_modules" node "$root/scripts/clients/live_http.mjs" "$url" >"$clients_dir/out/live-http-typescript.json"
kill "$live_server"; wait "$live_server" || true

step "a durable task through the Python SDK over Streamable HTTP, the server killed with SIGKILL while the task waits"
# The script starts and kills its own serve-http; the SDK drives the task through its extension seam.
"$clients_dir/.venv/bin/python" "$root/scripts/clients/task_http.py" --warden "$root/target/debug/warden" \
  --manifest "$root/tests/fixtures/tasks/manifest.json" >"$clients_dir/out/task-http-python.json"

step "the README's quickstart clients over stdio (Python and TypeScript SDKs)"
rm -rf "$scratch/support-desk/journals" "$scratch/support-desk/desk.db"
"$clients_dir/.venv/bin/python" "$root/examples/clients/quickstart.py" stdio \
  "$root/target/debug/warden" mcp "$scratch/support-desk/manifest.json" | grep "Refund not received" >/dev/null
NODE_PATH="$clients_dir/node/node_modules" node "$root/examples/clients/quickstart.mjs" stdio \
  "$root/target/debug/warden" mcp "$scratch/support-desk/manifest.json" | grep "Refund not received" >/dev/null

step "the official MCP conformance suite against warden serve-http (2025-11-25 and 2026-07-28)"
"$root/scripts/conformance.sh"

step "real MCP clients against the toolbox example (pure programs)"
cp -r "$root/examples/toolbox" "$scratch/toolbox"
rm -rf "$scratch/toolbox/journals"
bash "$shared/clients/run_all.sh" --tool convert_length --args '{"value":2,"from_unit":"km","to_unit":"m"}' \
  --expect-text 2000.0 --error-tool always_fails \
  -- "$root/target/debug/warden" mcp "$scratch/toolbox/manifest.json"
validate

step "simulator: a seed sweep with faults on (every required crash window hit), the determinism check, and the two canaries"
sim="$root/target/debug/warden-sim"
"$sim" explore --seeds 0..500 --require-coverage --out "$scratch/found"
for seed in 1 2 3 42 500; do "$sim" run --seed "$seed" --check-determinism; done
# The checker is itself tested: each planted bug must be found within 1,000 seeds, breaking
# the invariant it names (not caught by something unrelated).
"$sim" explore --seeds 0..1000 --canary lying-fsync --expect-violation --expect-invariant 11 --out "$scratch/canary"
"$sim" explore --seeds 0..1000 --canary ignore-idempotency-keys --expect-violation --expect-invariant 2 --out "$scratch/canary"
"$sim" replay "$root"/scenarios/*.json

step "the timeline page and the console in headless Chromium (installed here when missing)"
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
    "${apt_get[@]}" install -y chromium >/dev/null \
        || { "${apt_get[@]}" update >/dev/null && "${apt_get[@]}" install -y chromium >/dev/null; }
fi
WARDEN_CHROMIUM="$(command -v chromium)" cargo test -p warden-sim --test timeline --locked -- --ignored
# The console in the same browser; its screenshot is kept as target/console.png.
WARDEN_CHROMIUM="$(command -v chromium)" cargo test -p warden --test operator --locked -- --ignored

step "planted bugs: the CI subset of mutants/, each caught by the simulator (the whole set: scripts/mutants.sh)"
# Every patch must still apply, or the full run (a documented longer command) would stop at it.
for patch in "$root"/mutants/*.patch; do git -C "$root" apply --check "$patch"; done
if git -C "$root" diff --quiet -- server; then
    "$root/scripts/mutants.sh" --quick
else
    echo "skipped: server/ has uncommitted changes (mutants.sh patches the working tree)"
fi

step "cargo-mutants on the durable core's lines the last commit changed (at most 6 mutants; every file: scripts/cargo-mutants.sh)"
if git -C "$root" diff --quiet HEAD -- server sim; then
    "$root/scripts/cargo-mutants.sh" --ci
else
    echo "skipped: server/ or sim/ has uncommitted changes (cargo-mutants mutates the working tree)"
fi

step "fuzzing (nightly): each target for a bounded time, and the canary"
"$root/scripts/fuzz-ci.sh"

echo
echo "all tests passed in $((SECONDS - started))s"
