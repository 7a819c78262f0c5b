"""Desktop input checked by its effects: a real page (driven by Playwright over CDP) records what
it receives while sandboxd injects input through XTest. Screen coordinates of page points come
from the page's own window geometry."""

import base64
import io
import struct
import zlib

import pytest
from playwright.sync_api import sync_playwright

PAGE = """<!doctype html>
<html><body style="margin:0;font:16px sans-serif">
<div id="target" style="position:absolute;left:200px;top:150px;width:300px;height:200px;background:#cde"></div>
<textarea id="text" style="position:absolute;left:600px;top:150px;width:400px;height:80px"></textarea>
<canvas id="canvas" width="500" height="300" style="position:absolute;left:200px;top:400px;border:1px solid #000"></canvas>
<script>
window.clicks = []; window.drag = {down: 0, up: 0, moves: []};
document.getElementById('target').addEventListener('click', e => window.clicks.push([e.clientX, e.clientY, e.detail, e.ctrlKey, e.shiftKey]));
const canvas = document.getElementById('canvas'); const ctx = canvas.getContext('2d');
ctx.strokeStyle = '#ff0000'; ctx.lineWidth = 3; let drawing = false;
canvas.addEventListener('mousedown', e => { window.drag.down++; drawing = true; ctx.beginPath(); ctx.moveTo(e.offsetX, e.offsetY); window.drag.moves.push([e.offsetX, e.offsetY]); });
canvas.addEventListener('mousemove', e => { if (!drawing) return; ctx.lineTo(e.offsetX, e.offsetY); ctx.stroke(); window.drag.moves.push([e.offsetX, e.offsetY]); });
window.addEventListener('mouseup', e => { window.drag.up++; drawing = false; });
</script></body></html>"""


@pytest.fixture(scope="module")
def page(sandbox):
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(sandbox.cdp_url)
        context = browser.contexts[0]
        page = context.pages[0] if context.pages else context.new_page()
        page.bring_to_front()
        page.set_content(PAGE)
        yield page
        browser.close()


def screen_origin(page) -> tuple[float, float]:
    """Where the page's (0, 0) is on the X screen."""
    return tuple(page.evaluate(
        "() => [window.screenX + (window.outerWidth - window.innerWidth) / 2,"
        " window.screenY + (window.outerHeight - window.innerHeight)]"))


def action(sandbox, **body):
    status, answer = sandbox.request("POST", "/v1/browser/actions", body)
    assert status == 200, answer
    assert answer["success"], answer
    return answer


def test_a_click_lands_where_it_was_aimed(sandbox, page):
    ox, oy = screen_origin(page)
    page.evaluate("() => window.clicks = []")
    action(sandbox, action_type="CLICK", x=ox + 250, y=oy + 200)
    page.wait_for_function("() => window.clicks.length === 1")
    x, y, detail, ctrl, shift = page.evaluate("() => window.clicks[0]")
    assert abs(x - 250) <= 1 and abs(y - 200) <= 1, (x, y)
    assert detail == 1 and not ctrl and not shift


def test_click_with_modifiers_and_triple_click(sandbox, page):
    ox, oy = screen_origin(page)
    page.evaluate("() => window.clicks = []")
    action(sandbox, action_type="CLICK", x=ox + 300, y=oy + 300, modifiers=["ctrl", "shift"])
    page.wait_for_function("() => window.clicks.length === 1")
    _, _, _, ctrl, shift = page.evaluate("() => window.clicks[0]")
    assert ctrl and shift
    page.evaluate("() => window.clicks = []")
    action(sandbox, action_type="CLICK", x=ox + 300, y=oy + 300, num_clicks=3)
    page.wait_for_function("() => window.clicks.length === 3")
    assert [c[2] for c in page.evaluate("() => window.clicks")] == [1, 2, 3]


@pytest.mark.parametrize("use_clipboard", [False, True])
def test_unicode_text_arrives_intact(sandbox, page, use_clipboard):
    page.fill("#text", "")
    page.focus("#text")
    text = "héllo 世界 — ¿qué tal? Ωμέγα"
    action(sandbox, action_type="TYPING", text=text, use_clipboard=use_clipboard)
    page.wait_for_function("t => document.getElementById('text').value === t", arg=text, timeout=10000)


def decode_png_rgb(data: bytes):
    """Minimal PNG decoder for 8-bit RGB/RGBA, non-interlaced (what sandboxd emits)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for r in range(height):
        f = raw[r * (stride + 1)]
        line = bytearray(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


def test_a_drag_along_a_path_draws_that_path(sandbox, page):
    ox, oy = screen_origin(page)
    page.evaluate("() => { window.drag = {down: 0, up: 0, moves: []}; "
                  "document.getElementById('canvas').getContext('2d').clearRect(0, 0, 500, 300); }")
    # A triangle inside the canvas (canvas at page 200,400; +1 px border).
    corners = [(50, 250), (250, 40), (450, 250), (50, 250)]
    path = []
    for (x0, y0), (x1, y1) in zip(corners, corners[1:]):
        for step in range(10):
            t = step / 10
            path.append([ox + 201 + x0 + (x1 - x0) * t, oy + 401 + y0 + (y1 - y0) * t])
    path.append([ox + 201 + 50, oy + 401 + 250])
    action(sandbox, action_type="DRAG_PATH", path=path)
    page.wait_for_function("() => window.drag.up >= 1")
    drag = page.evaluate("() => window.drag")
    assert drag["down"] == 1 and drag["up"] == 1, drag
    assert len(drag["moves"]) >= len(path) - 1

    # The red stroke on screen lies on the path: every red pixel is near a segment, and every
    # segment has red pixels along it.
    status, _ = sandbox.request("GET", "/readyz")
    assert status == 200
    import urllib.request
    req = urllib.request.Request(sandbox.base_url + "/v1/browser/screenshot", headers=sandbox.headers())
    with urllib.request.urlopen(req, timeout=30) as response:
        width, height, channels, rows = decode_png_rgb(response.read())
    red = []
    for y in range(int(oy + 401), int(oy + 401 + 300)):
        row = rows[y]
        for x in range(int(ox + 201), int(ox + 201 + 500)):
            r, g, b = row[x * channels:x * channels + 3]
            if r > 200 and g < 80 and b < 80:
                red.append((x, y))
    assert len(red) > 300, f"only {len(red)} red pixels"
    segments = [((ox + 201 + x0, oy + 401 + y0), (ox + 201 + x1, oy + 401 + y1))
                for (x0, y0), (x1, y1) in zip(corners, corners[1:])]

    def distance(p, a, b):
        (px, py), (ax, ay), (bx, by) = p, a, b
        dx, dy = bx - ax, by - ay
        t = max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)))
        return ((px - ax - t * dx) ** 2 + (py - ay - t * dy) ** 2) ** 0.5

    off_path = [p for p in red if min(distance(p, a, b) for a, b in segments) > 4]
    assert not off_path, f"{len(off_path)} red pixels off the path, e.g. {off_path[:5]}"
    for a, b in segments:
        for t in (0.25, 0.5, 0.75):
            point = (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)
            assert any(abs(x - point[0]) <= 3 and abs(y - point[1]) <= 3 for x, y in red), point
