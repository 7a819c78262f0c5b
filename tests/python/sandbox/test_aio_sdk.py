"""AIO Sandbox's own Python SDK (``agent-sandbox`` from PyPI) against sandboxd, unchanged."""

import struct

from agent_sandbox.browser import Action_Click, Action_MoveTo, Action_Typing, Action_Hotkey


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_context(client):
    context = client.sandbox.get_context()
    assert context.home_dir == "/home/agent"
    assert context.detail.system.user == "agent"
    assert "8080" in context.detail.system.occupied_ports


def test_shell_exec_and_sessions(client):
    result = client.shell.exec_command(command="echo hello; echo oops >&2; exit 3")
    assert result.data.status == "completed"
    assert result.data.exit_code == 3
    assert "hello" in result.data.output and "oops" in result.data.output

    session = client.shell.create_session().data.session_id
    client.shell.exec_command(id=session, command="cd /tmp && export GREETING=hi")
    again = client.shell.exec_command(id=session, command='echo "$PWD $GREETING"')
    assert again.data.output.strip() == "/tmp hi"
    assert session in client.shell.list_sessions().data.sessions


def test_shell_hard_timeout_kills_the_command(client):
    result = client.shell.exec_command(command="sleep 100", hard_timeout=1)
    assert result.data.status == "hard_timeout"


def test_files_round_trip(client):
    path = "/home/agent/workspace/sdk-test.txt"
    client.file.write_file(file=path, content="héllo 世界\nsecond line\n")
    read = client.file.read_file(file=path)
    assert read.data.content == "héllo 世界\nsecond line\n"
    listing = client.file.list_path(path="/home/agent/workspace")
    assert "sdk-test.txt" in [f.name for f in listing.data.files]

    payload = bytes(range(256)) * 64
    uploaded = client.file.upload_file(file=("blob.bin", payload, "application/octet-stream"),
                                       path="/home/agent/workspace/blob.bin")
    assert uploaded.data.file_size == len(payload)
    downloaded = b"".join(client.file.download_file(path="/home/agent/workspace/blob.bin"))
    assert downloaded == payload


def test_files_outside_the_roots_are_refused(client):
    from agent_sandbox.core.api_error import ApiError

    try:
        client.file.read_file(file="/etc/passwd")
    except ApiError as error:
        assert error.status_code == 403
    else:
        raise AssertionError("reading /etc/passwd was allowed")


def test_screenshot_is_a_png_of_the_screen(client):
    with client.browser.with_raw_response.screenshot() as response:
        data = b"".join(response.data)
        headers = response.headers
    assert png_size(data) == (1280, 800)
    assert headers["x-screen-width"] == "1280" and headers["x-screen-height"] == "800"
    assert headers["x-image-width"] == "1280" and headers["x-image-height"] == "800"


def test_actions_move_the_real_pointer(client, sandbox):
    client.browser.execute_action(request=Action_MoveTo(x=321, y=234))
    location = sandbox.exec("xdotool", "getmouselocation", "--shell")
    assert "X=321" in location and "Y=234" in location
    response = client.browser.execute_action(request=Action_Click(x=640, y=700))
    assert response.success
    client.browser.execute_action(request=Action_Hotkey(keys=["ctrl", "l"]))
    client.browser.execute_action(request=Action_Typing(text="about:blank"))


def test_unknown_action_types_are_refused(sandbox):
    status, body = sandbox.request("POST", "/v1/browser/actions", {"action_type": "TELEPORT"})
    assert 400 <= status < 500
    assert "TELEPORT" in body["message"] or "action_type" in body["message"]
