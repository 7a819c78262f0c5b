"""AIO's browser network API, browser config and restart, and the network waits, through AIO's
own SDK, unchanged, against sandboxd in the image: the requests list, extra and origin-scoped
headers, routes that block or mock requests, the HAR export, ``set_config`` and ``restart``.
Each call's effect is checked where it lands: the headers a server inside the sandbox received,
the page's content and failures, ``navigator.userAgent`` and ``innerWidth``, the browser process.

The server is a small Python script on loopback inside the sandbox that answers every GET with a
page showing the headers it received (JSON in ``#h``), except ``/download``, a CSV attachment; the container allows private addresses
for it (``SANDBOXD_BROWSER_ALLOW_PRIVATE``). ``127.0.0.1`` and ``localhost`` are two origins of
the same server.
"""

import json
import time

import pytest
from agent_sandbox import Sandbox
from agent_sandbox.core.api_error import ApiError
from agent_sandbox.errors import UnprocessableEntityError
from agent_sandbox.types import Resolution, Response, ResponseList, RestartRequest, RouteResponseModel

from conftest import SandboxContainer

PORT = 8766
BASE = f"http://127.0.0.1:{PORT}"
OTHER = f"http://localhost:{PORT}"
SERVER = r"""
import html, http.server, json
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/download"):
            body = b"a,b\n1,2\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/csv")
            self.send_header("Content-Disposition", "attachment; filename=data.csv")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        body = ("<!doctype html><title>echo</title><pre id='h'>"
                + html.escape(json.dumps(headers)) + "</pre>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", %d), Echo).serve_forever()
""" % PORT


@pytest.fixture(scope="module")
def box():
    container = SandboxContainer(env={"SANDBOXD_BROWSER_ALLOW_PRIVATE": "true"})
    try:
        client = Sandbox(base_url=container.base_url, headers=container.headers(), timeout=90)
        client.file.write_file(file="/tmp/echo_server.py", content=SERVER)
        container.exec("sh", "-c", "setsid python3 /tmp/echo_server.py >/dev/null 2>&1 &")
        for _ in range(100):
            try:
                client.browser_page.navigate(url=f"{BASE}/ready")
                break
            except ApiError:
                time.sleep(0.1)
        yield container, client
    finally:
        container.close()


def js(client, expression):
    answer = client.browser_page.evaluate(expression=expression)
    assert answer.success, answer.message
    return answer.data


def received_headers(client):
    """The headers the echo server received for the page the tab shows."""
    return json.loads(js(client, "document.querySelector('#h').textContent"))


def test_requests_list_the_navigation_with_status_headers_and_timing(box):
    _, client = box
    client.browser_page.navigate(url=f"{BASE}/listed?q=1")
    answer = client.browser_network.get_requests()
    assert isinstance(answer, ResponseList) and answer.success
    navigation = [r for r in answer.data if r["url"] == f"{BASE}/listed?q=1"]
    assert len(navigation) == 1, answer.data
    request = navigation[0]
    assert (request["method"], request["resource_type"], request["status"]) == ("GET", "document", 200)
    assert request["finished"] is True and request["failure"] is None
    assert request["response_headers"]["Content-Type"].startswith("text/html")
    assert request["mime_type"] == "text/html"
    assert request["duration_ms"] >= 0 and request["timestamp"] > 1.6e12
    assert request["remote_address"].startswith("127.0.0.1")

    filtered = client.browser_network.get_requests(filter="LISTED").data
    assert [r["url"] for r in filtered] == [f"{BASE}/listed?q=1"]
    assert len(client.browser_network.get_requests(limit=1).data) == 1
    with pytest.raises(UnprocessableEntityError) as bad:
        client.browser_network.get_requests(limit=0)
    assert bad.value.body.detail[0].loc == ["query", "limit"]


