"""AIO's MCP REST view (``client.mcp``) through AIO's own SDK, unchanged, against sandboxd in
the image: the server list, the tool list in MCP's shape (AIO's tool names among ours), tool
calls with real effects, and unknown servers and tools named in a 404."""

import json

import pytest
from agent_sandbox.core.api_error import ApiError
from agent_sandbox.types import (
    CallToolResult,
    ListToolsResult,
    ResponseCallToolResultModel,
    ResponseListStr,
    ResponseListToolsResultModel,
)


def test_servers_and_tools_parse_into_the_sdk_models(client):
    servers = client.mcp.list_mcp_servers()
    assert isinstance(servers, ResponseListStr)
    assert servers.data == ["sandbox"]
    listed = client.mcp.list_mcp_tools("sandbox")
    assert isinstance(listed, ResponseListToolsResultModel)
    assert isinstance(listed.data, ListToolsResult)
    names = {tool.name for tool in listed.data.tools}
    for name in [
        "sandbox_execute_bash",
        "sandbox_str_replace_editor",
        "sandbox_get_context",
        "browser_get_info",
        "browser_gui_screenshot",
        "browser_gui_execute_action",
        "shell_exec",
        "file_read",
        "browser_navigate",
    ]:
        assert name in names, name
    for tool in listed.data.tools:
        assert tool.input_schema.get("type") == "object", tool.name


def test_aio_bash_tool_runs_in_a_shared_session(client):
    first = client.mcp.execute_mcp_tool("sandbox", "sandbox_execute_bash", request={"cmd": "cd /tmp && export MCPX=42"})
    assert isinstance(first, ResponseCallToolResultModel)
    assert isinstance(first.data, CallToolResult)
    assert first.data.is_error is False
    second = client.mcp.execute_mcp_tool("sandbox", "sandbox_execute_bash", request={"cmd": "echo $MCPX; pwd"})
    # AIO's answer: JSON with the output and the exit code.
    answer = json.loads(second.data.content[0].text)
    assert answer["output"] == "42\n/tmp" and answer["exit_code"] == 0, answer
    fresh = client.mcp.execute_mcp_tool(
        "sandbox", "sandbox_execute_bash", request={"cmd": "echo [$MCPX]", "new_session": True}
    )
    assert json.loads(fresh.data.content[0].text)["output"] == "[]"


def test_gui_tools_take_a_screenshot_and_move_the_pointer(client):
    shot = client.mcp.execute_mcp_tool("sandbox", "browser_gui_screenshot", request={"max_width": 320})
    assert shot.data.is_error is False
    kinds = [block.type for block in shot.data.content]
    assert kinds == ["image", "text"]
    moved = client.mcp.execute_mcp_tool(
        "sandbox", "browser_gui_execute_action", request={"action_type": "MOVE_TO", "x": 100, "y": 120}
    )
    assert moved.data.is_error is False, moved
    where = client.mcp.execute_mcp_tool(
        "sandbox", "browser_gui_execute_action", request={"action_type": "CURSOR_POSITION"}
    )
    assert '"x":100' in where.data.content[0].text.replace(" ", "")


def test_a_tool_that_fails_says_why_and_unknown_names_are_404(client):
    refused = client.mcp.execute_mcp_tool("sandbox", "file_read", request={"file": "/etc/shadow"})
    assert refused.success is False
    assert refused.data.is_error is True
    assert "/etc/shadow" in refused.message
    with pytest.raises(ApiError) as unknown:
        client.mcp.list_mcp_tools("browser")
    assert unknown.value.status_code == 404 and '"browser"' in unknown.value.body["message"]
    with pytest.raises(ApiError) as unknown:
        client.mcp.execute_mcp_tool("sandbox", "no_such_tool", request={"code": "1"})
    assert unknown.value.status_code == 404 and "no_such_tool" in unknown.value.body["message"]


def test_arguments_that_do_not_fit_are_a_422_naming_the_field(sandbox):
    status, answer = sandbox.request("POST", "/v1/mcp/sandbox/tools/sandbox_execute_bash", {"cwd": "/tmp"})
    assert status == 422, answer
    assert answer["detail"][0]["loc"] == ["body", "cmd"]
