"""List Warden's tools and call one with the official MCP Python SDK (`pip install mcp`).

    python quickstart.py stdio warden mcp examples/support-desk/manifest.json
    python quickstart.py http http://127.0.0.1:8080/mcp WARDEN_TOKEN

Over HTTP the bearer token is read from the environment variable named last.
"""
import asyncio
import os
import sys

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def server(argv):
    if argv[0] == "stdio":
        return StdioServerParameters(command=argv[1], args=argv[2:])
    headers = {"Authorization": f"Bearer {os.environ[argv[2]]}"}
    return streamable_http_client(argv[1], http_client=create_mcp_http_client(headers=headers))


async def main(argv):
    async with Client(server(argv)) as client:
        tools = await client.list_tools()
        print("tools:", [tool.name for tool in tools.tools])
        result = await client.call_tool("search_tickets", {"query": "refund"})
        print("search_tickets:", result.content[0].text)
        return 1 if result.is_error else 0


sys.exit(asyncio.run(main(sys.argv[1:])))
