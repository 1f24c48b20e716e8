#!/usr/bin/env node
// Resources, prompts, progress and log messages through the official TypeScript SDK (the
// client harness's pinned @modelcontextprotocol/sdk, 2025-11-25): lists resource templates
// and prompts, reads URI, gets the prompt, sets the log level to debug and calls the tool
// with a progress callback. Prints one JSON document; exit 1 unless each was received.
//
//   NODE_PATH=$MCP_CLIENTS_DIR/node/node_modules node surface.mjs URI PROMPT PROMPT_ARGS TOOL TOOL_ARGS -- CMD ARGS...
import { createRequire } from 'node:module';

const require = createRequire(process.env.NODE_PATH + '/');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport, getDefaultEnvironment } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { LoggingMessageNotificationSchema } = require('@modelcontextprotocol/sdk/types.js');

async function main() {
  const argv = process.argv.slice(2);
  const sep = argv.indexOf('--');
  const [uri, prompt, promptArgs, tool, toolArgs] = argv.slice(0, sep);
  const cmd = argv.slice(sep + 1);
  const out = { progress: [], log: [] };
  const transport = new StdioClientTransport({ command: cmd[0], args: cmd.slice(1), env: getDefaultEnvironment(), stderr: 'ignore' });
  const client = new Client({ name: 'ts-surface-client', version: '1.0.0' });
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => out.log.push(n.params.data));
  try {
    await client.connect(transport);
    out.templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
    out.read = (await client.readResource({ uri })).contents.map((c) => c.text);
    out.prompts = (await client.listPrompts()).prompts.map((p) => p.name);
    const got = await client.getPrompt({ name: prompt, arguments: JSON.parse(promptArgs) });
    out.messages = got.messages.map((m) => m.content.text);
    await client.setLoggingLevel('debug');
    const result = await client.callTool({ name: tool, arguments: JSON.parse(toolArgs) }, undefined, {
      onprogress: (p) => out.progress.push(p.message),
    });
    out.isError = result.isError === true;
    out.ok = out.read.length > 0 && out.messages.length > 0 && out.progress.length > 0 && out.log.length > 0 && !out.isError;
  } catch (e) {
    out.ok = false;
    out.error = String(e?.message ?? e);
  } finally {
    await client.close().catch(() => {});
  }
  process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  process.exitCode = out.ok ? 0 : 1;
}

main();
