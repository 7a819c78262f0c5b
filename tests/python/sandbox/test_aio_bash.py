"""AIO's bash pipe API (``client.bash``) through AIO's own SDK, unchanged, against sandboxd in
the image: every method parses into the SDK's typed models and has its effect."""

import time

import pytest
from agent_sandbox.core.api_error import ApiError
from agent_sandbox.types import (
    BashExecResult,
    BashOutputResult,
    BashSessionInfo,
    HttpValidationError,
    ResponseBashExecResult,
    ResponseBashOutputResult,
    ResponseBashSessionInfo,
    ResponseListBashSessionInfo,
)


def test_exec_separates_stdout_and_stderr(client):
    answer = client.bash.exec(command="echo out; echo err >&2; exit 3")
    assert isinstance(answer, ResponseBashExecResult)
    result = answer.data
    assert isinstance(result, BashExecResult)
    assert result.status == "completed"
    assert result.exit_code == 3
    assert (result.stdout, result.stderr) == ("out\n", "err\n")
    assert (result.offset, result.stderr_offset) == (4, 4)
    assert result.command_id and result.session_id


def test_async_output_reads_incrementally_with_offsets(client):
    started = client.bash.exec(
        command="echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three",
        async_mode=True,
    ).data
    assert started.status == "running"
    session, offset, stderr_offset = started.session_id, 0, 0
    stdout, stderr = "", ""
    for _ in range(50):
        answer = client.bash.output(
            session_id=session, offset=offset, stderr_offset=stderr_offset, wait=True, wait_timeout=10
        )
        assert isinstance(answer, ResponseBashOutputResult)
        read = answer.data
        assert isinstance(read, BashOutputResult)
        stdout += read.stdout
        stderr += read.stderr
        offset, stderr_offset = read.offset, read.stderr_offset
        assert read.command.command_id == started.command_id
        if read.command.status == "completed":
            break
    assert (stdout, stderr) == ("one\nthree\n", "two\n")


def test_sessions_keep_state_env_is_per_command_and_close(client):
    created = client.bash.create_session(session_id="sdk-bash", exec_dir="/tmp")
    assert isinstance(created, ResponseBashSessionInfo)
    assert isinstance(created.data, BashSessionInfo)
    assert created.data.working_dir == "/tmp"
    client.bash.exec(session_id="sdk-bash", command="export KEEP=kept; cd /home/agent")
    once = client.bash.exec(session_id="sdk-bash", command="echo $KEEP $ONCE; pwd", env={"ONCE": "only"})
    assert once.data.stdout == "kept only\n/home/agent\n"
    after = client.bash.exec(session_id="sdk-bash", command="echo ${ONCE-gone}")
    assert after.data.stdout == "gone\n"

    listed = client.bash.sessions()
    assert isinstance(listed, ResponseListBashSessionInfo)
    mine = [s for s in listed.data if s.session_id == "sdk-bash"]
    assert len(mine) == 1 and mine[0].command_count == 3 and mine[0].status == "ready"

    assert client.bash.close_session("sdk-bash").success
    assert "sdk-bash" not in [s.session_id for s in client.bash.sessions().data]
    with pytest.raises(ApiError) as error:
        client.bash.output(session_id="sdk-bash")
    assert error.value.status_code == 404


def test_write_kill_and_hard_timeout(client):
    running = client.bash.exec(command="read line; echo got:$line; sleep 1000", timeout=0.5).data
    assert running.status == "running"
    assert client.bash.write(session_id=running.session_id, input="hello\n").success
    read = client.bash.output(session_id=running.session_id, wait=True, wait_timeout=10).data
    assert read.stdout == "got:hello\n"
    killed = client.bash.kill(session_id=running.session_id, signal="SIGKILL")
    assert killed.success and killed.data["status"] == "killed"
    later = client.bash.output(session_id=running.session_id).data
    assert later.command.status == "killed"

    start = time.monotonic()
    timed_out = client.bash.exec(command="sleep 1000 & sleep 1000", hard_timeout=1).data
    assert timed_out.status == "timed_out"
    assert time.monotonic() - start < 20
    leftovers = client.bash.exec(command="pgrep -x sleep || echo none").data
    assert leftovers.stdout == "none\n"


def test_bad_input_names_the_field(client):
    with pytest.raises(ApiError) as error:
        client.bash.exec(command="true", env={"1BAD": "x"})
    assert error.value.status_code == 422
    # The SDK parses the 422 into its own typed model.
    assert isinstance(error.value.body, HttpValidationError)
    assert error.value.body.detail[0].loc == ["body", "env", "1BAD"]
    with pytest.raises(ApiError) as error:
        client.bash.kill(session_id="nobody-here", signal="SIGHUP")
    assert error.value.status_code == 422
    assert error.value.body.detail[0].loc == ["body", "signal"]


def _not_supported(call, *words):
    with pytest.raises(ApiError) as error:
        call()
    assert error.value.status_code == 501, error.value.body
    message = error.value.body["message"]
    assert error.value.body["success"] is False
    assert "not supported by sandboxd" in message
    for word in words:
        assert word in message, message


def test_families_sandboxd_does_not_serve_answer_501_through_the_sdk(client, sandbox):
    _not_supported(lambda: client.proxy.get_upstream(), "egress")
    _not_supported(lambda: client.proxy.list_excludes(), "egress")
    # Not in the SDK: observe, and the proxy's health; plain HTTP.
    for path in ["/v1/sandbox/observe/status", "/v1/proxy/health"]:
        status, body = sandbox.request("GET", path)
        assert status == 501 and "not supported by sandboxd" in body["message"], (path, body)
    status, _ = sandbox.request("GET", "/v1/no-such-family")
    assert status == 404
    document = sandbox.request("GET", "/v1/openapi.json")[1]
    assert "501" in document["paths"]["/v1/proxy/upstream"]["get"]["responses"]
    assert "200" in document["paths"]["/v1/bash/exec"]["post"]["responses"]
