"""The agent-sandbox SDK and Python Playwright, pointed at the orchestrator's proxies with the
orchestrator's API key (never the sandbox's own key)."""

import requests
import pytest
from agent_sandbox import Sandbox
from playwright.sync_api import sync_playwright


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
    """AIO's README example, unchanged but for the URL and key: context, a shell command, a file
    read, then its site-to-Markdown cell (the browser over the reported CDP URL with no
    headers, a Jupyter cell importing ``markdownify``), all through the orchestrator's proxy.
    Only the page differs: no internet here, so it is a file."""
    import base64

    client = Sandbox(base_url=sandbox["urls"]["api"], headers={"Authorization": f"Bearer {admin_key}"})
    home_dir = client.sandbox.get_context().home_dir
    assert client.shell.exec_command(command="ls -la").data.output
    assert client.file.read_file(file=f"{home_dir}/.bashrc").data.content is not None
    client.file.write_file(
        file=f"{home_dir}/page.html",
        content="<html><body><h1>Agentbox</h1><p>A <b>computer</b> for agents.</p></body></html>",
    )
    cdp_url = client.browser.get_info().data.cdp_url
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(cdp_url, timeout=60_000)
        page = browser.contexts[0].new_page()
        page.goto(f"file://{home_dir}/page.html", wait_until="networkidle")
        html = page.content()
        screenshot_b64 = base64.b64encode(page.screenshot()).decode("utf-8")
        page.close()
        browser.close()
    answer = client.jupyter.execute_code(
        code=f"""
from markdownify import markdownify
html = '''{html}'''
screenshot_b64 = "{screenshot_b64}"

md = f"{{markdownify(html)}}\\n\\n![Screenshot](data:image/png;base64,{{screenshot_b64}})"

with open('{home_dir}/site.md', 'w') as f:
    f.write(md)

print("Done!")
"""
    )
    assert answer.data.status == "ok", answer.data.outputs
    assert answer.data.outputs[0].text == "Done!\n"
    assert "site.md" in client.shell.exec_command(command=f"ls -lh {home_dir}/site.md").data.output
    content = client.file.read_file(file=f"{home_dir}/site.md").data.content
    assert "Agentbox\n========" in content, content[:200]
    assert "![Screenshot](data:image/png;base64,iVBORw0KGgo" in content
