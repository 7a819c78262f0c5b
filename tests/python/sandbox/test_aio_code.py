"""AIO's code execution (``client.jupyter``, ``client.nodejs``, ``client.code``) through AIO's
own SDK, unchanged, against sandboxd in the image: real IPython kernels and a real Node; every
method parses into the SDK's typed models and has its effect."""

import asyncio
import base64
import io
import pathlib
import struct
import sys
import time
import zipfile

import pytest
from agent_sandbox.core.api_error import ApiError
from agent_sandbox.types import (
    ActiveSessionsResult,
    CodeExecuteResponse,
    CodeInfoResponse,
    JupyterCreateSessionResponse,
    JupyterExecuteResponse,
    JupyterInfoResponse,
    NodeJsCreateSessionResponse,
    NodeJsExecuteResponse,
    NodeJsRuntimeInfo,
    NodeJsSessionListResponse,
    NodeJsSessionResponse,
    NodeJsUpdateSessionResponse,
    ResponseCodeExecuteResponse,
)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import aio_readme  # noqa: E402
from conftest import SandboxContainer  # noqa: E402

# A PNG of one red pixel, drawn by the kernel through IPython's display machinery.
PNG_CODE = """
import base64
from IPython.display import Image, display
png = base64.b64decode(
    'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==')
display(Image(data=png))
"""


@pytest.fixture(scope="module")
def keyless():
    """A sandboxd configured as AIO runs by default, without a key: AIO's README examples give
    ``Sandbox(...)`` no header and Playwright's ``connect_over_cdp`` none either."""
    container = SandboxContainer(key=False)
    try:
        yield container
    finally:
        container.close()


def test_readme_example_runs_unchanged(keyless):
    """AIO's README "Basic Usage" as written (tests/python/aio_readme.py), only the base URL
    substituted: context, a shell command, a file read and a screenshot, each checked."""
    home_dir, result, content, screenshot = aio_readme.basic_usage(keyless.base_url, None)
    assert home_dir == "/home/agent"
    # The shell starts in the workspace: the listing is the workspace's.
    assert result.data.output == keyless.exec("sh", "-c", "cd /home/agent/workspace && ls -la")
    assert content.data.content.rstrip("\n") == keyless.exec("cat", f"{home_dir}/.bashrc")
    png = b"".join(screenshot)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (1280, 800)


def test_readme_site_to_markdown_example_runs_unchanged(keyless):
    """AIO's README "Complete Example" as written (tests/python/aio_readme.py): async
    Playwright over the ``cdp_url`` of ``browser.get_info()`` with no header, ``new_page()`` on
    the browser, the Jupyter cell importing ``markdownify``, bash and the file API. Only the
    base URL and the page differ (no internet here: a file in the sandbox)."""
    keyless.request("POST", "/v1/file/write", {"file": "/home/agent/page.html", "content": aio_readme.PAGE})
    markdown = asyncio.run(
        aio_readme.site_to_markdown(keyless.base_url, None, "file:///home/agent/page.html")
    )
    aio_readme.check_site_markdown(markdown)
    assert keyless.exec("cat", "/home/agent/site.md") == markdown.rstrip("\n")


def test_the_python_an_agent_expects_is_there(client):
    """What AIO's documentation and examples import, in the Jupyter kernel and in a shell."""
    modules = "markdownify, requests, pandas, numpy, matplotlib, bs4, lxml, openpyxl, PIL, yaml"
    code = f"import {modules}\nimport matplotlib.pyplot as plt\nprint(pandas.DataFrame({{'a': [1, 2]}}).a.sum())"
    answer = client.jupyter.execute_code(code=code).data
    assert answer.status == "ok", answer.outputs
    assert answer.outputs[0].text == "3\n"
    shell = client.shell.exec_command(command=f"python3 -c 'import {modules}; print(\"ok\")'").data
    assert shell.output.strip() == "ok", shell.output
    version = client.shell.exec_command(command="pdftotext -v 2>&1 | head -1").data.output
    assert version.startswith("pdftotext version"), version


