#!/usr/bin/env python3
"""The official Python SDK (the client harness's pinned `mcp`) drives a durable task over
Streamable HTTP, with a kill -9 of the server in between:

    python task_http.py --warden BIN --manifest tests/fixtures/tasks/manifest.json [--log FILE]

The SDK has no tasks of its own; it has the extension seam SEP-2663 clients are built on
(`ClientExtension` with a `ResultClaim` for `resultType: "task"`), and this script is that
extension: it declares `io.modelcontextprotocol/tasks`, and when a `tools/call` answers with a
task it polls `tasks/get`, hands each input request to the SDK's own elicitation callback,
answers with `tasks/update`, and returns the task's inlined result as the call's result.

The script starts `warden serve-http` on a loopback port, calls `confirm` (a tool whose run
asks before it deletes), and the first time the task says `input_required` it kills the server
with SIGKILL and starts it again on the same port. The task is the run, and the run is
durable: polling goes on against the new process, the question is asked and answered, and the
call ends with the run's result. Prints one JSON document (what was heard, in order, with ms
since the call); exit 1 unless the task was created, survived the kill, asked once and
completed with the answer.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import shutil
import time
from typing import Any, ClassVar, Literal

import anyio
from mcp import Client, types
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Result
from pydantic import TypeAdapter

TASKS = "io.modelcontextprotocol/tasks"
ANY = TypeAdapter(dict[str, Any])


class TaskParams(types.RequestParams):
    """The params of `tasks/get` and `tasks/update` (the SDK's Request keeps only typed fields)."""

    task_id: str
    input_responses: dict[str, Any] | None = None


class TaskRequest(types.Request):
    """A tasks/* request; its task id is mirrored in the `Mcp-Name` header, as the 2026-07-28
    HTTP transport asks of a request that names something."""

    method: str
    params: TaskParams
    name_param: ClassVar[str | None] = "taskId"


class CreateTaskResult(Result):
    """SEP-2663's answer to a call made a task: the task's id, not yet its result."""

    result_type: Literal["task"]
    task_id: str
    status: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class Heard(list):
    """What the client heard, each entry stamped with ms since the call was sent."""

    def __init__(self):
        super().__init__()
        self.started = time.monotonic()

    def append(self, entry):
        super().append(dict(entry, at_ms=round((time.monotonic() - self.started) * 1000, 1)))


class Server:
    """`warden serve-http` on a fixed loopback port, so a restarted process has the same URL."""

    def __init__(self, warden, manifest):
        self.warden, self.manifest = warden, manifest
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process = None

    def start(self):
        self.process = subprocess.Popen(
            [self.warden, "serve-http", self.manifest, "--listen", f"127.0.0.1:{self.port}"],
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit(f"warden serve-http did not listen on {self.port}")

    def kill_9(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait()


class Tasks(ClientExtension):
    """The tasks extension, client side: a claimed `task` result is polled to its end."""

    identifier = TASKS

    def __init__(self, heard, on_first_input_required):
        self.heard = heard
        self.on_first_input_required = on_first_input_required

    def claims(self):
        return (ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.resolve),)

    async def resolve(self, created: CreateTaskResult, ctx) -> types.CallToolResult:
        self.heard.append({"what": "task created", "taskId": created.task_id, "status": created.status})
        interval = (created.poll_interval_ms or 500) / 1000
        killed = False
        while True:
            status = await self.request(ctx, "tasks/get", TaskParams(task_id=created.task_id))
            if not self.heard or self.heard[-1].get("status") != status["status"]:
                self.heard.append({"what": "tasks/get", "status": status["status"]})
            if status["status"] == "completed":
                return types.CallToolResult.model_validate(status["result"])
            if status["status"] in ("failed", "cancelled"):
                raise SystemExit(f"the task ended {status['status']}: {json.dumps(status)}")
            if status["status"] == "input_required":
                if not killed:
                    killed = True
                    await anyio.to_thread.run_sync(self.on_first_input_required)
                    self.heard.append({"what": "server killed with SIGKILL and started again"})
                    continue
                await self.answer(ctx, created.task_id, status["inputRequests"])
            await anyio.sleep(interval)

    async def answer(self, ctx, task_id, input_requests):
        responses = {}
        for key, request in input_requests.items():
            parsed = TypeAdapter(types.InputRequest).validate_python(request)
            context = ClientRequestContext(session=ctx.session, request_id=key)
            response = await ctx.session.dispatch_input_request(context, parsed)
            responses[key] = response.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self.request(ctx, "tasks/update", TaskParams(task_id=task_id, input_responses=responses))
        self.heard.append({"what": "tasks/update", "keys": sorted(responses)})

    @staticmethod
    async def request(ctx, method, params):
        # Transport errors while the server restarts are retried: the task is durable.
        for _ in range(100):
            try:
                return await ctx.session.send_request(TaskRequest(method=method, params=params), ANY)
            except Exception as error:  # the SDK raises its own and httpx's errors here
                last = error
                await anyio.sleep(0.1)
        raise SystemExit(f"{method} kept failing: {last!r}")


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--warden", required=True)
    p.add_argument("--manifest", required=True)
    p.add_argument("--log")
    a = p.parse_args()
    scratch = tempfile.mkdtemp(prefix="warden-task-")
    folder = os.path.dirname(os.path.abspath(a.manifest))
    for name in os.listdir(folder):
        if name != "journals":
            shutil.copy(os.path.join(folder, name), scratch)
    server = Server(a.warden, os.path.join(scratch, os.path.basename(a.manifest)))
    heard, asked = Heard(), []

    def restart():
        server.kill_9()
        server.start()

    async def on_elicitation(context, params):
        asked.append(params.message)
        heard.append({"what": "elicitation (the SDK's callback)", "message": params.message})
        return types.ElicitResult(action="accept", content={"confirm": True})

    server.start()
    try:
        client = Client(
            streamable_http_client(server.url),
            mode="auto",
            elicitation_callback=on_elicitation,
            extensions=[Tasks(heard, restart)],
        )
        async with client:
            heard.started = time.monotonic()
            result = await client.call_tool("confirm", {"filename": "notes.txt"})
            version = client.protocol_version
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    order = [entry["what"] for entry in heard]
    structured = result.structured_content or {}
    ok = (
        version == "2026-07-28"
        and order[0] == "task created"
        and "server killed with SIGKILL and started again" in order
        and len(asked) == 1
        and structured.get("result") == "deleted notes.txt"
        and not result.is_error
    )
    out = {"protocolVersion": version, "order": order, "heard": heard, "result": structured, "ok": ok}
    if a.log:
        with open(a.log, "w") as log:
            for entry in heard:
                log.write(json.dumps(entry) + "\n")
    print(json.dumps(out, indent=2))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    anyio.run(main)
