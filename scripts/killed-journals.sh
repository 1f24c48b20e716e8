#!/usr/bin/env bash
# Makes the journals directory a real `kill -9` of the support desk leaves, for
# `warden-sim explore --manifest examples/support-desk/manifest.json --from-journals DIR`:
# the real binary serves a burst of calls (closes, searches) and is killed while they run.
# Writes it to tests/fixtures/killed-support-desk/journals (committed; sim/tests/manifest.rs
# replays it). The runs it leaves differ from one making to the next (timing decides where
# the kill lands); the test asks only that the simulator explore from whatever they are.
#
#   cargo build -p warden && scripts/killed-journals.sh [path/to/warden]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
warden="${1:-$root/target/debug/warden}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cp -r "$root/examples/support-desk" "$scratch/desk"
rm -rf "$scratch/desk/journals" "$scratch/desk/desk.db"
meta='"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}'
{
  for ticket in 1 2 3 4 5 6; do
    echo "{\"jsonrpc\": \"2.0\", \"id\": $ticket, \"method\": \"tools/call\", \"params\": {\"name\": \"close_ticket\", \"arguments\": {\"ticket_id\": $ticket, \"note\": \"fixed in the last release\"}, $meta}}"
    echo "{\"jsonrpc\": \"2.0\", \"id\": $((ticket + 10)), \"method\": \"tools/call\", \"params\": {\"name\": \"search_tickets\", \"arguments\": {\"query\": \"refund\"}, $meta}}"
  done
  sleep 5 # stdin stays open: the server is killed, never drained
} | "$warden" mcp "$scratch/desk/manifest.json" > "$scratch/out.jsonl" 2> "$scratch/log.txt" &
# Kill as the burst is being served: some runs settled, some still going.
for _ in $(seq 1 200); do
  if [ "$(wc -l < "$scratch/out.jsonl")" -ge 3 ]; then break; fi
  sleep 0.01
done
pkill -9 -f "warden mcp $scratch/desk/manifest.json" || true
wait || true
target="$root/tests/fixtures/killed-support-desk"
rm -rf "$target"
mkdir -p "$target"
cp -r "$scratch/desk/journals" "$target/journals"
rm -f "$target/journals/server.lock" "$target/journals/admin.sock"
echo "answers before the kill: $(wc -l < "$scratch/out.jsonl"); journals in $target/journals:"
find "$target/journals" -type f | sed "s|$target/||" | sort