def a_wheel(name: str, version: str, module_text: str) -> bytes:
    """A minimal pure-Python wheel: the module and the metadata pip reads."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": module_text,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: agentbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{dist}/RECORD"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return buffer.getvalue()


def test_pip_installs_for_the_agent_and_a_running_kernel_imports_it(client):
    """``pip install`` as the agent works (no PEP 668 refusal, no root) and goes into the agent's
    own site; a kernel started before the install imports the package without a restart."""
    client.jupyter.create_session(session_id="before-pip", kernel_name="python3")
    client.jupyter.execute_code(code="x = 41", session_id="before-pip")
    home_dir = client.sandbox.get_context().home_dir
    wheel = "/tmp/agentboxprobe-1.0-py3-none-any.whl"
    client.file.write_file(
        file=wheel,
        content=base64.b64encode(a_wheel("agentboxprobe", "1.0", "ANSWER = 42\n")).decode(),
        encoding="base64",
    )
    installed = client.shell.exec_command(command=f"pip install --no-index {wheel} 2>&1; echo exit=$?").data
    assert "exit=0" in installed.output, installed.output
    assert "Successfully installed agentboxprobe-1.0" in installed.output, installed.output
    where = client.shell.exec_command(command="python3 -c 'import agentboxprobe; print(agentboxprobe.__file__)'")
    assert where.data.output.strip().startswith(f"{home_dir}/.local/lib/python3"), where.data.output
    answer = client.jupyter.execute_code(
        code="import agentboxprobe\nprint(agentboxprobe.ANSWER, x + 1)", session_id="before-pip"
    ).data
    assert answer.status == "ok", answer.outputs
    assert answer.outputs[0].text == "42 42\n"
    client.shell.exec_command(command="pip uninstall -y agentboxprobe")


def test_jupyter_state_persists_and_outputs_are_rich(client):
    created = client.jupyter.create_session(session_id="sdk-jupyter", kernel_name="python3")
    assert isinstance(created.data, JupyterCreateSessionResponse)
    assert created.data.session_id == "sdk-jupyter"
    client.jupyter.execute_code(code="x = 20", session_id="sdk-jupyter")
    answer = client.jupyter.execute_code(code="print('sum', x + 1)\nx * 2", session_id="sdk-jupyter")
    result = answer.data
    assert isinstance(result, JupyterExecuteResponse)
    assert result.status == "ok"
    assert result.session_id == "sdk-jupyter"
    kinds = [o.output_type for o in result.outputs]
    assert kinds == ["stream", "execute_result"], kinds
    assert result.outputs[0].name == "stdout" and result.outputs[0].text == "sum 21\n"
    assert result.outputs[1].data["text/plain"] == "40"
    assert result.execution_count == result.outputs[1].execution_count == 2

    # Images arrive base64-encoded under their MIME type.
    shown = client.jupyter.execute_code(code=PNG_CODE, session_id="sdk-jupyter").data
    images = [o for o in shown.outputs if o.output_type == "display_data"]
    assert images, shown.outputs
    assert base64.b64decode(images[0].data["image/png"]).startswith(b"\x89PNG")

    # An exception is an answer with a traceback, not an HTTP error.
    failed = client.jupyter.execute_code(code="1 / 0", session_id="sdk-jupyter").data
    assert failed.status == "error"
    error = failed.outputs[-1]
    assert (error.output_type, error.ename) == ("error", "ZeroDivisionError")
    assert any("1 / 0" in line for line in error.traceback)
    assert "\x1b[" not in "".join(error.traceback), "tracebacks carry no terminal colours"

    sessions = client.jupyter.list_sessions().data
    assert isinstance(sessions, ActiveSessionsResult)
    assert sessions.sessions["sdk-jupyter"].kernel_name == "python3"
    client.jupyter.delete_session(session_id="sdk-jupyter")
    assert "sdk-jupyter" not in client.jupyter.list_sessions().data.sessions
    with pytest.raises(ApiError) as missing:
        client.jupyter.delete_session(session_id="sdk-jupyter")
    assert missing.value.status_code == 404


def test_jupyter_timeout_interrupts_and_the_session_survives(client):
    client.jupyter.execute_code(code="kept = 'still here'", session_id="sdk-timeout")
    started = time.monotonic()
    answer = client.jupyter.execute_code(
        code="import time\nprint('before', flush=True)\ntime.sleep(60)", session_id="sdk-timeout", timeout=2
    ).data
    assert time.monotonic() - started < 20
    assert answer.status == "timeout"
    assert answer.outputs[0].text == "before\n"
    assert any(o.ename == "KeyboardInterrupt" for o in answer.outputs if o.output_type == "error")
    after = client.jupyter.execute_code(code="kept", session_id="sdk-timeout").data
    assert after.outputs[0].data["text/plain"] == "'still here'"
    # A NUL byte in the code (it hung the call for its whole timeout, then the kernel and the
    # session's state were lost): refused at once, naming the field; the session keeps its state.
    started = time.monotonic()
    with pytest.raises(ApiError) as refused:
        client.jupyter.execute_code(code="x = 1\x00", session_id="sdk-timeout", timeout=30)
    assert time.monotonic() - started < 2
    assert refused.value.status_code == 422 and "code" in str(refused.value.body)
    after = client.jupyter.execute_code(code="kept", session_id="sdk-timeout").data
    assert after.outputs[0].data["text/plain"] == "'still here'"
    client.jupyter.delete_session(session_id="sdk-timeout")


def test_a_dead_kernel_is_reported_and_replaced(client):
    client.jupyter.execute_code(code="value = 1", session_id="sdk-dies")
    died = client.jupyter.execute_code(code="import os; os._exit(1)", session_id="sdk-dies").data
    assert died.status == "error"
    assert died.outputs[-1].ename == "KernelDied"
    # The next execution runs on a new kernel: the old state is gone, the session works.
    fresh = client.jupyter.execute_code(code="'value' in globals()", session_id="sdk-dies").data
    assert fresh.status == "ok"
    assert fresh.outputs[0].data["text/plain"] == "False"
    client.jupyter.delete_session(session_id="sdk-dies")


def test_jupyter_info_and_bad_input(client, sandbox):
    info = client.jupyter.get_info().data
    assert isinstance(info, JupyterInfoResponse)
    assert info.default_kernel == "python3" and "python3" in info.available_kernels
    status, body = sandbox.request("POST", "/v1/jupyter/execute", {"code": "1", "kernel_name": "ruby"})
    assert status == 422 and "kernel_name" in body["message"]
    status, body = sandbox.request("POST", "/v1/jupyter/execute", {"code": "1", "timeout": 0})
    assert status == 422 and "timeout" in body["message"]
    status, body = sandbox.request("POST", "/v1/jupyter/execute", {"code": "1", "cwd": "relative"})
    assert status == 422 and "cwd" in body["message"]
    status, body = sandbox.request("POST", "/v1/jupyter/sessions/create", {"session_id": "dup"})
    assert status == 200
    status, body = sandbox.request("POST", "/v1/jupyter/sessions/create", {"session_id": "dup"})
    assert status == 409
    client.jupyter.delete_sessions()
    assert client.jupyter.list_sessions().data.sessions == {}


def test_nodejs_stateless_runs_with_files_and_stdin(client):
    answer = client.nodejs.execute_code(
        code="const fs = require('fs');\n"
        "const input = fs.readFileSync(0, 'utf8');\n"
        "console.log(fs.readFileSync('data.txt', 'utf8') + input.trim());\n"
        "console.error('to stderr');",
        files={"data.txt": "from a file, "},
        stdin="from stdin\n",
    ).data
    assert isinstance(answer, NodeJsExecuteResponse)
    assert answer.status == "ok" and answer.exit_code == 0
    assert answer.stdout == "from a file, from stdin\n"
    assert answer.stderr == "to stderr\n"

    failed = client.nodejs.execute_code(code="null.x").data
    assert failed.status == "error" and failed.exit_code == 1
    assert failed.outputs[-1].ename == "TypeError"

    started = time.monotonic()
    slow = client.nodejs.execute_code(code="setInterval(() => {}, 1000)", timeout=1).data
    assert slow.status == "timeout"
    assert time.monotonic() - started < 15


def test_nodejs_sessions_keep_globals(client):
    created = client.nodejs.create_session(session_id="sdk-node", max_idle_time=60000).data
    assert isinstance(created, NodeJsCreateSessionResponse) and created.created
    client.nodejs.execute_code(code="var total = 40; function add(n) { total += n; }", session_id="sdk-node")
    answer = client.nodejs.execute_code(code="add(2); console.log('now', total); total", session_id="sdk-node").data
    assert answer.status == "ok", answer
    assert answer.stdout == "now 42\n"
    assert answer.outputs[-1].data["text/plain"] == "42"
    awaited = client.nodejs.execute_code(
        code="const v = await new Promise(r => setTimeout(() => r(7), 10)); return v * 6;", session_id="sdk-node"
    ).data
    assert awaited.outputs[-1].data["text/plain"] == "42", awaited
    listed = client.nodejs.list_sessions().data
    assert isinstance(listed, NodeJsSessionListResponse) and "sdk-node" in listed.sessions
    one = client.nodejs.get_session(session_id="sdk-node").data
    assert isinstance(one, NodeJsSessionResponse) and one.session.state == "IDLE"
    updated = client.nodejs.update_session(session_id="sdk-node", max_idle_time=120000).data
    assert isinstance(updated, NodeJsUpdateSessionResponse) and updated.session.max_idle_time == 120000
    assert client.nodejs.delete_session(session_id="sdk-node").data.deleted
    with pytest.raises(ApiError) as missing:
        client.nodejs.get_session(session_id="sdk-node")
    assert missing.value.status_code == 404
    info = client.nodejs.get_info().data
    assert isinstance(info, NodeJsRuntimeInfo) and info.node_version.startswith("v")


def test_code_dispatches_by_language(client, sandbox):
    python = client.code.execute_code(language="python", code="print(6 * 7)")
    assert isinstance(python, ResponseCodeExecuteResponse)
    assert isinstance(python.data, CodeExecuteResponse)
    assert (python.data.status, python.data.stdout) == ("ok", "42\n")
    assert python.data.session_id is None, "a stateless call keeps no session"
    stateful = client.code.execute_code(language="python", code="y = 5", stateful=True).data
    again = client.code.execute_code(language="python", code="print(y)", session_id=stateful.session_id).data
    assert again.stdout == "5\n"
    js = client.code.execute_code(language="javascript", code="console.log([1,2,3].map(n => n * 2).join(','))").data
    assert (js.status, js.stdout, js.exit_code) == ("ok", "2,4,6\n", 0)
    info = client.code.get_info().data
    assert isinstance(info, CodeInfoResponse)
    assert {lang.language for lang in info.languages} == {"python", "javascript"}
    status, body = sandbox.request("POST", "/v1/code/execute", {"language": "cobol", "code": "x"})
    assert status == 422 and "language" in body["message"]
    client.jupyter.delete_session(session_id=stateful.session_id)
