"""AIO's ``client.util.convert_to_markdown`` through AIO's own SDK, unchanged, against sandboxd
in the image: HTML from a data: URI, a file, and a page the browser loads; refusals name the
field or the policy."""

import base64

import pytest
from agent_sandbox.core.api_error import ApiError
from agent_sandbox.types import Response

PAGE = "<html><body><h1>Report</h1><p>Some <b>bold</b> text, <a href='https://example.com/x'>a link</a>.</p><ul><li>one<li>two</ul></body></html>"


def test_a_data_uri_of_html_becomes_markdown(client):
    uri = "data:text/html;base64," + base64.b64encode(PAGE.encode()).decode()
    answer = client.util.convert_to_markdown(uri=uri)
    assert isinstance(answer, Response)
    md = answer.data
    assert "# Report" in md and "**bold**" in md and "[a link](https://example.com/x)" in md, md


def test_a_file_becomes_markdown_and_the_path_is_confined(client):
    client.file.write_file(file="/home/agent/workspace/page.html", content=PAGE)
    md = client.util.convert_to_markdown(uri="file:///home/agent/workspace/page.html").data
    assert "# Report" in md, md
    assert "# Report" in client.util.convert_to_markdown(uri="/home/agent/workspace/page.html").data
    with pytest.raises(ApiError) as refused:
        client.util.convert_to_markdown(uri="/etc/hostname")
    assert refused.value.status_code == 403


def test_a_page_is_read_by_the_browser_in_a_tab_of_its_own(client, sandbox):
    # A page served inside the sandbox; the URL policy allows loopback only when configured, so
    # a loopback URL must be refused here (the default policy), and a public one is not needed:
    # the policy check is what this proves, plus that the active tab is left alone.
    client.browser_page.navigate(url="about:blank")
    tabs_before = sandbox.request("GET", "/v1/browser/tabs")[1]["data"]
    with pytest.raises(ApiError) as refused:
        client.util.convert_to_markdown(uri="http://127.0.0.1:8080/healthz")
    assert refused.value.status_code == 403
    assert "127.0.0.1" in refused.value.body["message"]
    assert sandbox.request("GET", "/v1/browser/tabs")[1]["data"] == tabs_before


@pytest.mark.parametrize(
    "body, field",
    [({}, "uri"), ({"uri": " "}, "uri"), ({"uri": "ftp://example.com/x"}, "uri"), ({"uri": "data:text/html"}, "uri")],
)
def test_bad_uris_are_a_422_naming_the_field(sandbox, body, field):
    status, answer = sandbox.request("POST", "/v1/util/convert_to_markdown", body)
    assert status == 422, answer
    assert answer["detail"][0]["loc"][-1] == field, answer


def test_an_allowed_page_is_converted_and_the_active_tab_stays():
    from agent_sandbox import Sandbox
    from conftest import SandboxContainer

    box = SandboxContainer(env={"SANDBOXD_BROWSER_ALLOW_HOSTS": "127.0.0.1/32"})
    try:
        box.exec("sh", "-c", f"mkdir -p /tmp/site && printf '%s' \"{PAGE}\" > /tmp/site/page.html")
        box.exec("sh", "-c", "cd /tmp/site && (setsid python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &)")
        client = Sandbox(base_url=box.base_url, headers=box.headers(), timeout=60)
        client.browser_page.navigate(url="about:blank")
        tabs_before = box.request("GET", "/v1/browser/tabs")[1]["data"]
        md = None
        for _ in range(50):
            try:
                md = client.util.convert_to_markdown(uri="http://127.0.0.1:8765/page.html").data
                break
            except ApiError as error:  # the server may not listen yet
                last = error
                import time

                time.sleep(0.2)
        assert md is not None, last
        assert "# Report" in md and "**bold**" in md, md
        assert box.request("GET", "/v1/browser/tabs")[1]["data"] == tabs_before
    finally:
        box.close()
