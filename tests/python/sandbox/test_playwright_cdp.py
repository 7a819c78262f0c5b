"""Python Playwright attaching to the sandbox's Chromium over CDP from outside the container."""

from playwright.sync_api import sync_playwright


def test_connect_over_cdp_and_open_a_page_served_in_the_container(sandbox):
    sandbox.exec("sh", "-c", "mkdir -p /tmp/site && echo '<title>inside</title><h1 id=h>served in the sandbox</h1>' > /tmp/site/index.html")
    sandbox.exec("sh", "-c", "(python3 -m http.server 8765 --bind 127.0.0.1 --directory /tmp/site >/dev/null 2>&1 &)")
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(sandbox.cdp_url, headers=sandbox.headers())
        context = browser.contexts[0]
        page = context.new_page()
        for _ in range(50):
            try:
                page.goto("http://127.0.0.1:8765/", timeout=5000)
                break
            except Exception:
                page.wait_for_timeout(100)
        assert page.title() == "inside"
        assert page.inner_text("#h") == "served in the sandbox"
        assert browser.version
        page.close()
        browser.close()


def test_cdp_is_refused_without_the_key(sandbox):
    with sync_playwright() as p:
        try:
            p.chromium.connect_over_cdp(sandbox.cdp_url, timeout=20_000)
        except Exception as error:  # Playwright reports the 401 from /cdp/json/version
            assert "401" in str(error), error
        else:
            raise AssertionError("connect_over_cdp without the key succeeded")


def test_the_cdp_url_from_browser_info_works_as_given_with_the_key(client, sandbox):
    # The URL AIO's SDK reports, used unchanged: through sandboxd's port, at the host the
    # client reached it at (not the container's own 9222).
    cdp_url = client.browser.get_info().data.cdp_url
    assert cdp_url.startswith(f"ws://{sandbox.ip}:8080/cdp/devtools/browser/"), cdp_url
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(cdp_url, headers=sandbox.headers())
        assert browser.version and browser.contexts
        browser.close()
        try:
            p.chromium.connect_over_cdp(cdp_url, timeout=20_000)
        except Exception as error:
            assert "401" in str(error), error
        else:
            raise AssertionError("connect_over_cdp without the key succeeded")
