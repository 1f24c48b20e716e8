#!/usr/bin/env python3
"""The official Python SDK (the client harness's pinned `mcp`) hears a call live over
Streamable HTTP: in a 2025-11-25 session it calls a tool whose run asks the user
(`test_elicitation` of conformance/manifest.json), and records when each message arrived.
The run's progress comes first, then the elicitation request (the run cannot end before the
client answers it), then the answer:

    python live_http.py --url http://127.0.0.1:PORT/mcp [--log transcript.jsonl]

Prints one JSON document (the order and the times in ms since the call); exit 1 unless the
progress and the question arrived before the answer and the answer holds what was given.
"""
import argparse
import json
import sys
import time

import anyio
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--log")
    a = p.parse_args()
    heard = []
    started = time.monotonic()

    def now():
        return round((time.monotonic() - started) * 1000, 1)

    async def on_progress(progress, total, message):
        heard.append({"at_ms": now(), "what": "progress", "message": message})

    async def on_elicitation(context, params):
        heard.append({"at_ms": now(), "what": "elicitation/create", "message": params.message})
        return types.ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})

    client = Client(streamable_http_client(a.url), mode="legacy", elicitation_callback=on_elicitation)
    async with client:
        started = time.monotonic()
        result = await client.call_tool(
            "test_elicitation", {"message": "Who are you?"}, progress_callback=on_progress
        )
        text = " ".join(c.text for c in result.content if getattr(c, "text", None))
        heard.append({"at_ms": now(), "what": "answer", "text": text})
    order = [entry["what"] for entry in heard]
    live = (
        order[-1] == "answer"
        and "progress" in order
        and "elicitation/create" in order
        and order.index("progress") < order.index("elicitation/create")
    )
    ok = live and "ada@example.com" in text and not result.is_error
    out = {"order": order, "heard": heard, "ok": ok}
    if a.log:
        with open(a.log, "w") as log:
            for entry in heard:
                log.write(json.dumps(entry) + "\n")
    print(json.dumps(out, indent=2))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    anyio.run(main)