def test_extra_headers_reach_the_server_until_removed(box):
    _, client = box
    answer = client.browser_network.set_headers(headers={"X-Agentbox-Test": "yes", "X-Second": "2"})
    assert isinstance(answer, Response) and answer.success
    assert sorted(answer.data["headers"]) == ["X-Agentbox-Test", "X-Second"]
    try:
        client.browser_page.navigate(url=f"{BASE}/with-headers")
        got = received_headers(client)
        assert got["x-agentbox-test"] == "yes" and got["x-second"] == "2"
        # A request the page makes itself carries them too.
        echoed = js(client, "fetch('/from-page').then((r) => r.text())")
        assert "x-agentbox-test" in echoed
    finally:
        client.browser_network.set_headers(headers={})
    client.browser_page.navigate(url=f"{BASE}/without-headers")
    assert "x-agentbox-test" not in received_headers(client)

    with pytest.raises(UnprocessableEntityError) as bad:
        client.browser_network.set_headers(headers={"bad name": "x"})
    assert bad.value.body.detail[0].loc == ["body", "headers", "bad name"]


def test_scoped_headers_go_only_to_their_origin(box):
    _, client = box
    answer = client.browser_network.set_scoped_headers(origin=f"{BASE}/any/path", headers={"X-Scoped": "only-here"})
    assert answer.data["scoped"] == {BASE: ["X-Scoped"]}
    try:
        client.browser_page.navigate(url=f"{BASE}/scoped")
        assert received_headers(client)["x-scoped"] == "only-here"
        client.browser_page.navigate(url=f"{OTHER}/not-scoped")
        assert "x-scoped" not in received_headers(client)
        requests = client.browser_network.get_requests(filter="/scoped").data
        assert requests[-1]["route"] == "headers"
    finally:
        client.browser_network.set_scoped_headers(origin=BASE, headers={})
    client.browser_page.navigate(url=f"{BASE}/unscoped-again")
    assert "x-scoped" not in received_headers(client)

    with pytest.raises(UnprocessableEntityError) as bad:
        client.browser_network.set_scoped_headers(origin="example.com", headers={"X": "1"})
    assert bad.value.body.detail[0].loc == ["body", "origin"]


def test_an_abort_route_makes_the_load_fail_until_removed(box):
    _, client = box
    routes = client.browser_network.add_route(url_pattern="**/blocked*", abort=True)
    assert routes.data == [{"url_pattern": "**/blocked*", "action": "abort"}]
    try:
        with pytest.raises(ApiError) as failed:
            client.browser_page.navigate(url=f"{BASE}/blocked.html")
        assert failed.value.status_code == 502
        assert "ERR_BLOCKED_BY_CLIENT" in failed.value.body["message"]
        blocked = client.browser_network.get_requests(filter="blocked.html").data[-1]
        assert blocked["failure"] == "net::ERR_BLOCKED_BY_CLIENT" and blocked["status"] is None
        # Other URLs still load.
        client.browser_page.navigate(url=f"{BASE}/allowed.html")
    finally:
        left = client.browser_network.remove_route(url_pattern="**/blocked*")
    assert left.data == []
    client.browser_page.navigate(url=f"{BASE}/blocked.html")
    assert "user-agent" in received_headers(client)

    with pytest.raises(ApiError) as missing:
        client.browser_network.remove_route(url_pattern="**/blocked*")
    assert missing.value.status_code == 404
    with pytest.raises(UnprocessableEntityError) as neither:
        client.browser_network.add_route(url_pattern="**/x")
    assert neither.value.body.detail[0].loc == ["body", "response"]
    with pytest.raises(UnprocessableEntityError) as status:
        client.browser_network.add_route(url_pattern="**/x", response=RouteResponseModel(status=99))
    assert status.value.body.detail[0].loc == ["body", "response", "status"]


