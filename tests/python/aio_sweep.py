"""Every method of AIO Sandbox's own Python SDK (``agent-sandbox`` 0.0.30, 131 methods), unchanged,
as one sweep run two ways: against sandboxd in the image directly
(``sandbox/test_aio_sdk_sweep.py``) and through the orchestrator's proxy with the orchestrator's
key (``orchestrator/test_orchestrator_sdk_sweep.py``). The cases are here, once.

Each method is called with real arguments in a case of its own, in an order where what a call
needs was made by an earlier one (a session, a file, a page). A case passes when the SDK parses
the answer into its typed model (it raises otherwise) and the call had its effect, checked
through another way in (the shell through ``docker exec``, the page, the file system). The
methods sandboxd does not serve by design are in ``UNSUPPORTED``: each must answer 501 with a
message naming what is not supported.

Each run records every method's outcome on its ``Box`` and ends with ``summary``, a line such
as ``SDK sweep (direct): 131 methods, 120 checked with their effect, 11 documented refusals
(501), 0 partial`` (partial: a method whose call or whose effect failed).

The sweep needs a sandbox of its own: it restarts the browser, changes its configuration and
registers a shutdown hook. Its pages are served inside the sandbox on loopback, so the sandbox's
browser must be allowed private addresses (``SANDBOXD_BROWSER_ALLOW_PRIVATE=true``).
"""


import base64
import inspect
import io
import json
import time
import urllib.error
import urllib.request
import zipfile

import pytest
from agent_sandbox import Sandbox
from agent_sandbox.browser import Action_MoveTo
from agent_sandbox.core.api_error import ApiError
from agent_sandbox.types import Resolution, RouteResponseModel

PORT = 8766
ECHO_PORT = 8767
# A server that answers with the request's headers as JSON, to see what the browser sent.
ECHO_SERVER = """
import http.server, json
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", %d), Echo).serve_forever()
""" % ECHO_PORT
WORKSPACE = "/home/agent/workspace"
PAGE = """<!doctype html>
<html><head><title>Sweep page</title></head><body>
<h1>Sweep</h1>
<a id="next" href="/second.html">next page</a>
<form>
  <input id="name" type="text">
  <select id="color"><option value="r">Red</option><option value="g">Green</option></select>
  <label><input id="agree" type="checkbox"> Agree</label>
  <input id="doc" type="file">
</form>
<div style="height: 3000px"></div>
<p id="far">The far paragraph holds the needle.</p>
<script>
  window.keys = [];
  document.addEventListener('keydown', (e) => window.keys.push(e.key));
  console.log('sweep console line');
</script>
</body></html>
"""
SECOND = "<!doctype html><title>Second</title><p>second page</p>"
SKILL = """---
name: sweep-skill
description: A skill registered by the SDK sweep.
---
# Sweep skill

Say hello.
"""


class Box:
    """The sweep's sandbox as a client sees it, its SDK client, and what earlier cases left for
    later ones.

    ``base_url`` and ``headers`` are what the SDK is given (sandboxd's address and key, or the
    orchestrator's ``urls.api`` and key); ``exec`` runs a command in the sandbox's container
    (``docker exec``), the way in that checks an effect; ``cdp_at`` is what the CDP URL reported
    by ``browser.get_info`` must contain."""

    def __init__(self, *, base_url: str, headers: dict, exec, cdp_at: str,
                 viewer_cookie: str = "sandboxd_viewer"):
        self.base_url = base_url
        self.headers = headers
        self.exec = exec
        self.cdp_at = cdp_at
        # The cookie a viewer ticket is traded for (sandboxd's, or the orchestrator's viewer's).
        self.viewer_cookie = viewer_cookie
        self.client = Sandbox(base_url=base_url, headers=headers, timeout=90)
        self.origin = f"http://127.0.0.1:{PORT}"
        self.url = f"{self.origin}/page.html"
        self.echo = f"http://127.0.0.1:{ECHO_PORT}"
        self.saved: dict = {}
        # method -> "checked" | "refused" | "partial"
        self.outcomes: dict[str, str] = {}

    def sh(self, command: str) -> str:
        return self.exec("sh", "-c", command)

    def js(self, expression: str):
        answer = self.client.browser_page.evaluate(expression=expression)
        assert answer.success, answer.message
        return answer.data

    def page(self):
        """Loads the test page fresh and answers the client."""
        self.client.browser_page.navigate(url=self.url)
        return self.client

    def raw_get(self, path: str, headers: dict | None = None):
        """GET ``base_url + path`` with only ``headers`` (no key), redirects not followed."""
        request = urllib.request.Request(self.base_url + path, headers=headers or {})

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        opener = urllib.request.build_opener(NoRedirect)
        return fetch(opener, request)


