"""Every MCP tool under AIO Sandbox's name (its 33), called with the official ``mcp`` client over
sandboxd's /mcp, each call's effect checked another way: in the container's file system, in
the page through the REST API, or in the answer's image (issue 27).

The pages are served inside the sandbox (the session's ``browsing`` sandbox, whose browser may
open loopback pages).
"""

import asyncio
import base64
import json
import struct
import time

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

AIO_TOOLS = {
    "sandbox_get_context", "sandbox_get_packages", "sandbox_execute_code", "sandbox_execute_bash",
    "sandbox_file_operations", "sandbox_str_replace_editor", "sandbox_convert_to_markdown",
    "sandbox_get_browser_info", "sandbox_browser_screenshot", "sandbox_browser_execute_action",
    "browser_navigate", "browser_go_back", "browser_go_forward", "browser_close",
    "browser_close_tab", "browser_press_key", "browser_get_markdown", "browser_get_text",
    "browser_read_links", "browser_get_download_list", "browser_click", "browser_hover",
    "browser_select", "browser_form_input_fill", "browser_get_clickable_elements",
    "browser_scroll", "browser_evaluate", "browser_vision_screen_capture",
    "browser_vision_screen_click", "browser_new_tab", "browser_tab_list", "browser_switch_tab",
    "browser_screenshot",
}

PAGE = """<!doctype html>
<html><head><title>MCP page</title>
<style>#big { position: fixed; right: 0; bottom: 0; width: 40vw; height: 40vh; }</style></head>
<body>
<h1>MCP heading</h1>
<p>Some text for the agent.</p>
<a id="next" href="/mcp-second.html">the second page</a>
<a id="dl" href="/mcp-report.csv" download>the report</a>
<input id="name" type="text" value="Ada">
<select id="color"><option value="r">Red</option><option value="g">Green</option></select>
<button id="go" onclick="window.clicked = (window.clicked || 0) + 1">Go</button>
<div id="hover" onmouseover="window.hovered = true" style="width: 200px; height: 40px">hover me</div>
<button id="big" onclick="window.bigClicked = true">Big</button>
<div style="height: 4000px"></div>
<p>The end.</p>
</body></html>
"""
SECOND = "<!doctype html><html><head><title>Second</title></head><body><p>Second page.</p></body></html>"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def box(browsing):
    for name, content in [("mcp.html", PAGE), ("mcp-second.html", SECOND), ("mcp-report.csv", "a,b\n1,2\n")]:
        status, answer = browsing.request("POST", "/v1/file/write", {"file": f"/tmp/site/{name}", "content": content})
        assert status == 200, answer
    browsing.page = f"{browsing.site}/mcp.html"
    browsing.second = f"{browsing.site}/mcp-second.html"
    return browsing


