#!/usr/bin/env python3
"""Resources, prompts, progress and log messages through the official Python SDK (the client
harness's pinned `mcp`), in each connect mode, against a stdio server:

    python surface.py --uri URI --prompt NAME JSON --call NAME JSON -- SERVER_CMD [ARGS...]

For each mode (auto: 2026-07-28 through server/discover; legacy: initialize; lowlevel:
ClientSession) it lists resource templates and prompts, reads URI, gets the prompt, and calls
the tool with a progress callback and log messages at debug. Prints one JSON document;
exit 1 unless every mode read contents, got messages, heard progress and log messages.
"""
import argparse
import warnings
import json
import sys

import anyio
from mcp import Client, ClientSession, StdioServerParameters, stdio_client


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def exercise(a, client, out, heard):
    templates = await client.list_resource_templates()
    out["templates"] = [t.uri_template for t in templates.resource_templates]
    read = await client.read_resource(a.uri)
    out["read"] = [c.text for c in read.contents]
    prompts = await client.list_prompts()
    out["prompts"] = [p.name for p in prompts.prompts]
    got = await client.get_prompt(a.prompt[0], json.loads(a.prompt[1]))
    out["messages"] = [m.content.text for m in got.messages]

    async def on_progress(progress, total, message):
        heard["progress"].append(message)

    result = await client.call_tool(a.call[0], json.loads(a.call[1]), progress_callback=on_progress)
    out["isError"] = bool(result.is_error)


async def one_mode(a, params, mode):
    heard = {"progress": [], "log": []}
    out = {"mode": mode}

    async def on_log(params):
        heard["log"].append(params.data)

    if mode == "lowlevel":
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, logging_callback=on_log) as session:
                await session.initialize()
                await session.set_logging_level("debug")
                await exercise(a, session, out, heard)
    else:
        async with Client(params, mode=mode, logging_callback=on_log, log_level="debug") as client:
            out["protocolVersion"] = client.protocol_version
            if mode == "legacy":
                await client.set_logging_level("debug")
            await exercise(a, client, out, heard)
    out.update(heard)
    out["ok"] = bool(out["read"] and out["messages"] and heard["progress"] and heard["log"] and not out["isError"])
    return out


def main() -> int:
    warnings.simplefilter("ignore")  # logging/setLevel is deprecated in 2026-07-28; legacy still uses it
    ap = argparse.ArgumentParser()
    ap.add_argument("--uri", required=True)
    ap.add_argument("--prompt", nargs=2, required=True, metavar=("NAME", "JSON"))
    ap.add_argument("--call", nargs=2, required=True, metavar=("NAME", "JSON"))
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    params = StdioServerParameters(command=cmd[0], args=cmd[1:])
    results = []
    for mode in ["auto", "legacy", "lowlevel"]:
        try:
            results.append(anyio.run(one_mode, a, params, mode))
        except BaseException as e:  # noqa: BLE001 - report every failure
            results.append({"mode": mode, "ok": False, "error": repr(e)})
    print(json.dumps(results, indent=2))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