def fetch(opener, request):
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def prepare(box: Box) -> Box:
    """Writes the test site through the SDK, starts its web servers in the container (on
    loopback) and waits until the browser opens the page."""
    box.sh("mkdir -p /tmp/site")
    box.client.file.write_file(file="/tmp/site/page.html", content=PAGE)
    box.client.file.write_file(file="/tmp/site/second.html", content=SECOND)
    box.client.file.write_file(file="/tmp/site/echo.py", content=ECHO_SERVER)
    box.sh("setsid python3 /tmp/site/echo.py >/dev/null 2>&1 &")
    box.sh(f"cd /tmp/site && setsid python3 -m http.server {PORT} --bind 127.0.0.1 >/dev/null 2>&1 &")
    for _ in range(100):
        try:
            box.client.browser_page.navigate(url=box.url)
            return box
        except ApiError:
            time.sleep(0.1)
    box.client.browser_page.navigate(url=box.url)
    return box


def gone(box: Box, pattern: str) -> None:
    """Waits (up to 5 s) until no process's command line matches `pattern`."""
    for _ in range(50):
        if box.sh(f"pgrep -f '{pattern}' || true").strip() == "":
            return
        time.sleep(0.1)
    raise AssertionError(f"a process matching {pattern} is still running")


# --- the cases, in order -------------------------------------------------------------------
# Each is `name -> function(box)`; the name is the SDK method, `family.method`.

CASES: dict = {}


def case(name):
    def register(function):
        assert name not in CASES, name
        CASES[name] = function
        return function

    return register


# sandbox


@case("sandbox.get_context")
def _(box):
    context = box.client.sandbox.get_context()
    assert context.home_dir == "/home/agent"
    assert context.detail.system.user == "agent"


@case("sandbox.get_python_packages")
def _(box):
    answer = box.client.sandbox.get_python_packages()
    names = {p["name"].lower(): p for p in answer.data}
    assert "ipykernel" in names, sorted(names)[:20]
    version = box.sh("python3 -c 'import ipykernel; print(ipykernel.__version__)'").strip()
    assert names["ipykernel"]["version"] == version


@case("sandbox.get_nodejs_packages")
def _(box):
    answer = box.client.sandbox.get_nodejs_packages()
    assert answer.success and isinstance(answer.data, list)
    for package in answer.data:
        assert package["name"] and "version" in package and package["location"]


@case("sandbox.register_hook")
def _(box):
    answer = box.client.sandbox.register_hook(
        name="sweep-hook", command="echo sweep-hook-ran", event="shutdown", timeout=5, priority=1
    )
    assert answer.data.name == "sweep-hook" and answer.data.command == "echo sweep-hook-ran"


@case("sandbox.list_hooks")
def _(box):
    hooks = box.client.sandbox.list_hooks(event="shutdown").data
    assert "sweep-hook" in [h.name for h in hooks]


@case("sandbox.remove_hook")
def _(box):
    box.client.sandbox.remove_hook(name="sweep-hook")
    assert "sweep-hook" not in [h.name for h in box.client.sandbox.list_hooks().data]


# auth


@case("auth.create_ticket")
def _(box):
    answer = box.client.auth.create_ticket()
    ticket = answer["data"]["ticket"]
    box.saved["ticket"] = ticket
    # The ticket opens the viewer once, without the key: traded for a session cookie.
    status, headers, _ = box.raw_get(f"/vnc/index.html?ticket={ticket}")
    assert status == 303 and f"{box.viewer_cookie}=" in headers.get("set-cookie", ""), (status, headers)
    again, _, _ = box.raw_get(f"/vnc/index.html?ticket={ticket}")
    assert again == 401


@case("auth.authenticate")
def _(box):
    assert box.client.auth.authenticate()["method"] == "key"
    # Without the key, /auth answers 401: it is a check, not a way in.
    status, _, _ = box.raw_get("/auth")
    assert status == 401


# shell


@case("shell.create_session")
def _(box):
    answer = box.client.shell.create_session(id="sweep-shell", exec_dir="/tmp")
    assert answer.data.session_id == "sweep-shell"


@case("shell.exec_command")
def _(box):
    result = box.client.shell.exec_command(id="sweep-shell", command="cd /var && echo $PWD").data
    assert result.status == "completed" and result.output.strip() == "/var"
    again = box.client.shell.exec_command(id="sweep-shell", command="pwd").data
    assert again.output.strip() == "/var", "the session keeps its directory"


@case("shell.update_session")
def _(box):
    answer = box.client.shell.update_session(id="sweep-shell", no_change_timeout=30)
    assert answer.success


@case("shell.write_to_process")
def _(box):
    box.client.shell.exec_command(
        id="sweep-shell", command="read line; echo got-$line", async_mode=True
    )
    answer = box.client.shell.write_to_process(id="sweep-shell", input="abc", press_enter=True)
    assert answer.data.status in ("running", "completed")


