"""AIO Sandbox's README examples, as its README gives them (github.com/agent-infra/sandbox,
README.md, "Basic Usage" (Python) and "Complete Example"; Apache-2.0), for the tests that run
them against sandboxd directly (sandbox/test_aio_code.py) and through the orchestrator
(orchestrator/test_orchestrator_clients.py).

Only three things are substituted, each marked ``# substituted:``:
- the base URL (``http://localhost:8080`` in the README);
- the ``headers`` of ``Sandbox(...)``: ``None`` (as in the README) against a sandboxd without a
  key; the orchestrator's key through the orchestrator, which requires one;
- the page the browser opens (``https://example.com`` in the README): there is no internet here.

Everything else, the async Playwright over ``browser.get_info().data.cdp_url`` with no header and
``new_page()`` on the browser included, is the README's code; the tests check what it did.
"""

import base64

from agent_sandbox import Sandbox
from playwright.async_api import async_playwright


def basic_usage(base_url: str, headers: dict | None):
    """The README's "Basic Usage" Python example; returns what it made, for the test to check."""
    # Initialize client
    client = Sandbox(base_url=base_url, headers=headers)  # substituted: base URL, headers
    home_dir = client.sandbox.get_context().home_dir

    # Execute shell commands
    result = client.shell.exec_command(command="ls -la")
    print(result.data.output)

    # File operations
    content = client.file.read_file(file=f"{home_dir}/.bashrc")
    print(content.data.content)

    # Browser automation
    screenshot = client.browser.screenshot()
    return home_dir, result, content, screenshot


async def site_to_markdown(base_url: str, headers: dict | None, page_url: str):
    """The README's "Complete Example": a page to Markdown with an embedded screenshot."""
    # Initialize sandbox client
    c = Sandbox(base_url=base_url, headers=headers)  # substituted: base URL, headers
    home_dir = c.sandbox.get_context().home_dir

    # Browser: Automation to download HTML
    async with async_playwright() as p:
        browser_info = c.browser.get_info().data
        page = await (await p.chromium.connect_over_cdp(browser_info.cdp_url)).new_page()
        await page.goto(page_url, wait_until="networkidle")  # substituted: the page
        html = await page.content()
        screenshot_b64 = base64.b64encode(await page.screenshot()).decode('utf-8')

    # Jupyter: Convert HTML to markdown in sandbox
    c.jupyter.execute_code(code=f"""
from markdownify import markdownify
html = '''{html}'''
screenshot_b64 = "{screenshot_b64}"

md = f"{{markdownify(html)}}\\n\\n![Screenshot](data:image/png;base64,{{screenshot_b64}})"
with open('{home_dir}/site.md', 'w') as f:
    f.write(md)
print("Done!")
""")

    # Shell: List files in sandbox
    list_result = c.shell.exec_command(command=f"ls -lh {home_dir}")
    print(f"Files in sandbox: {list_result.data.output}")

    # File: Read the generated markdown
    return c.file.read_file(file=f"{home_dir}/site.md").data.content


# The page the tests open instead of https://example.com, written into the sandbox first.
PAGE = "<html><body><h1>Agentbox</h1><p>A <b>computer</b> for agents.</p></body></html>"


def check_site_markdown(markdown: str) -> None:
    """What the Complete Example must have written: the page as Markdown, then the screenshot."""
    assert "Agentbox\n========" in markdown, markdown[:200]
    assert "A **computer** for agents." in markdown, markdown[:200]
    assert "\n\n![Screenshot](data:image/png;base64,iVBORw0KGgo" in markdown, markdown[:300]
