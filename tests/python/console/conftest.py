"""Fixtures for the web console's end-to-end tests: a real orchestrator (ORCHESTRATOR_BIN, default
target/release/orchestrator) with the real sandbox image and its own scripts folder (the bundled
demo and a slower copy of it for watching and taking over), a TCP relay in front of it whose
connections the tests can cut (a network drop, as the browser sees one), and Debian's Chromium
driven by Playwright (CHROMIUM, default /usr/bin/chromium)."""

import json
import os
import pathlib
import secrets
import sys
import shutil
import socket
import tempfile
import threading

import pytest
import requests

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from orchestrator_process import OrchestratorProcess  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
ADMIN_KEY = "console-admin-key-" + secrets.token_hex(16)
SHOTS = pathlib.Path(os.environ.get("AGENTBOX_CONSOLE_SHOTS", ROOT / "target/console-screenshots"))

# Files an agent could write to attack the console's origin: if either ran as script on the
# orchestrator's origin it would set window.pwned (and could call the API with the cookie).
EVIL_HTML = "<html><body><script>window.pwned = 1; fetch('/v1/keys', {method: 'POST', body: '{}'});</script>evil</body></html>"
EVIL_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
            '<script>window.pwned = 1;</script><rect width="10" height="10" fill="red"/></svg>')


def console_demo():
    """The bundled demo with a slower start: the agent 'drives' (sleeps, the pointer still) long
    enough for a person to try the desktop, take over and hand back, then draws the triangle."""
    demo = json.loads((ROOT / "examples/draw-red-triangle.json").read_text())
    attack = (
        "mkdir -p ~/outputs && printf '%s' " + _shell_quote(EVIL_HTML) + " > ~/outputs/evil.html"
        " && printf '%s' " + _shell_quote(EVIL_SVG) + " > ~/outputs/evil.svg"
    )
    prefix = [{"action": "SHELL", "comment": "Files that would attack the console if served as pages.",
               "command": attack, "timeout_s": 10}]
    prefix += [{"action": "SHELL", "comment": "The agent is busy.", "command": "sleep 2", "timeout_s": 10}
               for _ in range(8)]
    prefix += [{"action": "SHELL", "comment": "Still busy after the hand-back.", "command": "sleep 1",
                "timeout_s": 10} for _ in range(6)]
    steps = demo["steps"] if isinstance(demo, dict) else demo
    # Two live viewers keep the X server busier than the demo alone: strokes are paced at 5 ms a
    # point at least, so mtPaint joins every point (at 2 ms one stroke in two runs had a gap).
    steps = [{**step, "step_ms": max(step.get("step_ms", 0), 5)} if step.get("action") == "DRAG_PATH" else step
             for step in steps]
    return {**demo, "name": "console-demo", "steps": prefix + steps}


def _shell_quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


