#!/usr/bin/env python3
"""Validates every server-to-client message of the client harness's transcripts
(`$MCP_CLIENTS_DIR/out/*.jsonl`, written by mcp_tee.py) against the official schema of the
era its request was sent under. A stdout line that is not a JSON message fails too.

    validate_transcripts.py OUT_DIR SCHEMA_DIR
"""
import json
import pathlib
import sys

import jsonschema

RESULTS = {
    "initialize": "InitializeResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "server/discover": "DiscoverResult",
    "ping": "EmptyResult",
    "logging/setLevel": "EmptyResult",
    "resources/list": "ListResourcesResult",
    "resources/templates/list": "ListResourceTemplatesResult",
    "resources/read": "ReadResourceResult",
    "prompts/list": "ListPromptsResult",
    "prompts/get": "GetPromptResult",
    "completion/complete": "CompleteResult",
}
ERAS = {"legacy": "2025-11-25", "modern": "2026-07-28"}


def validators(schema_dir):
    out = {}
    for era, version in ERAS.items():
        root = json.loads((schema_dir / version / "schema.json").read_text())
        def make(definition, root=root):
            schema = dict(root)
            schema["$ref"] = f"#/$defs/{definition}"
            return jsonschema.Draft202012Validator(schema)
        names = ["JSONRPCMessage", *RESULTS.values()] + (["InputRequiredResult"] if era == "modern" else [])
        out[era] = {name: make(name) for name in names}
    return out


def main():
    out_dir, schema_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    checks = validators(schema_dir)
    failures, checked = [], 0
    for transcript in sorted(out_dir.glob("*.jsonl")):
        sent = {}
        for number, line in enumerate(transcript.read_text().splitlines(), 1):
            entry = json.loads(line)
            where = f"{transcript.name}:{number}"
            if entry.get("dir") == "c2s" and isinstance(entry.get("msg"), dict) and "id" in entry["msg"]:
                message = entry["msg"]
                meta = (message.get("params") or {}).get("_meta") or {}
                era = "modern" if "io.modelcontextprotocol/protocolVersion" in meta else "legacy"
                sent[json.dumps(message["id"])] = (era, message.get("method"))
            if entry.get("dir") != "s2c":
                continue
            message = entry.get("msg")
            if not isinstance(message, dict):
                failures.append(f"{where}: stdout carried something that is not a JSON message: {entry}")
                continue
            era_method = sent.get(json.dumps(message.get("id"))) if "id" in message else None
            eras = [era_method[0]] if era_method else list(ERAS)
            for era in eras:
                checked += 1
                errors = [e.message for e in checks[era]["JSONRPCMessage"].iter_errors(message)]
                definition = RESULTS.get(era_method[1]) if era_method else None
                # A 2026-07-28 call, read or prompt may first answer that it needs input.
                if definition and era == "modern" and (message.get("result") or {}).get("resultType") == "input_required":
                    definition = "InputRequiredResult"
                if definition and "result" in message:
                    errors += [e.message for e in checks[era][definition].iter_errors(message["result"])]
                if errors:
                    failures.append(f"{where}: {era} schema rejects {json.dumps(message)[:300]}: {errors[:3]}")
    for failure in failures:
        print(failure)
    print(f"{checked} message checks, {len(failures)} failures")
    if checked == 0:
        print("no transcripts found: the client run wrote nothing")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