def test_a_mocked_route_answers_the_page_and_its_fetches(box):
    _, client = box
    client.browser_network.add_route(
        url_pattern=f"{BASE}/mocked",
        response=RouteResponseModel(body="<h1 id='m'>mocked body</h1>", content_type="text/html"),
    )
    client.browser_network.add_route(
        url_pattern="**/api/data*",
        response=RouteResponseModel(status=201, body='{"mocked": true}', headers={"Content-Type": "application/json"}),
    )
    try:
        client.browser_page.navigate(url=f"{BASE}/mocked")
        assert js(client, "document.querySelector('#m').textContent") == "mocked body"
        fetched = js(client, "fetch('/api/data?x=1').then(async (r) => [r.status, await r.json()])")
        assert fetched == [201, {"mocked": True}]
        routed = client.browser_network.get_requests(filter="api/data").data[-1]
        assert routed["route"] == "fulfilled" and routed["status"] == 201
    finally:
        client.browser_network.remove_route(url_pattern=f"{BASE}/mocked")
        client.browser_network.remove_route(url_pattern="**/api/data*")
    client.browser_page.navigate(url=f"{BASE}/mocked")
    assert js(client, "document.querySelector('#m')") is None


def test_har_export_to_a_file_and_inline(box):
    container, client = box
    client.browser_page.navigate(url=f"{BASE}/for-har?a=b")
    saved = client.browser_network.export_har(save_path="/tmp/capture.har")
    assert saved.success and saved.data["path"] == "/tmp/capture.har"
    har = json.loads(client.file.read_file(file="/tmp/capture.har").data.content)
    log = har["log"]
    assert log["version"] == "1.2" and log["creator"]["name"]
    assert saved.data["entries"] == len(log["entries"]) > 0
    entry = [e for e in log["entries"] if e["request"]["url"] == f"{BASE}/for-har?a=b"][-1]
    assert entry["response"]["status"] == 200
    assert entry["request"]["queryString"] == [{"name": "a", "value": "b"}]
    assert entry["startedDateTime"].endswith("Z") and entry["time"] >= 0
    assert {"name": "Content-Type", "value": "text/html; charset=utf-8"} in entry["response"]["headers"]

    status, inline = container.request("POST", "/v1/browser/network/export_har", {})
    assert status == 200 and inline["data"]["har"]["log"]["entries"]

    with pytest.raises(UnprocessableEntityError) as blank:
        client.browser_network.export_har(save_path="  ")
    assert blank.value.body.detail[0].loc == ["body", "save_path"]


def test_wait_for_a_request_and_a_response(box):
    _, client = box
    client.browser_page.navigate(url=f"{BASE}/waiting")
    js(client, "setTimeout(() => fetch('/later-request?n=1'), 800), true")
    waited = client.browser_page.wait(type="request", url_pattern="/later-request", timeout=10)
    assert waited.success and waited.data["value"]["url"] == f"{BASE}/later-request?n=1"
    assert waited.data["value"]["method"] == "GET"

    js(client, "setTimeout(() => fetch('/later-response'), 800), true")
    waited = client.browser_page.wait(type="response", url_pattern="**/later-response", timeout=10)
    assert waited.data["value"]["status"] == 200 and waited.data["type"] == "response"

    with pytest.raises(ApiError) as late:
        client.browser_page.wait(type="response", url_pattern="/never-fetched", timeout=0.5)
    assert late.value.status_code == 504
    with pytest.raises(UnprocessableEntityError) as missing:
        client.browser_page.wait(type="request")
    assert missing.value.body.detail[0].loc == ["body", "url_pattern"]


