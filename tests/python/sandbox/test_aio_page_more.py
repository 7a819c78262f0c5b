"""The rest of AIO's browser page API through AIO's own SDK, unchanged, against sandboxd in the
image: indexed elements, select_option, check/uncheck, fill_form, find_text, scroll_to_element,
upload_file, cookies, saved state and the console. Each call's effect is checked in the page
with ``evaluate``.

The test page is served from inside the sandbox by ``python3 -m http.server`` on loopback (a
real http origin, so cookies and localStorage behave as on a site); the container allows
private addresses for that (``SANDBOXD_BROWSER_ALLOW_PRIVATE``).
"""

import json
import time

import pytest
from agent_sandbox import Sandbox
from agent_sandbox.core.api_error import ApiError
from agent_sandbox.errors import UnprocessableEntityError
from agent_sandbox.types import Response, ResponseList


PORT = 8765
PAGE = """<!doctype html>
<html><head><title>Form page</title></head><body>
<form id="f">
  <input id="name" name="name" type="text">
  <input id="email" name="email" type="email">
  <select id="color" name="color">
    <option value="r">Red</option><option value="g">Green</option><option value="b">Blue</option>
  </select>
  <label><input id="agree" name="agree" type="checkbox"> Agree</label>
  <label><input id="news" name="news" type="checkbox" checked> News</label>
  <input id="doc" name="doc" type="file">
  <input id="docs" name="docs" type="file" multiple>
  <button id="go" type="button" onclick="window.clicked = (window.clicked || 0) + 1">Go</button>
</form>
<div style="height: 4000px"></div>
<p id="far">The far paragraph holds the needle.</p>
<script>
  window.changes = [];
  document.addEventListener('change', (e) => window.changes.push(e.target.id));
  console.log('hello from the page', 42);
  console.warn('careful now');
  console.error('something broke');
</script>
</body></html>
"""


@pytest.fixture(scope="module")
def box(browsing):
    client = Sandbox(base_url=browsing.base_url, headers=browsing.headers(), timeout=60)
    client.file.write_file(file="/tmp/site/form.html", content=PAGE)
    url = f"{browsing.site}/form.html"
    for _ in range(100):
        try:
            client.browser_page.navigate(url=url)
            break
        except ApiError:
            time.sleep(0.1)
    yield browsing, client, url


def fresh(box):
    """Reloads the test page (a clean form) and answers the client."""
    _, client, url = box
    client.browser_page.navigate(url=url)
    return client


def js(client, expression):
    answer = client.browser_page.evaluate(expression=expression)
    assert answer.success, answer.message
    return answer.data


def test_elements_are_indexed_and_click_and_fill_take_the_index(box):
    client = fresh(box)
    answer = client.browser_page.get_elements()
    assert isinstance(answer, ResponseList) and answer.success
    elements = answer.data
    by_id = {e.get("selector"): e for e in elements}
    assert [e["index"] for e in elements] == list(range(len(elements)))
    name, go, color = by_id["#name"], by_id["#go"], by_id["#color"]
    assert (name["tag"], name["type"]) == ("input", "text")
    assert color["tag"] == "select" and [o["value"] for o in color["options"]] == ["r", "g", "b"]
    assert by_id["#news"]["checked"] is True

    client.browser_page.fill(index=name["index"], text="Ada")
    assert js(client, "document.querySelector('#name').value") == "Ada"
    client.browser_page.click(index=go["index"])
    assert js(client, "window.clicked") == 1

    with pytest.raises(ApiError) as missing:
        client.browser_page.click(index=len(elements) + 5)
    assert missing.value.status_code == 404
    assert "index" in missing.value.body["message"]


def test_select_option_by_value_label_and_index(box):
    client = fresh(box)
    chosen = client.browser_page.select_option(selector="#color", value="g")
    assert isinstance(chosen, Response) and chosen.data["label"] == "Green"
    assert js(client, "document.querySelector('#color').value") == "g"
    client.browser_page.select_option(selector="#color", label="Blue")
    assert js(client, "document.querySelector('#color').value") == "b"
    client.browser_page.select_option(selector="#color", index=0)
    assert js(client, "document.querySelector('#color').value") == "r"
    assert "color" in js(client, "window.changes")

    with pytest.raises(UnprocessableEntityError) as bad:
        client.browser_page.select_option(selector="#color", value="purple")
    assert bad.value.body.detail[0].loc == ["body", "value"]
    assert "purple" in bad.value.body.detail[0].msg
    with pytest.raises(ApiError) as not_select:
        client.browser_page.select_option(selector="#name", value="x")
    assert not_select.value.status_code == 409
    assert js(client, "document.querySelector('#color').value") == "r"