def run(box, body):
    async def main():
        async with create_mcp_http_client(headers=box.headers()) as http:
            async with streamable_http_client(box.base_url + "/mcp", http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await body(Tools(session))

    return asyncio.run(main())


class Tools:
    """Calls tools and splits their answers into text and images."""

    def __init__(self, session):
        self.session = session

    async def call(self, name, arguments=None, *, error=False):
        result = await self.session.call_tool(name, arguments or {})
        text = "".join(c.text for c in result.content if c.type == "text")
        assert result.is_error == error, (name, arguments, text)
        return text

    async def json(self, name, arguments=None, *, error=False):
        return json.loads(await self.call(name, arguments, error=error))

    async def image(self, name, arguments=None):
        result = await self.session.call_tool(name, arguments or {})
        assert not result.is_error, (name, result.content)
        images = [c for c in result.content if c.type == "image"]
        assert len(images) == 1 and images[0].mime_type == "image/png", result.content
        text = "".join(c.text for c in result.content if c.type == "text")
        return base64.b64decode(images[0].data), text


def page_value(box, expression):
    status, answer = box.request("POST", "/v1/browser/page/evaluate", {"expression": expression})
    assert status == 200 and answer["success"], answer
    return answer["data"]


def tabs(box):
    status, answer = box.request("GET", "/v1/browser/tabs")
    assert status == 200, answer
    return answer["data"]


def test_every_aio_tool_is_listed(box):
    async def body(tools):
        return {tool.name for tool in (await tools.session.list_tools()).tools}

    listed = run(box, body)
    assert AIO_TOOLS <= listed, sorted(AIO_TOOLS - listed)


def test_the_sandbox_tools(box):
    async def body(tools):
        context = await tools.json("sandbox_get_context")
        assert "/home/agent" in json.dumps(context)

        python = await tools.json("sandbox_get_packages", {"language": "python"})
        assert "markdownify" in {p["name"].lower() for p in python}
        both = await tools.json("sandbox_get_packages")
        assert set(both) == {"python", "nodejs"}
        await tools.call("sandbox_get_packages", {"language": "cobol"}, error=True)

        ran = await tools.json("sandbox_execute_code", {"code": "print(6 * 7)"})
        assert ran["stdout"] == "42\n" and ran["status"] == "ok", ran
        ran = await tools.json("sandbox_execute_code", {"code": "console.log(6 * 7)", "language": "javascript"})
        assert ran["stdout"].strip() == "42", ran

        bash = await tools.json("sandbox_execute_bash", {"cmd": "echo from-bash > /tmp/mcp-bash.txt; echo done"})
        assert bash["exit_code"] == 0 and "done" in bash["output"], bash
        assert box.exec("cat", "/tmp/mcp-bash.txt") == "from-bash"

        ops = "/tmp/mcp-ops/a.txt"
        written = await tools.json("sandbox_file_operations", {"action": "write", "path": ops, "content": "alpha\nbeta\n"})
        assert written["success"] is True and written["action"] == "write", written
        assert box.exec("cat", ops) == "alpha\nbeta"
        read = await tools.json("sandbox_file_operations", {"action": "read", "path": ops})
        assert read["content"] == "alpha\nbeta\n", read
        listed = await tools.json("sandbox_file_operations", {"action": "list", "path": "/tmp/mcp-ops"})
        assert "a.txt" in json.dumps(listed)
        found = await tools.json("sandbox_file_operations", {"action": "find", "path": "/tmp/mcp-ops", "pattern": "*.txt"})
        assert any(f.endswith("a.txt") for f in found["files"]), found
        searched = await tools.json("sandbox_file_operations", {"action": "search", "path": "/tmp/mcp-ops", "pattern": "bet+"})
        assert "beta" in json.dumps(searched), searched
        replaced = await tools.json("sandbox_file_operations", {"action": "replace", "path": ops, "old_str": "beta", "new_str": "gamma"})
        assert replaced["success"] is True, replaced
        assert box.exec("cat", ops) == "alpha\ngamma"
        refused = await tools.json("sandbox_file_operations", {"action": "read", "path": "/etc/shadow"}, error=True)
        assert refused["success"] is False and "outside" in refused["error"], refused
        unknown = await tools.json("sandbox_file_operations", {"action": "shred", "path": ops}, error=True)
        assert "shred" in unknown["error"], unknown
        assert box.exec("cat", ops) == "alpha\ngamma"

        viewed = await tools.call("sandbox_str_replace_editor", {"command": "view", "path": ops})
        assert "gamma" in viewed
        markdown = await tools.call("sandbox_convert_to_markdown", {"uri": "data:text/html,<h1>Title</h1><p>Body</p>"})
        assert "# Title" in markdown and "Body" in markdown

        info = await tools.json("sandbox_get_browser_info")
        assert "/cdp" in info["cdp_url"], info

        shot, meta = await tools.image("sandbox_browser_screenshot")
        width, height = png_size(shot)
        assert width >= 640 and height >= 480 and "screenshot_id" in meta
        moved = await tools.json("sandbox_browser_execute_action", {"action_type": "MOVE_TO", "x": 101, "y": 123})
        assert moved["cursor"]["x"] == 101 and moved["cursor"]["y"] == 123, moved

    run(box, body)


def test_the_browser_tools(box):
    async def body(tools):
        await tools.call("browser_navigate", {"url": box.page})
        assert page_value(box, "document.title") == "MCP page"
        assert "MCP heading" in await tools.call("browser_get_text")
        assert "# MCP heading" in await tools.call("browser_get_markdown")
        links = await tools.json("browser_read_links")
        assert box.second in [link["href"] for link in links], links

        elements = await tools.call("browser_get_clickable_elements")
        go = next(line for line in elements.splitlines() if ">Go<" in line)
        index = int(go[1:go.index("]")])
        await tools.call("browser_click", {"index": index})
        assert page_value(box, "window.clicked") == 1
        await tools.call("browser_hover", {"selector": "#hover"})
        assert page_value(box, "window.hovered") is True
        await tools.call("browser_form_input_fill", {"selector": "#name", "value": " Lovelace"})
        assert page_value(box, "document.querySelector('#name').value") == "Ada Lovelace"
        await tools.call("browser_form_input_fill", {"selector": "#name", "value": "Grace", "clear": True})
        assert page_value(box, "document.querySelector('#name').value") == "Grace"
        await tools.call("browser_click", {"selector": "#name"})
        await tools.call("browser_press_key", {"key": "End"})
        await tools.call("browser_press_key", {"key": "Backspace"})
        assert page_value(box, "document.querySelector('#name').value") == "Grac"
        await tools.call("browser_select", {"selector": "#color", "value": "g"})
        assert page_value(box, "document.querySelector('#color').value") == "g"
        assert await tools.json("browser_evaluate", {"script": "6 * 7"}) == 42
        await tools.call("browser_evaluate", {"script": "nope()"}, error=True)

        await tools.call("browser_scroll", {"amount": 500})
        assert page_value(box, "window.scrollY") == 500
        await tools.call("browser_scroll")
        assert page_value(box, "window.scrollY + window.innerHeight") >= page_value(box, "document.body.scrollHeight") - 2

        shot, meta = await tools.image("browser_vision_screen_capture")
        viewport = json.loads(meta)
        assert png_size(shot) == (viewport["viewport_width"], viewport["viewport_height"])
        await tools.call("browser_vision_screen_click", {"x": 800, "y": 800, "factors": [1000, 1000]})
        assert page_value(box, "window.bigClicked") is True
        await tools.call("browser_vision_screen_click", {"x": 1, "y": 1, "factors": [0, 1]}, error=True)

        button, _ = await tools.image("browser_screenshot", {"selector": "#go", "highlight": True})
        width, height = png_size(button)
        assert 10 <= width <= 200 and 10 <= height <= 80, (width, height)
        assert page_value(box, "document.querySelector('#go').style.outline") == ""
        view, _ = await tools.image("browser_screenshot", {"name": "view"})
        assert png_size(view) == png_size(shot)
        corner, meta = await tools.image("browser_screenshot", {"width": 300, "height": 200})
        assert png_size(corner) == (300, 200) and json.loads(meta)["width"] == 300
        whole, _ = await tools.image("browser_screenshot", {"fullPage": True})
        assert png_size(whole)[1] > 4000

        await tools.call("browser_click", {"selector": "#dl"})
        deadline = time.monotonic() + 30
        while True:
            downloads = await tools.json("browser_get_download_list")
            if any(d["name"] == "mcp-report.csv" for d in downloads):
                break
            assert time.monotonic() < deadline, downloads
            await asyncio.sleep(0.3)
        assert box.exec("cat", "/home/agent/Downloads/mcp-report.csv") == "a,b\n1,2"

        await tools.call("browser_navigate", {"url": box.second})
        await tools.call("browser_go_back")
        assert page_value(box, "document.title") == "MCP page"
        await tools.call("browser_go_forward")
        assert page_value(box, "document.title") == "Second"

        await tools.call("browser_new_tab", {"url": box.page})
        listed = await tools.json("browser_tab_list")
        assert len(listed) == 2 and listed[1]["active"] and listed[1]["title"] == "MCP page", listed
        await tools.call("browser_switch_tab", {"index": 0})
        assert page_value(box, "document.title") == "Second"
        await tools.call("browser_switch_tab", {"index": 7}, error=True)
        await tools.call("browser_close_tab")
        assert [t["title"] for t in tabs(box)] == ["MCP page"]
        await tools.call("browser_new_tab", {"url": box.second})
        await tools.call("browser_close")
        remaining = tabs(box)
        assert len(remaining) == 1 and remaining[0]["url"] == "about:blank", remaining
        # An empty page's text is an empty text, not "Operation successful": under AIO's name
        # and under sandboxd's own `browser_text`.
        assert page_value(box, "location.href") == "about:blank"
        assert await tools.call("browser_get_text") == ""
        assert await tools.call("browser_text") == ""

    run(box, body)
