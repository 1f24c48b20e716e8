#!/usr/bin/env bash
# Runs every test Warden has: unit and end-to-end tests (including the tidy test of the
# Env seam), the official MCP clients against the bundled example, and the simulator.
# Installs what the tests need on a new machine (the client harness); safe to re-run.
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

step() { printf '\n== %s\n' "$*"; }

step "build"
cargo build --workspace --all-targets --locked

step "cargo test (unit, tidy, end-to-end)"
cargo test --workspace --locked

step "real MCP clients against the bundled example"
bash "$shared/clients/setup.sh"
bash "$shared/clients/run_all.sh" --tool convert_length --args '{"value":2,"from_unit":"km","to_unit":"m"}' \
  --expect-text 2000.0 --error-tool always_fails \
  -- "$root/target/debug/warden" mcp "$root/examples/toolbox/manifest.json"

step "every message the clients received validates against its era's official schema"
"${MCP_CLIENTS_DIR:-$HOME/.cache/mcp-clients}/.venv/bin/python" "$root/scripts/validate_transcripts.py" \
  "${MCP_CLIENTS_DIR:-$HOME/.cache/mcp-clients}/out" "$root/tests/fixtures/mcp-schema"

echo
echo "all tests passed"
