#!/usr/bin/env node
// The official TypeScript SDK (the client harness's pinned @modelcontextprotocol/sdk,
// 2025-11-25) hears a call live over Streamable HTTP: in a session it calls a tool whose run
// asks the user (`test_elicitation` of conformance/manifest.json) and records when each
// message arrived: the run's progress, then the elicitation request (the run cannot end before
// the client answers it), then the answer. Prints one JSON document; exit 1 unless that order held.
//
//   NODE_PATH=$MCP_CLIENTS_DIR/node/node_modules node live_http.mjs URL
import { createRequire } from 'node:module';

const require = createRequire(process.env.NODE_PATH + '/');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { ElicitRequestSchema } = require('@modelcontextprotocol/sdk/types.js');

async function main() {
  const [url] = process.argv.slice(2);
  const heard = [];
  let started = performance.now();
  const now = () => Math.round((performance.now() - started) * 10) / 10;
  const client = new Client({ name: 'ts-live-client', version: '1.0.0' }, { capabilities: { elicitation: {} } });
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    heard.push({ at_ms: now(), what: 'elicitation/create', message: request.params.message });
    return { action: 'accept', content: { username: 'ada', email: 'ada@example.com' } };
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  started = performance.now();
  const result = await client.callTool({ name: 'test_elicitation', arguments: { message: 'Who are you?' } }, undefined, {
    onprogress: (progress) => heard.push({ at_ms: now(), what: 'progress', message: progress.message }),
  });
  const text = result.content.map((c) => c.text).join(' ');
  heard.push({ at_ms: now(), what: 'answer', text });
  await client.close();
  const order = heard.map((h) => h.what);
  const ok = order[order.length - 1] === 'answer' && order.includes('progress') && order.includes('elicitation/create')
    && order.indexOf('progress') < order.indexOf('elicitation/create') && text.includes('ada@example.com');
  console.log(JSON.stringify({ order, heard, ok }, null, 2));
  process.exit(ok ? 0 : 1);
}

main().catch((error) => { console.error(error); process.exit(1); });