@case("shell.wait_for_process")
def _(box):
    answer = box.client.shell.wait_for_process(id="sweep-shell", seconds=10)
    assert answer.data.status == "completed"


@case("shell.view")
def _(box):
    view = box.client.shell.view(id="sweep-shell").data
    assert "got-abc" in view.output


@case("shell.kill_process")
def _(box):
    box.client.shell.exec_command(id="sweep-shell", command="sleep 300", async_mode=True)
    answer = box.client.shell.kill_process(id="sweep-shell")
    assert answer.success
    gone(box, "^sleep 300$")


@case("shell.list_sessions")
def _(box):
    sessions = box.client.shell.list_sessions().data.sessions
    assert "sweep-shell" in sessions


@case("shell.get_session_stats")
def _(box):
    stats = box.client.shell.get_session_stats().data
    assert stats.total_sessions >= 1


@case("shell.get_terminal_url")
def _(box):
    url = box.client.shell.get_terminal_url().data
    # A link for a browser, which sends no header: at the address the client uses, it opens the
    # terminal page once (the ticket traded for a session cookie), then no more.
    assert url.startswith(box.base_url + "/"), (url, box.base_url)
    status, headers, _ = box.raw_get(url.removeprefix(box.base_url))
    assert status == 303 and "sandboxd_terminal=" in headers.get("set-cookie", ""), (url, status, headers)
    again, _, _ = box.raw_get(url.removeprefix(box.base_url))
    assert again == 401, (url, again)


@case("shell.cleanup_session")
def _(box):
    box.client.shell.cleanup_session(session_id="sweep-shell")
    assert "sweep-shell" not in box.client.shell.list_sessions().data.sessions


@case("shell.cleanup_all_sessions")
def _(box):
    box.client.shell.create_session(id="sweep-shell-2")
    box.client.shell.cleanup_all_sessions()
    assert "sweep-shell-2" not in box.client.shell.list_sessions().data.sessions


# bash


@case("bash.create_session")
def _(box):
    info = box.client.bash.create_session(session_id="sweep-bash", exec_dir="/tmp").data
    assert info.working_dir == "/tmp"


@case("bash.exec")
def _(box):
    result = box.client.bash.exec(command="echo out; echo err >&2", session_id="sweep-bash").data
    assert (result.stdout, result.stderr) == ("out\n", "err\n")


@case("bash.write")
def _(box):
    started = box.client.bash.exec(
        command="read line; echo got-$line", session_id="sweep-bash", async_mode=True
    ).data
    box.saved["bash_command"] = started.command_id
    assert box.client.bash.write(session_id="sweep-bash", input="xyz\n").success


@case("bash.output")
def _(box):
    text = ""
    for _ in range(50):
        read = box.client.bash.output(
            session_id="sweep-bash", command_id=box.saved["bash_command"], wait=True, wait_timeout=5
        ).data
        text = read.stdout
        if read.command.status == "completed":
            break
    assert text == "got-xyz\n"


@case("bash.kill")
def _(box):
    box.client.bash.exec(command="sleep 301", session_id="sweep-bash", async_mode=True)
    assert box.client.bash.kill(session_id="sweep-bash").success
    gone(box, "^sleep 301$")


@case("bash.sessions")
def _(box):
    assert "sweep-bash" in [s.session_id for s in box.client.bash.sessions().data]


@case("bash.close_session")
def _(box):
    box.client.bash.close_session(session_id="sweep-bash")
    assert "sweep-bash" not in [s.session_id for s in box.client.bash.sessions().data]


# file

NOTE = f"{WORKSPACE}/sweep/note.txt"


@case("file.write_file")
def _(box):
    box.sh(f"mkdir -p {WORKSPACE}/sweep && chown agent: {WORKSPACE}/sweep")
    answer = box.client.file.write_file(file=NOTE, content="alpha\nbeta needle\ngamma\n")
    assert answer.data.bytes_written == len("alpha\nbeta needle\ngamma\n")
    assert box.sh(f"cat {NOTE}") == "alpha\nbeta needle\ngamma"


@case("file.read_file")
def _(box):
    answer = box.client.file.read_file(file=NOTE, start_line=1, end_line=2)
    assert answer.data.content == "beta needle\n"


@case("file.replace_in_file")
def _(box):
    answer = box.client.file.replace_in_file(file=NOTE, old_str="gamma", new_str="delta")
    assert answer.data.replaced_count == 1
    assert "delta" in box.sh(f"cat {NOTE}")


@case("file.search_in_file")
def _(box):
    answer = box.client.file.search_in_file(file=NOTE, regex="nee+dle")
    assert answer.data.line_numbers == [1]


