#!/usr/bin/env bash
# Prints the URL a `warden serve-http` started with `--listen 127.0.0.1:0` logged into the
# stderr file FILE, waiting up to ten seconds for it; fails (showing FILE) if none came.
#   url="$(scripts/listening-url.sh server.err)"
set -euo pipefail
for _ in $(seq 100); do
  url="$(sed -n 's/^.*warden: listening on //p' "$1")"
  if [ -n "$url" ]; then echo "$url"; exit 0; fi
  sleep 0.1
done
cat "$1" >&2
echo "warden serve-http did not start" >&2
exit 1
