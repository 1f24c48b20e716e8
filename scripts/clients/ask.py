#!/usr/bin/env python3
"""A program that asks its user (`ask`), through the official Python SDK's Client in each
connect mode against a stdio server:

    python ask.py --call NAME JSON --expect-accepted JSON --expect-declined JSON -- SERVER_CMD [ARGS...]

auto (2026-07-28: the call answers input_required, the SDK retries with the answers and the
requestState) and legacy (2025-11-25: the server sends elicitation/create on the session).
Each mode calls twice: once its elicitation callback accepts, once it declines. Prints one
JSON document; exit 1 unless every call was asked once and ended as expected.
"""
import argparse
import json
import sys

import anyio
from mcp import Client, StdioServerParameters, types


async def one_call(params, mode, call, arguments, accept):
    asked = []

    async def on_elicit(context, request):
        asked.append(request.message)
        if accept:
            return types.ElicitResult(action="accept", content={"close": True})
        return types.ElicitResult(action="decline")

    async with Client(params, mode=mode, elicitation_callback=on_elicit) as client:
        result = await client.call_tool(call, arguments)
        return {"mode": mode, "accept": accept, "asked": asked, "protocolVersion": client.protocol_version,
                "structured": result.structured_content, "isError": bool(result.is_error)}


async def main(a):
    params = StdioServerParameters(command=a.server[0], args=a.server[1:])
    arguments = json.loads(a.call[1])
    outcomes, ok = [], True
    for mode in ("auto", "legacy"):
        for accept, expected in ((True, a.expect_accepted), (False, a.expect_declined)):
            # Each call its own ticket (a `once` key repeated would answer from the first run).
            args = dict(arguments, ticket_id=arguments["ticket_id"] + len(outcomes))
            out = await one_call(params, mode, a.call[0], args, accept)
            status = (out["structured"] or {}).get("result", {}).get("status")
            out["ok"] = len(out["asked"]) == 1 and not out["isError"] and status == json.loads(expected)
            ok &= out["ok"]
            outcomes.append(out)
    print(json.dumps(outcomes, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--call", nargs=2, required=True)
    parser.add_argument("--expect-accepted", required=True)
    parser.add_argument("--expect-declined", required=True)
    parser.add_argument("server", nargs="+")
    sys.exit(anyio.run(main, parser.parse_args()))