@case("file.str_replace_editor")
def _(box):
    path = f"{WORKSPACE}/sweep/edited.py"
    box.client.file.str_replace_editor(command="create", path=path, file_text="x = 1\n")
    box.client.file.str_replace_editor(command="str_replace", path=path, old_str="x = 1", new_str="x = 2")
    assert box.sh(f"cat {path}") == "x = 2"


@case("file.list_path")
def _(box):
    listing = box.client.file.list_path(path=f"{WORKSPACE}/sweep").data
    assert {"note.txt", "edited.py"} <= {f.name for f in listing.files}


@case("file.find_files")
def _(box):
    found = box.client.file.find_files(path=f"{WORKSPACE}/sweep", glob="*.py").data
    assert found.files == [f"{WORKSPACE}/sweep/edited.py"]


@case("file.glob_files")
def _(box):
    found = box.client.file.glob_files(path=f"{WORKSPACE}/sweep", pattern="*.txt").data
    assert [f.path for f in found.files] == [NOTE]


@case("file.grep_files")
def _(box):
    found = box.client.file.grep_files(path=f"{WORKSPACE}/sweep", pattern="needle").data
    assert [(m.file, m.line_number) for m in found.matches] == [(NOTE, 2)]


@case("file.upload_file")
def _(box):
    payload = bytes(range(256)) * 16
    answer = box.client.file.upload_file(
        file=("blob.bin", payload, "application/octet-stream"), path=f"{WORKSPACE}/sweep/blob.bin"
    )
    assert answer.data.file_size == len(payload)
    box.saved["blob"] = payload


@case("file.download_file")
def _(box):
    data = b"".join(box.client.file.download_file(path=f"{WORKSPACE}/sweep/blob.bin"))
    assert data == box.saved["blob"]


@case("file.watch_create")
def _(box):
    answer = box.client.file.watch_create(path=f"{WORKSPACE}/sweep", recursive=True)
    box.saved["watcher"] = answer["watcher_id"]
    box.sh(f"echo w > {WORKSPACE}/sweep/watched.txt")


@case("file.watch_poll")
def _(box):
    answer = box.client.file.watch_poll(watcher_id=box.saved["watcher"], timeout=5)
    paths = [e["path"] for e in answer["events"]]
    assert f"{WORKSPACE}/sweep/watched.txt" in paths


@case("file.watch_list")
def _(box):
    answer = box.client.file.watch_list()
    assert box.saved["watcher"] in [w["watcher_id"] for w in answer["watchers"]]


@case("file.watch_events")
def _(box):
    # Without `Accept: text/event-stream` (the SDK sends none) the events come as JSON.
    answer = box.client.file.watch_events(watcher_id=box.saved["watcher"])
    assert f"{WORKSPACE}/sweep/watched.txt" in [e["path"] for e in answer["events"]]


@case("file.watch_stop")
def _(box):
    box.client.file.watch_stop(watcher_id=box.saved["watcher"])
    answer = box.client.file.watch_list()
    assert box.saved["watcher"] not in [w["watcher_id"] for w in answer["watchers"]]


@case("file.watch_wait")
def _(box):
    target = f"{WORKSPACE}/sweep/waited.txt"
    box.sh(f"(sleep 0.5; echo x > {target}) >/dev/null 2>&1 &")
    answer = box.client.file.watch_wait(path=target, timeout=10, event_types=["create"])
    assert answer["event"]["type"] == "create" and answer["timed_out"] is False


# code: Jupyter, Node.js, the dispatcher


@case("jupyter.get_info")
def _(box):
    info = box.client.jupyter.get_info().data
    assert "python3" in json.dumps(info.model_dump())


@case("jupyter.create_session")
def _(box):
    answer = box.client.jupyter.create_session(session_id="sweep-kernel")
    assert answer.data.session_id == "sweep-kernel"


@case("jupyter.execute_code")
def _(box):
    box.client.jupyter.execute_code(code="x = 20", session_id="sweep-kernel")
    result = box.client.jupyter.execute_code(code="print(x + 22)", session_id="sweep-kernel").data
    assert result.status == "ok" and "42" in json.dumps([o.model_dump() for o in result.outputs])


@case("jupyter.list_sessions")
def _(box):
    answer = box.client.jupyter.list_sessions()
    assert "sweep-kernel" in json.dumps(answer.data.model_dump())


@case("jupyter.delete_session")
def _(box):
    box.client.jupyter.delete_session(session_id="sweep-kernel")
    assert "sweep-kernel" not in json.dumps(box.client.jupyter.list_sessions().data.model_dump())


@case("jupyter.delete_sessions")
def _(box):
    box.client.jupyter.create_session(session_id="sweep-kernel-2")
    box.client.jupyter.delete_sessions()
    assert "sweep-kernel-2" not in json.dumps(box.client.jupyter.list_sessions().data.model_dump())


@case("nodejs.get_info")
def _(box):
    info = box.client.nodejs.get_info().data
    assert info.node_version.lstrip("v") == box.sh("node --version").strip().lstrip("v")


@case("nodejs.create_session")
def _(box):
    answer = box.client.nodejs.create_session(session_id="sweep-node", cwd="/tmp")
    assert answer.data.session_id == "sweep-node"


@case("nodejs.execute_code")
def _(box):
    box.client.nodejs.execute_code(code="globalThis.n = 40", session_id="sweep-node")
    result = box.client.nodejs.execute_code(code="console.log(n + 2)", session_id="sweep-node").data
    assert result.stdout.strip() == "42"


@case("nodejs.get_session")
def _(box):
    assert box.client.nodejs.get_session(session_id="sweep-node").data.session.session_id == "sweep-node"


@case("nodejs.update_session")
def _(box):
    answer = box.client.nodejs.update_session(session_id="sweep-node", max_idle_time=600_000)
    assert answer.success


@case("nodejs.list_sessions")
def _(box):
    assert "sweep-node" in json.dumps(box.client.nodejs.list_sessions().data.model_dump())


@case("nodejs.delete_session")
def _(box):
    box.client.nodejs.delete_session(session_id="sweep-node")
    assert "sweep-node" not in json.dumps(box.client.nodejs.list_sessions().data.model_dump())


@case("code.get_info")
def _(box):
    languages = json.dumps(box.client.code.get_info().data.model_dump())
    assert "python" in languages and "javascript" in languages


@case("code.execute_code")
def _(box):
    python = box.client.code.execute_code(language="python", code="print(6 * 7)").data
    node = box.client.code.execute_code(language="javascript", code="console.log(6 * 7)").data
    assert "42" in json.dumps(python.model_dump()) and "42" in json.dumps(node.model_dump())


# util and MCP


@case("util.convert_to_markdown")
def _(box):
    path = f"{WORKSPACE}/sweep/doc.html"
    box.client.file.write_file(file=path, content="<h1>Title</h1><p>Some <b>bold</b> text</p>")
    answer = box.client.util.convert_to_markdown(uri=f"file://{path}")
    assert "# Title" in answer.data and "**bold**" in answer.data


@case("mcp.list_mcp_servers")
def _(box):
    box.saved["mcp_server"] = box.client.mcp.list_mcp_servers().data[0]


@case("mcp.list_mcp_tools")
def _(box):
    tools = box.client.mcp.list_mcp_tools(server_name=box.saved["mcp_server"]).data.tools
    box.saved["mcp_tools"] = {t.name for t in tools}
    assert len(tools) >= 10


@case("mcp.execute_mcp_tool")
def _(box):
    assert "sandbox_execute_bash" in box.saved["mcp_tools"]
    answer = box.client.mcp.execute_mcp_tool(
        server_name=box.saved["mcp_server"], tool_name="sandbox_execute_bash", request={"cmd": "echo mcp-42"}
    )
    assert "mcp-42" in json.dumps(answer.data.model_dump())


# the browser: page, tabs, cookies, state, network, captcha


@case("browser.get_info")
def _(box):
    info = box.client.browser.get_info().data
    assert box.cdp_at in info.cdp_url, info.cdp_url
    assert info.viewport.width > 0


@case("browser_page.navigate")
def _(box):
    answer = box.client.browser_page.navigate(url=box.url, wait_until="load")
    assert answer.success
    assert box.js("document.title") == "Sweep page"


@case("browser_page.get_text")
def _(box):
    assert "far paragraph" in box.client.browser_page.get_text().data


@case("browser_page.get_html")
def _(box):
    assert 'id="far"' in box.client.browser_page.get_html(outer=True).data


@case("browser_page.get_markdown")
def _(box):
    assert "# Sweep" in json.dumps(box.client.browser_page.get_markdown().data)


@case("browser_page.evaluate")
def _(box):
    assert box.client.browser_page.evaluate(expression="6 * 7").data == 42


@case("browser_page.get_elements")
def _(box):
    elements = box.client.browser_page.get_elements().data
    box.saved["elements"] = {e.get("selector"): e["index"] for e in elements}
    assert "#name" in box.saved["elements"]


@case("browser_page.fill")
def _(box):
    box.client.browser_page.fill(index=box.saved["elements"]["#name"], text="Ada")
    assert box.js("document.querySelector('#name').value") == "Ada"


@case("browser_page.fill_form")
def _(box):
    box.client.browser_page.fill_form(items=[{"selector": "#name", "value": "Grace"}])
    assert box.js("document.querySelector('#name').value") == "Grace"


@case("browser_page.select_option")
def _(box):
    box.client.browser_page.select_option(selector="#color", value="g")
    assert box.js("document.querySelector('#color').value") == "g"


@case("browser_page.check")
def _(box):
    box.client.browser_page.check(selector="#agree")
    assert box.js("document.querySelector('#agree').checked") is True


