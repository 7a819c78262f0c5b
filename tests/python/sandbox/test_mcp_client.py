"""The official ``mcp`` Python client against sandboxd's streamable-HTTP endpoint at /mcp."""

import asyncio
import base64

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def with_session(sandbox, body):
    async with create_mcp_http_client(headers=sandbox.headers()) as http:
        async with streamable_http_client(sandbox.base_url + "/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


def test_tools_are_listed(sandbox):
    async def body(session):
        return [tool.name for tool in (await session.list_tools()).tools]

    names = asyncio.run(with_session(sandbox, body))
    for expected in ["screenshot", "shell_exec", "file_read", "file_write", "desktop_action", "browser_navigate"]:
        assert expected in names, names


def test_screenshot_returns_an_image(sandbox):
    async def body(session):
        return await session.call_tool("screenshot", {})

    result = asyncio.run(with_session(sandbox, body))
    assert not result.is_error
    images = [c for c in result.content if c.type == "image"]
    assert images and images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data)[:8] == b"\x89PNG\r\n\x1a\n"


def test_shell_tool_runs_a_command(sandbox):
    async def body(session):
        return await session.call_tool("shell_exec", {"command": "echo from-mcp; id -un"})

    result = asyncio.run(with_session(sandbox, body))
    assert not result.is_error
    text = "".join(c.text for c in result.content if c.type == "text")
    assert "from-mcp" in text and "agent" in text


def test_an_empty_result_is_an_empty_text(sandbox):
    """An empty file (like an empty page's text) reads as an empty text, not the envelope's
    "Operation successful" (issue 27); a tool that returns nothing still says it was done."""

    async def body(session):
        written = await session.call_tool("file_write", {"file": "/tmp/mcp-empty.txt", "content": ""})
        read = await session.call_tool("file_read", {"file": "/tmp/mcp-empty.txt"})
        return written, read

    written, read = asyncio.run(with_session(sandbox, body))
    assert not written.is_error and not read.is_error
    assert "".join(c.text for c in read.content if c.type == "text") == ""


def test_confinement_applies_to_mcp_too(sandbox):
    async def body(session):
        return await session.call_tool("file_read", {"file": "/etc/shadow"})

    result = asyncio.run(with_session(sandbox, body))
    assert result.is_error
    assert "outside" in "".join(c.text for c in result.content if c.type == "text")


def test_mcp_needs_the_key(sandbox):
    async def body(session):
        return await session.list_tools()

    class NoKey:
        base_url = sandbox.base_url

        @staticmethod
        def headers():
            return {}

    with pytest.raises(Exception):
        asyncio.run(with_session(NoKey, body))
