"""The terminal page (``/terminal``) in a real headless Chromium, opened with the link AIO's SDK
gets from ``shell.get_terminal_url``: typing a command runs it in a shell as the agent user.
And the attacks on its access: no credential, a used ticket, a desktop ticket, a view-only
request and the terminal session used elsewhere are all refused."""

import json
import os
import time
import urllib.error
import urllib.request

import pytest


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    executable = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


def terminal_text(page) -> str:
    return page.evaluate(
        """() => {
          const t = window.agentboxTerminal;
          const b = (t.buffer && t.buffer.active) || t.buffer;
          const lines = [];
          for (let i = 0; i < b.length; i++) {
            const line = b.getLine(i);
            if (line) lines.push(line.translateToString(true));
          }
          return lines.join('\\n');
        }"""
    )


def get(url: str, headers: dict | None = None):
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def test_the_link_opens_a_terminal_that_runs_commands(client, sandbox, browser):
    url = client.shell.get_terminal_url().data
    assert url.startswith(sandbox.base_url + "/terminal?ticket=")
    context = browser.new_context()
    page = context.new_page()
    page.goto(url)
    assert "ticket" not in page.url, "the ticket is taken out of the address bar"
    page.wait_for_selector("body[data-ready='true']", timeout=30_000)
    page.click("#terminal")
    page.keyboard.type("echo term-$((6*7)) $(whoami)\n")
    deadline = time.monotonic() + 20
    while "term-42 agent" not in terminal_text(page) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "term-42 agent" in terminal_text(page)
    # The page's policy: scripts and connections from this origin only.
    csp = page.evaluate("fetch('/terminal').then(r => r.headers.get('content-security-policy'))")
    assert "script-src 'self'" in csp and "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
    # The session cookie is for the terminal page only.
    cookies = context.cookies()
    assert [(c["name"], c["path"], c["httpOnly"], c["sameSite"]) for c in cookies] == [
        ("sandboxd_terminal", "/terminal", True, "Strict")
    ]
    session = cookies[0]["value"]
    context.close()

    # Attack: the terminal session cookie opens neither the API nor the desktop.
    for path in ("/v1/sandbox", "/v1/shell/ws", "/vnc/vnc.html"):
        status, _, _ = get(sandbox.base_url + path, {"Cookie": f"sandboxd_terminal={session}; sandboxd_viewer={session}"})
        assert status == 401, path
    # ... and a used ticket does not open the page again.
    status, _, _ = get(url)
    assert status == 401


def test_the_page_needs_a_terminal_credential(client, sandbox):
    # Attack: no credential.
    for path in ("/terminal", "/terminal/terminal.js", "/terminal/xterm.js", "/terminal/ws"):
        assert get(sandbox.base_url + path)[0] == 401, path
    # Attack: a desktop ticket, full or view-only, does not open the terminal.
    for view_only in (False, True):
        status, issued = sandbox.request("POST", "/tickets", {"view_only": view_only})
        assert status == 200
        status, _, body = get(f"{sandbox.base_url}/terminal?ticket={issued['data']['ticket']}")
        assert status == 401 and "terminal" in json.loads(body)["message"]
    # Attack: a terminal ticket does not open the desktop.
    status, issued = sandbox.request("POST", "/tickets", {"terminal": True})
    assert status == 200 and issued["data"]["viewer_path"].startswith("/terminal?ticket=")
    status, _, _ = get(f"{sandbox.base_url}/vnc/vnc.html?ticket={issued['data']['ticket']}")
    assert status == 401
    # A view-only terminal makes no sense: refused, naming the field.
    status, body = sandbox.request("POST", "/tickets", {"terminal": True, "view_only": True})
    assert status == 422 and "terminal" in json.dumps(body)
    # With the key, the page and xterm.js are served.
    status, headers, body = get(sandbox.base_url + "/terminal/xterm.js", sandbox.headers())
    assert status == 200 and len(body) > 100_000 and "javascript" in headers["content-type"]
    status, _, _ = get(sandbox.base_url + "/terminal/../etc/passwd", sandbox.headers())
    assert status in (400, 404)