@case("browser_page.uncheck")
def _(box):
    box.client.browser_page.uncheck(selector="#agree")
    assert box.js("document.querySelector('#agree').checked") is False


@case("browser_page.upload_file")
def _(box):
    box.client.browser_page.upload_file(selector="#doc", files=[NOTE])
    assert box.js("document.querySelector('#doc').files[0].name") == "note.txt"


@case("browser_page.find_text")
def _(box):
    found = box.client.browser_page.find_text(keyword="needle").data
    assert found and "needle" in json.dumps(found)


@case("browser_page.scroll_to_element")
def _(box):
    box.client.browser_page.scroll_to_element(selector="#far")
    assert box.js("window.scrollY") > 1000


@case("browser_page.scroll_to")
def _(box):
    box.client.browser_page.scroll_to(x=0, y=200)
    assert box.js("Math.round(window.scrollY)") == 200


@case("browser_page.scroll")
def _(box):
    box.client.browser_page.scroll(direction="down", amount=300)
    assert box.js("Math.round(window.scrollY)") > 200


@case("browser_page.click")
def _(box):
    box.client.browser_page.scroll_to(x=0, y=0)
    box.client.browser_page.click(selector="#name")
    assert box.js("document.activeElement.id") == "name"


@case("browser_page.type_text")
def _(box):
    box.js("document.querySelector('#name').value = ''")
    box.client.browser_page.click(selector="#name")
    box.client.browser_page.type_text(text="typed")
    assert box.js("document.querySelector('#name').value") == "typed"


@case("browser_page.press_key")
def _(box):
    box.client.browser_page.press_key(key="Escape")
    assert "Escape" in box.js("window.keys")


@case("browser_page.hot_key")
def _(box):
    box.client.browser_page.click(selector="#name")
    box.client.browser_page.hot_key(keys=["Control", "a"])
    assert box.js("document.querySelector('#name').selectionEnd - document.querySelector('#name').selectionStart") == 5


@case("browser_page.hover")
def _(box):
    box.js("window.hovered = false; document.querySelector('#next').onmouseover = () => window.hovered = true")
    box.client.browser_page.hover(selector="#next")
    assert box.js("window.hovered") is True


@case("browser_page.get_console")
def _(box):
    lines = box.client.browser_page.get_console().data
    assert "sweep console line" in json.dumps(lines)


@case("browser_page.export_console")
def _(box):
    path = f"{WORKSPACE}/sweep/console.json"
    box.client.browser_page.export_console(save_path=path)
    assert "sweep console line" in box.sh(f"cat {path}")


@case("browser_page.screenshot")
def _(box):
    data = b"".join(box.client.browser_page.screenshot(format="png"))
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


@case("browser_page.wait")
def _(box):
    box.js("setTimeout(() => { const d = document.createElement('div'); d.id = 'late'; d.textContent = 'late'; document.body.append(d) }, 300)")
    answer = box.client.browser_page.wait(type="selector", selector="#late", timeout=10)
    assert answer.success and box.js("!!document.querySelector('#late')") is True


@case("browser_page.reload")
def _(box):
    box.js("window.marker = 1")
    box.client.browser_page.reload()
    assert box.js("typeof window.marker") == "undefined"


@case("browser_page.back")
def _(box):
    box.client.browser_page.navigate(url=f"{box.origin}/second.html")
    box.client.browser_page.back()
    assert box.js("location.pathname") == "/page.html"


@case("browser_page.forward")
def _(box):
    box.client.browser_page.forward()
    assert box.js("location.pathname") == "/second.html"


@case("browser_page.record")
def _(box):
    box.page()
    path = f"{WORKSPACE}/sweep/page.webm"
    answer = box.client.browser_page.record(action="once", save_path=path, duration=1, fps=5)
    assert answer.success
    saved = answer.data.get("path") or answer.data.get("save_path") or path
    assert int(box.sh(f"stat -c %s {saved}")) > 0


@case("browser_tabs.list")
def _(box):
    tabs = box.client.browser_tabs.list().data
    box.saved["tabs"] = len(tabs)
    assert tabs


@case("browser_tabs.create")
def _(box):
    box.client.browser_tabs.create(url=f"{box.origin}/second.html")
    assert len(box.client.browser_tabs.list().data) == box.saved["tabs"] + 1


@case("browser_tabs.activate")
def _(box):
    box.client.browser_tabs.activate(index=0)
    assert box.js("location.pathname") == "/page.html"


@case("browser_tabs.close")
def _(box):
    last = len(box.client.browser_tabs.list().data) - 1
    box.client.browser_tabs.close(index=last)
    assert len(box.client.browser_tabs.list().data) == box.saved["tabs"]


