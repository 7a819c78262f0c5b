"""The agent-sandbox SDK and Python Playwright, pointed at the orchestrator's proxies with the
orchestrator's API key (never the sandbox's own key)."""

import asyncio
import pathlib
import sys

import requests
import pytest
from agent_sandbox import Sandbox
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import aio_readme  # noqa: E402


def test_sdk_reads_the_context_through_the_proxy(sandbox, admin_key):
    client = Sandbox(base_url=sandbox["urls"]["api"], headers={"Authorization": f"Bearer {admin_key}"})
    context = client.sandbox.get_context()
    assert context.home_dir == "/home/agent"
    assert context.workspace == "/home/agent/workspace"


def test_sdk_is_refused_without_the_orchestrator_key(sandbox):
    client = Sandbox(base_url=sandbox["urls"]["api"], headers={"Authorization": "Bearer wrong"})
    with pytest.raises(Exception) as raised:
        client.sandbox.get_context()
    assert "401" in str(raised.value)


def test_sdk_shell_exec_through_the_proxy(sandbox, admin_key):
    client = Sandbox(base_url=sandbox["urls"]["api"], headers={"Authorization": f"Bearer {admin_key}"})
    result = client.shell.exec_command(command="echo hello-from-$(whoami)")
    assert "hello-from-agent" in result.data.output


def test_sdk_screenshot_through_the_proxy(sandbox, admin_key):
    client = Sandbox(base_url=sandbox["urls"]["api"], headers={"Authorization": f"Bearer {admin_key}"})
    png = b"".join(client.browser.screenshot())
    assert png.startswith(b"\x89PNG")
    assert int.from_bytes(png[16:20], "big") == 1280


def test_playwright_attaches_over_cdp_through_the_orchestrator(sandbox, admin_key):
    endpoint = sandbox["urls"]["cdp"].replace("ws://", "http://", 1)
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(endpoint, headers={"Authorization": f"Bearer {admin_key}"}, timeout=60_000)
        context = browser.contexts[0] if browser.contexts else browser.new_context()
        page = context.new_page()
        page.set_content("<h1 id='t'>through the orchestrator</h1>")
        assert page.inner_text("#t") == "through the orchestrator"
        assert page.evaluate("1 + 2") == 3
        page.close()
        browser.close()


def test_playwright_needs_credentials(sandbox):
    endpoint = sandbox["urls"]["cdp"].replace("ws://", "http://", 1)
    assert requests.get(endpoint + "/json/version", timeout=30).status_code == 401
    with sync_playwright() as p:
        with pytest.raises(Exception):
            p.chromium.connect_over_cdp(endpoint, timeout=20_000)


def test_aio_readme_cdp_example_works_through_the_orchestrator(orchestrator, sandbox, admin_key):
    """AIO's README: `cdp_url = client.browser.get_info().data.cdp_url`, then Playwright's
    `connect_over_cdp(cdp_url)` with no headers. Through the orchestrator the reported URLs are
    the orchestrator's own, carrying short-lived credentials: the CDP one opens DevTools and
    nothing else, the viewer one watches."""
    client = Sandbox(base_url=sandbox["urls"]["api"], headers={"Authorization": f"Bearer {admin_key}"})
    info = client.browser.get_info().data
    ws_base = orchestrator.url.replace("http://", "ws://", 1)
    assert info.cdp_url.startswith(f"{ws_base}/v1/sandboxes/{sandbox['id']}/cdp?token="), info.cdp_url
    assert info.vnc_url.startswith(f"{orchestrator.url}/v1/sandboxes/{sandbox['id']}/vnc/?token="), info.vnc_url
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(info.cdp_url, timeout=60_000)
        context = browser.contexts[0] if browser.contexts else browser.new_context()
        page = context.new_page()
        page.set_content("<h1 id='t'>as in AIO's README</h1>")
        assert page.inner_text("#t") == "as in AIO's README"
        page.close()
        browser.close()

    # The viewer link opens the viewer (token traded for a cookie)...
    viewer = requests.get(info.vnc_url, allow_redirects=False, timeout=30)
    assert viewer.status_code == 303, viewer.text
    # ...and the CDP credential opens no viewer, no share page, and mints nothing.
    cdp_token = info.cdp_url.split("token=", 1)[1]
    refused = requests.get(
        f"{orchestrator.url}/v1/sandboxes/{sandbox['id']}/vnc/?token={cdp_token}", allow_redirects=False, timeout=30
    )
    assert refused.status_code == 403, refused.text
    minted = requests.post(
        f"{orchestrator.url}/v1/sandboxes/{sandbox['id']}/tokens",
        json={"scope": "cdp"},
        headers={"Authorization": f"Bearer {admin_key}"},
        timeout=30,
    )
    assert minted.status_code == 422, minted.text
    assert "scope" in minted.json()["error"]["message"]


def test_aio_readme_example_runs_unchanged_through_the_orchestrator(sandbox, admin_key):
    """AIO's README examples as written (tests/python/aio_readme.py), through the orchestrator's
    proxy: "Basic Usage" and the "Complete Example" (async Playwright over the reported
    ``cdp_url`` with no header, ``new_page()`` on the browser, the Jupyter cell importing
    ``markdownify``). Substituted: the base URL (the sandbox's ``urls.api``), the header (the
    orchestrator requires its key; the README's sandbox has none) and the page (no internet
    here: a file in the sandbox)."""
    headers = {"Authorization": f"Bearer {admin_key}"}
    home_dir, result, content, screenshot = aio_readme.basic_usage(sandbox["urls"]["api"], headers)
    assert home_dir == "/home/agent"
    assert result.data.output.startswith("total "), result.data.output
    assert content.data.content is not None
    png = b"".join(screenshot)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 1280

    client = Sandbox(base_url=sandbox["urls"]["api"], headers=headers)
    client.file.write_file(file=f"{home_dir}/page.html", content=aio_readme.PAGE)
    markdown = asyncio.run(
        aio_readme.site_to_markdown(sandbox["urls"]["api"], headers, f"file://{home_dir}/page.html")
    )
    aio_readme.check_site_markdown(markdown)
    # The file it wrote in the sandbox is the Markdown it read back.
    size = client.shell.exec_command(command=f"wc -c < {home_dir}/site.md").data.output
    assert int(size.strip()) == len(markdown.encode()), size
