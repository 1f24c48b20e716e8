#!/usr/bin/env node
// The official TypeScript SDK (the client harness's pinned @modelcontextprotocol/sdk,
// 2025-11-25) against `warden serve-http`, over Streamable HTTP with a bearer token: lists
// the tools, calls one, reads URI and gets the prompt, ends its session; then checks that a
// client without the token is refused. Prints one JSON document; exit 1 unless all held.
//
//   NODE_PATH=$MCP_CLIENTS_DIR/node/node_modules node over_http.mjs URL TOKEN_ENV URI PROMPT PROMPT_ARGS TOOL TOOL_ARGS
import { createRequire } from 'node:module';

const require = createRequire(process.env.NODE_PATH + '/');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');

function transport(url, token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  return new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
}

async function main() {
  const [url, tokenEnv, uri, prompt, promptArgs, tool, toolArgs] = process.argv.slice(2);
  const token = process.env[tokenEnv];
  const out = {};
  try {
    const client = new Client({ name: 'ts-http-client', version: '1.0.0' });
    const connected = transport(url, token);
    await client.connect(connected);
    out.session = Boolean(connected.sessionId);
    out.tools = (await client.listTools()).tools.map((t) => t.name);
    const result = await client.callTool({ name: tool, arguments: JSON.parse(toolArgs) });
    out.isError = result.isError === true;
    out.read = (await client.readResource({ uri })).contents.map((c) => c.text);
    const got = await client.getPrompt({ name: prompt, arguments: JSON.parse(promptArgs) });
    out.messages = got.messages.map((m) => m.content.text);
    await connected.terminateSession();
    await client.close();
    try {
      await new Client({ name: 'ts-http-client', version: '1.0.0' }).connect(transport(url, undefined));
      out.refusedWithoutToken = false;
    } catch (e) {
      out.refusedWithoutToken = true;
    }
    out.ok = out.session && out.tools.includes(tool) && !out.isError && out.read.length > 0 &&
      out.messages.length > 0 && out.refusedWithoutToken;
  } catch (e) {
    out.ok = false;
    out.error = String(e?.message ?? e);
  }
  const text = JSON.stringify(out, null, 2);
  if (token && text.includes(token)) {
    out.ok = false;
    console.error('the token appears in what the client received');
  }
  console.log(text);
  process.exit(out.ok ? 0 : 1);
}

main();