def test_check_and_uncheck(box):
    client = fresh(box)
    checked = client.browser_page.check(selector="#agree")
    assert checked.data == {"kind": "checkbox", "changed": True, "checked": True}
    assert js(client, "document.querySelector('#agree').checked") is True
    again = client.browser_page.check(selector="#agree")
    assert again.data["changed"] is False
    client.browser_page.uncheck(selector="#news")
    assert js(client, "document.querySelector('#news').checked") is False
    assert js(client, "window.changes") == ["agree", "news"]

    with pytest.raises(ApiError) as wrong:
        client.browser_page.check(selector="#name")
    assert wrong.value.status_code == 409 and "#name" in wrong.value.body["message"]
    with pytest.raises(ApiError) as missing:
        client.browser_page.check(selector="#nothing-here")
    assert missing.value.status_code == 404 and "#nothing-here" in missing.value.body["message"]


def test_fill_form_sets_each_kind_of_field(box):
    client = fresh(box)
    answer = client.browser_page.fill_form(
        items=[
            {"selector": "#name", "value": "Grace"},
            {"selector": "#email", "value": "grace@example.com"},
            {"selector": "#color", "value": "Blue"},
            {"selector": "#agree", "value": True},
            {"selector": "#news", "value": False},
        ]
    )
    assert answer.success, answer.message
    state = js(
        client,
        "['#name', '#email', '#color'].map((s) => document.querySelector(s).value)"
        ".concat([document.querySelector('#agree').checked, document.querySelector('#news').checked])",
    )
    assert state == ["Grace", "grace@example.com", "b", True, False]

    with pytest.raises(UnprocessableEntityError) as bad:
        client.browser_page.fill_form(items=[{"selector": "#name", "value": "x"}, {"selector": "#agree"}])
    assert bad.value.body.detail[0].loc == ["body", "items", "1", "value"]
    # A malformed item changes nothing, not even the items before it.
    assert js(client, "document.querySelector('#name').value") == "Grace"


def test_find_text_and_scroll_to_element(box):
    client = fresh(box)
    found = client.browser_page.find_text(keyword="NEEDLE")
    assert isinstance(found, ResponseList)
    assert len(found.data) == 1
    assert found.data[0]["text"] == "needle" and "far paragraph" in found.data[0]["context"]
    assert client.browser_page.find_text(keyword="no such words anywhere").data == []
    with pytest.raises(UnprocessableEntityError) as blank:
        client.browser_page.find_text(keyword="  ")
    assert blank.value.body.detail[0].loc == ["body", "keyword"]

    assert js(client, "scrollY") == 0
    at = client.browser_page.scroll_to_element(selector="#far")
    assert at.data["visible"] is True and at.data["scroll_y"] > 1000
    assert js(client, "scrollY") > 1000
    with pytest.raises(ApiError) as missing:
        client.browser_page.scroll_to_element(selector="#absent")
    assert missing.value.status_code == 404 and "#absent" in missing.value.body["message"]


def test_upload_file_from_the_sandbox(box):
    client = fresh(box)
    client.file.write_file(file="/tmp/up-one.txt", content="first file")
    client.file.write_file(file="/tmp/up-two.txt", content="second")
    client.browser_page.upload_file(selector="#doc", files=["/tmp/up-one.txt"])
    assert js(client, "(async () => { const f = document.querySelector('#doc').files[0];"
                      " return [f.name, await f.text()]; })()") == ["up-one.txt", "first file"]
    assert "doc" in js(client, "window.changes")
    client.browser_page.upload_file(selector="#docs", files=["/tmp/up-one.txt", "/tmp/up-two.txt"])
    assert js(client, "[...document.querySelector('#docs').files].map((f) => f.name)") == [
        "up-one.txt",
        "up-two.txt",
    ]

    with pytest.raises(ApiError) as outside:
        client.browser_page.upload_file(selector="#doc", files=["/etc/passwd"])
    assert outside.value.status_code == 403 and "files[0]" in outside.value.body["message"]
    with pytest.raises(ApiError) as absent:
        client.browser_page.upload_file(selector="#doc", files=["/tmp/no-such-file"])
    assert absent.value.status_code == 404
    with pytest.raises(UnprocessableEntityError) as many:
        client.browser_page.upload_file(selector="#doc", files=["/tmp/up-one.txt", "/tmp/up-two.txt"])
    assert many.value.body.detail[0].loc == ["body", "files"]
    with pytest.raises(ApiError) as not_file:
        client.browser_page.upload_file(selector="#name", files=["/tmp/up-one.txt"])
    assert not_file.value.status_code == 409
    assert js(client, "document.querySelector('#doc').files[0].name") == "up-one.txt"