class Relay:
    """A TCP relay: the browser talks to the orchestrator through it; `cut()` closes every
    connection open now, both ways, as a dropped network would."""

    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.open = []
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.open.append((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self.lock:
            pairs, self.open = self.open, []
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
        self.cuts += 1
        return len(pairs)

    def close(self):
        self.listener.close()
        self.cut()


class Orchestrator(OrchestratorProcess):
    def __init__(self):
        self.scripts = tempfile.TemporaryDirectory()
        shutil.copy(ROOT / "examples/draw-red-triangle.json", self.scripts.name)
        pathlib.Path(self.scripts.name, "console-demo.json").write_text(json.dumps(console_demo(), indent=1))
        pathlib.Path(self.scripts.name, "ask.json").write_text(json.dumps([
            {"action": "REQUEST_HUMAN", "question": "Which colour should the triangle be?"},
            {"action": "FINAL", "answer": "Asked and was answered."},
        ]))
        super().__init__(ADMIN_KEY, "pyconsole-", ["--scripts-dir", self.scripts.name])
        # The orchestrator itself, for the tests' own API calls.
        self.direct = self.url
        self.relay = Relay(int(self.direct.rsplit(":", 1)[1]))
        # What the browser uses: through the relay.
        self.url = f"http://127.0.0.1:{self.relay.port}"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {ADMIN_KEY}"

    def api(self, method, path, **kwargs):
        return self.session.request(method, self.direct + path, timeout=120, **kwargs)

    def cursor(self, sandbox_id):
        answer = self.api("POST", f"/v1/sandboxes/{sandbox_id}/api/v1/browser/actions",
                          json={"action_type": "CURSOR_POSITION"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        cursor = (body.get("data") or {}).get("cursor") or body.get("cursor")
        assert cursor, body
        return cursor["x"], cursor["y"]

    def close(self):
        if hasattr(self, "relay"):
            self.relay.close()
        super().close()
        self.scripts.cleanup()


@pytest.fixture(scope="module")
def orchestrator():
    server = Orchestrator()
    yield server
    server.close()


# What the browser's pages saw during the current test (console messages, script errors,
# failed requests and error answers), printed with the orchestrator's last log lines when the
# test fails: a page stuck at "loading" then says which request it waited for or lost.
JOURNAL = []


def _watch(page):
    name = lambda: page.url.split("/", 3)[-1] if page.url.count("/") >= 3 else page.url  # noqa: E731
    page.on("console", lambda m: JOURNAL.append(f"[{name()}] console.{m.type}: {m.text}"))
    page.on("pageerror", lambda e: JOURNAL.append(f"[{name()}] script error: {e}"))
    page.on("requestfailed", lambda r: JOURNAL.append(f"[{name()}] failed: {r.method} {r.url} ({r.failure})"))
    page.on("requestfailed", lambda r: _reload_after_network_change(page, r))
    page.on("response", lambda r: r.status >= 400 and JOURNAL.append(f"[{name()}] {r.status}: {r.request.method} {r.url}"))


# Chromium aborts loads in flight with ERR_NETWORK_CHANGED when an interface on the host comes
# or goes, and other tests make Docker networks all along: a page that lost its document, a
# script or a stylesheet that way is loaded again (a few times at most), as a person would.
NETWORK_CHANGED_RELOADS = 3


def _reload_after_network_change(page, request):
    if "ERR_NETWORK_CHANGED" not in (request.failure or ""):
        return
    if request.resource_type not in ("document", "script", "stylesheet"):
        return
    done = getattr(page, "_network_changed_reloads", 0)
    if done >= NETWORK_CHANGED_RELOADS:
        return
    page._network_changed_reloads = done + 1
    JOURNAL.append(f"reloading {page.url} after ERR_NETWORK_CHANGED ({done + 1})")
    try:
        page.reload()
    except Exception as error:  # noqa: BLE001 - a page gone meanwhile: nothing to reload
        JOURNAL.append(f"reload failed: {error}")


class WatchedBrowser:
    """The Playwright browser, with every page of every context it makes watched."""

    def __init__(self, browser):
        self._browser = browser

    def new_context(self, **kwargs):
        context = self._browser.new_context(**kwargs)
        context.on("page", _watch)
        return context

    def __getattr__(self, name):
        return getattr(self._browser, name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "setup":
        JOURNAL.clear()
    if report.when == "call" and report.failed:
        report.sections.append(("what the browser's pages saw", "\n".join(JOURNAL[-200:]) or "nothing"))
        server = item.funcargs.get("orchestrator")
        if server is not None:
            report.sections.append(("the orchestrator's last log lines", "".join(server.logs[-150:])))


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    executable = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if not os.path.exists(executable):
        raise RuntimeError(f"{executable} is missing: apt-get install chromium (Debian's package)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield WatchedBrowser(browser)
        browser.close()


@pytest.fixture(scope="module")
def admin_key():
    return ADMIN_KEY


@pytest.fixture(scope="module")
def shots():
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS
