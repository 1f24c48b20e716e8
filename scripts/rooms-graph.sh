#!/usr/bin/env bash
# Draws the rooms' import graph of a crate as Graphviz DOT: one node per room (a top-level
# folder or file of src/), one edge per room another names through `crate::`, tests and
# comments left out. An edge that points to a later room is drawn red: the tidy test
# `rooms_import_only_the_rooms_before_them` fails on it.
#
#   scripts/rooms-graph.sh server | dot -Tsvg > rooms.svg
#   scripts/rooms-graph.sh sim
set -euo pipefail
crate="${1:-server}"
src="$(cd "$(dirname "$0")/.." && pwd)/$crate/src"
rooms=$(grep -E '^pub mod [a-z_]+;' "$src/lib.rs" | sed -E 's/pub mod ([a-z_]+);/\1/')
rank() { echo "$rooms" | grep -nx "$1" | cut -d: -f1; }
echo "digraph rooms {"
echo "  rankdir=BT; node [shape=box];"
for room in $rooms; do
    files=$( { [ -d "$src/$room" ] && find "$src/$room" -name '*.rs'; } || echo "$src/$room.rs")
    named=$(for f in $files; do sed -e '/#\[cfg(test)\]/,$d' -e 's://.*$::' "$f"; done \
        | grep -oE 'crate::[a-z_]+' | sed 's/crate:://' | sort -u || true)
    for other in $named; do
        [ "$other" = "$room" ] && continue
        echo "$rooms" | grep -qx "$other" || continue
        colour=black
        [ "$(rank "$other")" -gt "$(rank "$room")" ] && colour=red
        echo "  \"$room\" -> \"$other\" [color=$colour];"
    done
done
echo "}"
