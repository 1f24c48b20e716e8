// List Warden's tools and call one with the official MCP TypeScript SDK
// (`npm install @modelcontextprotocol/sdk`).
//
//   node quickstart.mjs stdio warden mcp examples/support-desk/manifest.json
//   node quickstart.mjs http http://127.0.0.1:8080/mcp WARDEN_TOKEN
//
// Over HTTP the bearer token is read from the environment variable named last.
import { createRequire } from 'node:module';

const require = createRequire(process.env.NODE_PATH ? process.env.NODE_PATH + '/' : import.meta.url);
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');

const [kind, ...rest] = process.argv.slice(2);
const transport = kind === 'stdio'
  ? new StdioClientTransport({ command: rest[0], args: rest.slice(1) })
  : new StreamableHTTPClientTransport(new URL(rest[0]), {
    requestInit: { headers: { Authorization: `Bearer ${process.env[rest[1]]}` } },
  });
const client = new Client({ name: 'warden-quickstart', version: '1.0.0' });
await client.connect(transport);
console.log('tools:', (await client.listTools()).tools.map((tool) => tool.name));
const result = await client.callTool({ name: 'search_tickets', arguments: { query: 'refund' } });
console.log('search_tickets:', result.content[0].text);
await client.close();
process.exit(result.isError ? 1 : 0);
