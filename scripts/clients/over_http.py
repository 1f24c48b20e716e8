#!/usr/bin/env python3
"""The official Python SDK (the client harness's pinned `mcp`) against `warden serve-http`,
over Streamable HTTP with a bearer token:

    python over_http.py --url http://127.0.0.1:PORT/mcp --token-env NAME \
        --call NAME JSON [--uri URI] [--prompt NAME JSON]

In each connect mode (auto: 2026-07-28 per-request, through server/discover; legacy:
initialize and a session) it lists the tools, calls one, and reads URI and gets the prompt
when given; then it checks that a client without the token is refused. Prints one JSON
document; exit 1 unless every mode answered and the client without the token was refused.
"""
import argparse
import json
import os
import sys

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def connect(url, token, mode):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))
    return Client(transport, mode=mode)


async def one_mode(a, token, mode):
    out = {"mode": mode}
    async with connect(a.url, token, mode) as client:
        out["protocolVersion"] = client.protocol_version
        tools = await client.list_tools()
        out["tools"] = [t.name for t in tools.tools]
        result = await client.call_tool(a.call[0], json.loads(a.call[1]))
        out["isError"] = bool(result.is_error)
        out["text"] = [c.text for c in result.content if getattr(c, "text", None) is not None]
        if a.uri:
            read = await client.read_resource(a.uri)
            out["read"] = [c.text for c in read.contents]
        if a.prompt:
            got = await client.get_prompt(a.prompt[0], json.loads(a.prompt[1]))
            out["messages"] = [m.content.text for m in got.messages]
    return out


async def refused_without_token(a):
    try:
        with anyio.fail_after(30):
            async with connect(a.url, None, "legacy") as client:
                await client.list_tools()
    except Exception as error:  # the SDK raises its own error types; any refusal will do
        return f"{type(error).__name__}"
    return None


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token-env", required=True)
    p.add_argument("--call", nargs=2, required=True, metavar=("NAME", "JSON"))
    p.add_argument("--uri")
    p.add_argument("--prompt", nargs=2, metavar=("NAME", "JSON"))
    a = p.parse_args()
    token = os.environ[a.token_env]
    report = {"modes": []}
    ok = True
    for mode in ("auto", "legacy"):
        try:
            with anyio.fail_after(60):
                out = await one_mode(a, token, mode)
        except Exception as error:
            out = {"mode": mode, "error": f"{type(error).__name__}: {error}"}
        good = "error" not in out and not out["isError"] and a.call[0] in out["tools"]
        good = good and (not a.uri or out.get("read")) and (not a.prompt or out.get("messages"))
        ok = ok and bool(good)
        report["modes"].append(out)
    report["refused_without_token"] = await refused_without_token(a)
    ok = ok and report["refused_without_token"] is not None
    text = json.dumps(report, indent=2)
    if token in text:
        print("the token appears in what the client received", file=sys.stderr)
        ok = False
    print(text)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    anyio.run(main)