@case("browser_cookies.set_cookies")
def _(box):
    box.page()
    box.client.browser_cookies.set_cookies(cookies=[{"name": "sweep", "value": "c1", "url": box.origin}])
    assert "sweep=c1" in box.js("document.cookie")


@case("browser_cookies.get_cookies")
def _(box):
    cookies = box.client.browser_cookies.get_cookies(urls=box.origin).data
    assert {"sweep": "c1"}.items() <= {c["name"]: c["value"] for c in cookies}.items()


@case("browser_state.save")
def _(box):
    box.js("localStorage.setItem('sweep', 'kept')")
    path = f"{WORKSPACE}/sweep/state.json"
    box.client.browser_state.save(path=path)
    assert "sweep" in box.sh(f"cat {path}")
    box.saved["state"] = path


@case("browser_cookies.clear_cookies")
def _(box):
    box.client.browser_cookies.clear_cookies()
    assert "sweep=c1" not in box.js("document.cookie")


@case("browser_state.load")
def _(box):
    box.js("localStorage.clear()")
    box.client.browser_state.load(path=box.saved["state"])
    box.page()
    assert box.js("localStorage.getItem('sweep')") == "kept"
    assert "sweep=c1" in box.js("document.cookie")


@case("browser_network.get_requests")
def _(box):
    box.page()
    requests = box.client.browser_network.get_requests(limit=50).data
    assert any("/page.html" in r["url"] for r in requests)


@case("browser_network.set_headers")
def _(box):
    box.client.browser_network.set_headers(headers={"X-Sweep": "all"})
    box.client.browser_page.navigate(url=f"{box.echo}/")
    assert json.loads(box.client.browser_page.get_text().data)["x-sweep"] == "all"


@case("browser_network.set_scoped_headers")
def _(box):
    box.client.browser_network.set_headers(headers={})
    box.client.browser_network.set_scoped_headers(origin=box.echo, headers={"X-Scoped": "yes"})
    box.client.browser_page.navigate(url=f"{box.echo}/")
    sent = json.loads(box.client.browser_page.get_text().data)
    assert sent["x-scoped"] == "yes" and "x-sweep" not in sent


@case("browser_network.add_route")
def _(box):
    box.page()  # the test site, which has no mocked.txt
    box.client.browser_network.add_route(
        url_pattern="*/mocked.txt",
        response=RouteResponseModel(status=200, body="mocked body", content_type="text/plain"),
    )
    text = box.js("fetch('/mocked.txt', {cache: 'no-store'}).then(r => r.text())")
    assert text == "mocked body"


@case("browser_network.remove_route")
def _(box):
    box.client.browser_network.remove_route(url_pattern="*/mocked.txt")
    status = box.js("fetch('/mocked.txt', {cache: 'no-store'}).then(r => r.status)")
    assert status == 404


@case("browser_network.export_har")
def _(box):
    path = f"{WORKSPACE}/sweep/net.har"
    box.client.browser_network.export_har(save_path=path)
    har = json.loads(box.sh(f"cat {path}"))
    assert har["log"]["entries"]


@case("browser_captcha.detect")
def _(box):
    box.page()
    answer = box.client.browser_captcha.detect()
    assert answer.success and "false" in json.dumps(answer.data).lower()


@case("browser_captcha.wait")
def _(box):
    answer = box.client.browser_captcha.wait(timeout=2, poll_interval=0.2)
    assert answer.data.resolved is True


@case("browser.execute_action")
def _(box):
    box.client.browser.execute_action(request=Action_MoveTo(x=321, y=234))
    assert "X=321" in box.exec("xdotool", "getmouselocation", "--shell")


@case("browser.screenshot")
def _(box):
    data = b"".join(box.client.browser.screenshot())
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


@case("browser.set_config")
def _(box):
    answer = box.client.browser.set_config(resolution=Resolution(width=1024, height=768))
    assert answer.success
    box.page()
    assert box.js("[window.innerWidth, window.innerHeight]") == [1024, 768]


@case("browser.restart")
def _(box):
    before = box.client.browser.get_info().data
    assert box.client.browser.restart().success
    box.page()
    assert box.js("document.title") == "Sweep page"
    assert before is not None


@case("display.record")
def _(box):
    path = f"{WORKSPACE}/sweep/desktop.mp4"
    started = box.client.display.record(action="start", save_path=path, fps=5, max_duration=30)
    assert started.success
    time.sleep(1)
    stopped = box.client.display.record(action="stop")
    assert stopped.success
    assert int(box.sh(f"stat -c %s {path}")) > 0


# skills


def skill_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("sweep-skill/SKILL.md", SKILL)
    return buffer.getvalue()


@case("skills.register_skills")
def _(box):
    answer = box.client.skills.register_skills(file=("skills.zip", skill_zip(), "application/zip"))
    assert answer.data.count == 1
    assert "sweep-skill" in [s.name for s in answer.data.registered]


