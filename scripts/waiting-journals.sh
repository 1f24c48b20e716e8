#!/usr/bin/env bash
# Makes the journals directory a real server leaves with a run waiting for an operator, for
# `warden-sim explore --manifest tests/fixtures/waiting-hooks/manifest.json --from-journals DIR`:
# a webhook (a plain POST, no idempotency key) is sent to a local listener that takes the
# request and never answers, so the action is in doubt and the run waits for a person. Writes
# it to tests/fixtures/waiting-hooks/journals (committed; sim/tests/manifest.rs replays it).
#
#   cargo build -p warden && scripts/waiting-journals.sh [path/to/warden]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
warden="${1:-$root/target/debug/warden}"
scratch="$(mktemp -d)"
python3 -c '
import socket, time
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 38517))
listener.listen()
taken = []
while True:
    connection, _ = listener.accept()
    taken.append(connection)  # read nothing back, answer nothing
' &
silent=$!
trap 'kill $silent 2>/dev/null || true; rm -rf "$scratch"' EXIT
sleep 0.5
fixture="$root/tests/fixtures/waiting-hooks"
mkdir -p "$scratch/hooks"
cp "$fixture/manifest.json" "$fixture/post.star" "$fixture/get.star" "$scratch/hooks/"
meta='"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}'
echo "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/call\", \"params\": {\"name\": \"post_message\", \"arguments\": {\"message\": \"deploy done\"}, $meta}}" \
  | "$warden" mcp "$scratch/hooks/manifest.json" > "$scratch/out.jsonl" 2> "$scratch/log.txt"
grep -q waiting_for_operator "$scratch/out.jsonl" || { echo "the run did not wait for an operator:"; cat "$scratch/out.jsonl" "$scratch/log.txt"; exit 1; }
rm -rf "$fixture/journals"
cp -r "$scratch/hooks/journals" "$fixture/journals"
rm -f "$fixture/journals/server.lock" "$fixture/journals/admin.sock"
echo "journals in $fixture/journals:"
find "$fixture/journals" -type f | sed "s|$fixture/||" | sort