def test_cookies_round_trip(box):
    _, client, url = box
    fresh(box)
    client.browser_cookies.clear_cookies()
    origin = f"http://127.0.0.1:{PORT}"
    answer = client.browser_cookies.set_cookies(
        cookies=[
            {"name": "sid", "value": "abc123", "url": origin},
            {"name": "pref", "value": "dark", "domain": "127.0.0.1", "path": "/", "sameSite": "Lax"},
        ]
    )
    assert answer.success, answer.message
    listed = client.browser_cookies.get_cookies(urls=url)
    assert isinstance(listed, ResponseList)
    by_name = {c["name"]: c for c in listed.data}
    assert by_name["sid"]["value"] == "abc123" and by_name["sid"]["domain"] == "127.0.0.1"
    assert by_name["pref"]["sameSite"] == "Lax" and by_name["pref"]["expires"] == -1
    assert sorted(js(client, "document.cookie").split("; ")) == ["pref=dark", "sid=abc123"]
    assert client.browser_cookies.get_cookies(urls="http://example.com/").data == []

    with pytest.raises(UnprocessableEntityError) as bad:
        client.browser_cookies.set_cookies(cookies=[{"name": "x", "value": "1"}])
    assert bad.value.body.detail[0].loc == ["body", "cookies", "0", "url"]
    with pytest.raises(UnprocessableEntityError) as bad_url:
        client.browser_cookies.get_cookies(urls="not a url")
    assert bad_url.value.body.detail[0].loc == ["query", "urls"]

    client.browser_cookies.clear_cookies()
    assert client.browser_cookies.get_cookies().data == []
    assert js(client, "document.cookie") == ""


def test_state_save_clear_load_restores_cookies_and_local_storage(box):
    container, client, url = box
    fresh(box)
    client.browser_cookies.clear_cookies()
    js(client, "localStorage.clear(); localStorage.setItem('token', 'xyz'); document.cookie = 'session=s1; path=/'; 1")
    saved = client.browser_state.save(path="/tmp/state/browser.json")
    assert saved.success, saved.message
    assert saved.data["count"] == 1 and saved.data["origins"] == [f"http://127.0.0.1:{PORT}"]
    on_disk = json.loads(client.file.read_file(file="/tmp/state/browser.json").data.content)
    assert [c["name"] for c in on_disk["cookies"]] == ["session"]
    assert on_disk["origins"][0]["localStorage"] == [{"name": "token", "value": "xyz"}]

    client.browser_cookies.clear_cookies()
    js(client, "localStorage.clear(); 1")
    fresh(box)
    assert js(client, "[document.cookie, localStorage.getItem('token')]") == ["", None]

    loaded = client.browser_state.load(path="/tmp/state/browser.json")
    assert loaded.success, loaded.message
    assert loaded.data["cookies"] == 1 and loaded.data["skipped_origins"] == []
    assert js(client, "[document.cookie, localStorage.getItem('token')]") == ["session=s1", "xyz"]

    with pytest.raises(ApiError) as outside:
        client.browser_state.save(path="/etc/agentbox-state.json")
    assert outside.value.status_code == 403 and "path" in outside.value.body["message"]
    client.file.write_file(file="/tmp/state/not-state.json", content='{"hello": 1}')
    with pytest.raises(UnprocessableEntityError) as not_state:
        client.browser_state.load(path="/tmp/state/not-state.json")
    assert not_state.value.body.detail[0].loc == ["body", "path"]
    with pytest.raises(ApiError) as absent:
        client.browser_state.load(path="/tmp/state/none.json")
    assert absent.value.status_code == 404
    client.browser_cookies.clear_cookies()


def test_console_messages_are_kept_and_exported(box):
    client = fresh(box)
    messages = client.browser_page.get_console()
    assert isinstance(messages, ResponseList)
    seen = [(m["type"], m["text"]) for m in messages.data if m["source"] == "console"]
    for expected in [("log", "hello from the page 42"), ("warning", "careful now"), ("error", "something broke")]:
        assert expected in seen
    js(client, "setTimeout(() => { throw new Error('uncaught one'); }, 0); console.info('later', {a: 1}); 1")
    time.sleep(0.5)
    texts = [m["text"] for m in client.browser_page.get_console().data]
    assert "later Object" in texts
    assert any("uncaught one" in t for t in texts)

    exported = client.browser_page.export_console(save_path="/tmp/console/log.json", clear=True)
    assert exported.success and exported.data["count"] == len(texts)
    written = json.loads(client.file.read_file(file="/tmp/console/log.json").data.content)
    assert [m["text"] for m in written] == texts
    assert client.browser_page.get_console().data == []

    with pytest.raises(ApiError) as outside:
        client.browser_page.export_console(save_path="/etc/console.json")
    assert outside.value.status_code == 403 and "save_path" in outside.value.body["message"]