@case("skills.list_metadata")
def _(box):
    skills = box.client.skills.list_metadata().data
    assert "sweep-skill" in json.dumps(skills.model_dump())


@case("skills.get_content")
def _(box):
    content = box.client.skills.get_content(name="sweep-skill").data
    assert "Say hello." in content.content and "description:" not in content.content


@case("skills.delete_skill")
def _(box):
    box.client.skills.delete_skill(name="sweep-skill")
    assert "sweep-skill" not in json.dumps(box.client.skills.list_metadata().data.model_dump())


@case("skills.clear_skills")
def _(box):
    box.client.skills.register_skills(file=("skills.zip", skill_zip(), "application/zip"))
    box.client.skills.clear_skills()
    assert "sweep-skill" not in json.dumps(box.client.skills.list_metadata().data.model_dump())


# --- not served by design ------------------------------------------------------------------
# `method -> (call, what the 501's message names)`. The egress proxy is enforced outside the
# container, where code in the sandbox cannot change it (sandboxd/src/api/unsupported.rs).

UNSUPPORTED = {
    "browser.get_proxy_pac": (lambda c: c.browser.get_proxy_pac(), "proxy"),
    "proxy.add_exclude": (lambda c: c.proxy.add_exclude(pattern="*.example.com"), "proxy"),
    "proxy.add_mapping": (lambda c: c.proxy.add_mapping(source="a.test", target="b.test"), "proxy"),
    "proxy.diagnose": (lambda c: c.proxy.diagnose(url="https://example.com"), "proxy"),
    "proxy.get_upstream": (lambda c: c.proxy.get_upstream(), "proxy"),
    "proxy.list_excludes": (lambda c: c.proxy.list_excludes(), "proxy"),
    "proxy.list_mappings": (lambda c: c.proxy.list_mappings(), "proxy"),
    "proxy.remove_exclude": (lambda c: c.proxy.remove_exclude(pattern="*.example.com"), "proxy"),
    "proxy.remove_mapping": (lambda c: c.proxy.remove_mapping(source="a.test"), "proxy"),
    "proxy.remove_upstream": (lambda c: c.proxy.remove_upstream(), "proxy"),
    "proxy.set_upstream": (lambda c: c.proxy.set_upstream(server="http://10.0.0.1:3128"), "proxy"),
}


def sdk_methods() -> set[str]:
    client = Sandbox(base_url="http://127.0.0.1:9")
    methods = set()
    for family in dir(client):
        sub = getattr(client, family)
        if family.startswith("_") or not hasattr(sub, "with_raw_response"):
            continue
        for name, member in inspect.getmembers(sub):
            if not name.startswith("_") and name != "with_raw_response" and callable(member):
                methods.add(f"{family}.{name}")
    return methods


def check_coverage() -> None:
    """The table and the SDK are in step: every SDK method has a case or a documented refusal."""
    methods = sdk_methods()
    assert len(methods) == 131, "agent-sandbox 0.0.30 has 131 methods"
    assert not set(CASES) & set(UNSUPPORTED)
    assert set(CASES) | set(UNSUPPORTED) == methods, {
        "missing": sorted(methods - set(CASES) - set(UNSUPPORTED)),
        "unknown": sorted((set(CASES) | set(UNSUPPORTED)) - methods),
    }


def run_case(box: Box, method: str) -> None:
    """Runs a method's case, recording whether its call and its effect were checked."""
    box.outcomes[method] = "partial"
    CASES[method](box)
    box.outcomes[method] = "checked"


def run_refusal(box: Box, method: str, refusals: dict | None = None) -> None:
    """Calls a method that is not served (by sandboxd: ``UNSUPPORTED``; or the ones given): a
    501 naming what is not supported."""
    box.outcomes[method] = "partial"
    call, named = (refusals or UNSUPPORTED)[method]
    with pytest.raises(ApiError) as refused:
        call(box.client)
    assert refused.value.status_code == 501, (refused.value.status_code, refused.value.body)
    assert named in json.dumps(refused.value.body)
    box.outcomes[method] = "refused"


def summary(box: Box, where: str) -> tuple[str, list[str]]:
    """The sweep's summary line, and the methods that were not fully checked (partial or not
    run), for the last test of a run to print and assert."""
    methods = sorted(sdk_methods())
    outcomes = [box.outcomes.get(m, "not run") for m in methods]
    line = (
        f"SDK sweep ({where}): {len(methods)} methods, {outcomes.count('checked')} checked with "
        f"their effect, {outcomes.count('refused')} documented refusals (501), "
        f"{outcomes.count('partial')} partial"
    )
    if outcomes.count("not run"):
        line += f", {outcomes.count('not run')} not run"
    short = [m for m, o in zip(methods, outcomes) if o not in ("checked", "refused")]
    return line, short