def test_wait_for_a_download_saves_the_file(box):
    _, client = box
    client.browser_page.navigate(url=f"{BASE}/page-with-link")
    click_later = (
        "setTimeout(() => { const a = document.createElement('a'); a.href = '/download?n=%d';"
        " document.body.appendChild(a); a.click(); }, 800), true"
    )
    js(client, click_later % 1)
    waited = client.browser_page.wait(type="download", save_path="/tmp/saved.csv", timeout=30)
    assert waited.success and waited.data["type"] == "download"
    value = waited.data["value"]
    assert value["path"] == "/tmp/saved.csv" and value["suggested_filename"] == "data.csv"
    assert value["size"] == 8 and value["url"] == f"{BASE}/download?n=1"
    assert client.file.read_file(file="/tmp/saved.csv").data.content == "a,b\n1,2\n"

    # Into a directory, under the suggested name.
    client.file.write_file(file="/tmp/downloads-here/keep.txt", content="x")
    js(client, click_later % 2)
    waited = client.browser_page.wait(type="download", save_path="/tmp/downloads-here/", timeout=30)
    assert waited.data["value"]["path"] == "/tmp/downloads-here/data.csv"
    assert client.file.read_file(file="/tmp/downloads-here/data.csv").data.content == "a,b\n1,2\n"

    with pytest.raises(ApiError) as none:
        client.browser_page.wait(type="download", timeout=0.5)
    assert none.value.status_code == 504
    with pytest.raises(ApiError) as outside:
        client.browser_page.wait(type="download", save_path="/etc/agentbox-download.csv", timeout=1)
    assert outside.value.status_code == 403


def test_config_sets_the_viewport_and_the_user_agent(box):
    container, client = box
    client.browser_page.navigate(url=f"{BASE}/config")
    answer = client.browser.set_config(resolution=Resolution(width=800, height=600))
    assert isinstance(answer, Response) and answer.success
    assert answer.data["resolution"] == {"width": 800, "height": 600}
    assert js(client, "[innerWidth, innerHeight]") == [800, 600]

    status, body = container.request("POST", "/v1/browser/config", {"user_agent": "AgentboxTest/1.0"})
    assert status == 200, body
    client.browser_page.navigate(url=f"{BASE}/config-ua")
    assert js(client, "navigator.userAgent") == "AgentboxTest/1.0"
    assert received_headers(client)["user-agent"] == "AgentboxTest/1.0"
    # A tab opened later gets the config too.
    status, _ = container.request("POST", "/v1/browser/tabs", {"url": f"{BASE}/config-new-tab"})
    assert status == 200
    assert js(client, "[innerWidth, navigator.userAgent]") == [800, "AgentboxTest/1.0"]

    status, body = container.request("POST", "/v1/browser/config", {"timezone": "UTC"})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "timezone"]
    with pytest.raises(UnprocessableEntityError) as small:
        client.browser.set_config(resolution=Resolution(width=10, height=600))
    assert small.value.body.detail[0].loc == ["body", "resolution", "width"]
    assert js(client, "innerWidth") == 800


def test_restart_gives_a_working_browser_with_the_rules_kept(box):
    container, client = box
    soft = client.browser.restart()
    assert soft.success and soft.data["mode"] == "soft"
    client.browser_page.navigate(url=f"{BASE}/after-soft")

    _, before = container.request("GET", "/v1/processes")
    old_pid = [p for p in before["data"]["programs"] if p["name"] == "chromium"][0]["pid"]
    hard = client.browser.restart(request=RestartRequest(mode="hard"))
    assert hard.success and hard.data["mode"] == "hard"
    assert hard.data["pid"] and hard.data["pid"] != old_pid
    _, after = container.request("GET", "/v1/processes")
    chromium = [p for p in after["data"]["programs"] if p["name"] == "chromium"][0]
    assert chromium["pid"] == hard.data["pid"] and chromium["state"] == "ready"

    client.browser_page.navigate(url=f"{BASE}/after-hard")
    assert js(client, "location.pathname") == "/after-hard"
    # The config outlives the browser process.
    assert js(client, "navigator.userAgent") == "AgentboxTest/1.0"
    urls = [r["url"] for r in client.browser_network.get_requests().data]
    assert f"{BASE}/after-hard" in urls and not any("after-soft" in u for u in urls)

    with pytest.raises(UnprocessableEntityError) as unsupported:
        client.browser.restart(request=RestartRequest(mode="hard", url_blocklist=["https://example.com"]))
    assert unsupported.value.body.detail[0].loc == ["body", "url_blocklist"]
    _, still = container.request("GET", "/v1/processes")
    assert [p for p in still["data"]["programs"] if p["name"] == "chromium"][0]["pid"] == hard.data["pid"]
