"""AIO's single-tenant families through AIO's own SDK, unchanged, against sandboxd in the image:
skills (a zip of SKILL.md directories registered, listed, read and removed), shutdown hooks
(run when the container is stopped, seen in its log and its files) and captcha detection (a
page with a fake widget, detected, then waited for until it is removed). Bad input answers
422 naming the field and changes nothing.

The captcha page is served from inside the sandbox by ``python3 -m http.server`` on loopback;
the container allows private addresses for that (``SANDBOXD_BROWSER_ALLOW_PRIVATE``).
"""

import io
import json
import subprocess
import threading
import time
import zipfile

import pytest
from agent_sandbox import Sandbox
from agent_sandbox.core.api_error import ApiError
from agent_sandbox.errors import UnprocessableEntityError
from agent_sandbox.types import (
    CaptchaWaitResult,
    ResponseCaptchaWaitResult,
    ResponseDict,
    ResponseListSandboxHook,
    ResponseSandboxHook,
    ResponseSkillContentResult,
    ResponseSkillMetadata,
    ResponseSkillMetadataCollection,
    ResponseSkillRegistrationResult,
    SandboxHook,
    SkillMetadata,
)

from conftest import SandboxContainer, docker

PORT = 8766

PDF_SKILL = b"""---
name: pdf-tools
description: Fill and read PDF forms
license: MIT
---
# PDF tools

Run `scripts/fill.sh` to fill a form.
"""

DOCX_SKILL = b"""---
description: Word documents
tags: [docx, office]
---
Docx body.
"""


def zip_of(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()


@pytest.fixture(scope="module")
def box():
    container = SandboxContainer(env={"SANDBOXD_BROWSER_ALLOW_PRIVATE": "true"})
    try:
        client = Sandbox(base_url=container.base_url, headers=container.headers(), timeout=60)
        yield container, client
    finally:
        container.close()


def _unprocessable(call, loc):
    with pytest.raises(UnprocessableEntityError) as error:
        call()
    detail = error.value.body.detail
    assert detail and list(detail[0].loc) == loc, detail
    return detail[0].msg


def _status(call, status):
    with pytest.raises(ApiError) as error:
        call()
    assert error.value.status_code == status, error.value.body
    return error.value.body


# --- skills -----------------------------------------------------------------------------------


def test_skills_are_registered_from_a_zip_listed_read_and_removed(box):
    container, client = box
    client.skills.clear_skills()
    upload = zip_of({
        "pdf/SKILL.md": PDF_SKILL,
        "pdf/scripts/fill.sh": b"#!/bin/sh\necho filled\n",
        "docx/SKILL.md": DOCX_SKILL,
    })
    answer = client.skills.register_skills(file=("skills.zip", upload, "application/zip"))
    assert isinstance(answer, ResponseSkillRegistrationResult) and answer.success, answer
    assert answer.data.count == 2
    by_name = {skill.name: skill for skill in answer.data.registered}
    # The front matter's name wins over the directory's; without one, the directory's.
    assert set(by_name) == {"pdf-tools", "docx"}
    pdf = by_name["pdf-tools"]
    assert isinstance(pdf, SkillMetadata)
    assert pdf.path == "/home/agent/skills/pdf-tools"
    assert pdf.metadata["description"] == "Fill and read PDF forms"
    assert by_name["docx"].metadata["tags"] == ["docx", "office"]
    # The files are really there, owned by the agent's user.
    assert container.exec("cat", "/home/agent/skills/pdf-tools/scripts/fill.sh") == "#!/bin/sh\necho filled"
    assert container.exec("stat", "-c", "%U", "/home/agent/skills/pdf-tools/SKILL.md") == "agent"

    listed = client.skills.list_metadata()
    assert isinstance(listed, ResponseSkillMetadataCollection)
    assert sorted(s.name for s in listed.data.skills) == ["docx", "pdf-tools"]
    only = client.skills.list_metadata(names="pdf-tools,unknown")
    assert [s.name for s in only.data.skills] == ["pdf-tools"]

    content = client.skills.get_content("pdf-tools")
    assert isinstance(content, ResponseSkillContentResult)
    assert content.data.content.startswith("# PDF tools\n")
    assert "description:" not in content.data.content

    removed = client.skills.delete_skill("docx")
    assert isinstance(removed, ResponseSkillMetadata) and removed.data.name == "docx"
    assert container.exec("sh", "-c", "test -e /home/agent/skills/docx && echo yes || echo no") == "no"
    _status(lambda: client.skills.get_content("docx"), 404)

    cleared = client.skills.clear_skills()
    assert isinstance(cleared, ResponseDict) and cleared.data["removed"] == ["pdf-tools"]
    assert client.skills.list_metadata().data.skills == []


def test_a_lone_skill_file_is_registered_under_the_given_name(box):
    _, client = box
    client.skills.clear_skills()
    answer = client.skills.register_skills(file=("SKILL.md", PDF_SKILL, "text/markdown"), name="mine")
    assert [s.name for s in answer.data.registered] == ["mine"]
    assert client.skills.get_content("mine").data.content.startswith("# PDF tools")
    # Registering the same name again replaces it.
    client.skills.register_skills(file=("SKILL.md", DOCX_SKILL, "text/markdown"), name="mine")
    assert client.skills.get_content("mine").data.content == "Docx body.\n"
    client.skills.clear_skills()


def test_bad_skill_uploads_are_refused_naming_the_field_and_change_nothing(box):
    container, client = box
    client.skills.clear_skills()
    escaping = zip_of({"../../evil/SKILL.md": PDF_SKILL})
    message = _unprocessable(
        lambda: client.skills.register_skills(file=("evil.zip", escaping, "application/zip")), ["body", "file"]
    )
    assert "outside" in message
    assert container.exec("sh", "-c", "ls /home/agent/evil /home/evil 2>&1 | wc -l; ls -A /home/agent/skills") == "2"
    no_skill = zip_of({"readme.txt": b"hello"})
    assert "SKILL.md" in _unprocessable(
        lambda: client.skills.register_skills(file=("x.zip", no_skill, "application/zip")), ["body", "file"]
    )
    bad_yaml = zip_of({"s/SKILL.md": b"---\nname: [unclosed\n---\nbody\n"})
    _unprocessable(lambda: client.skills.register_skills(file=("x.zip", bad_yaml, "application/zip")), ["body", "file"])
    _unprocessable(
        lambda: client.skills.register_skills(file=("SKILL.md", PDF_SKILL, "text/markdown"), name="../up"),
        ["body", "name"],
    )
    _unprocessable(
        lambda: client.skills.register_skills(file=("SKILL.md", PDF_SKILL, "text/markdown"), path="/home/agent"),
        ["body", "path"],
    )
    _unprocessable(lambda: client.skills.get_content(".hidden"), ["path", "name"])
    _status(lambda: client.skills.delete_skill("nothing-here"), 404)
    assert client.skills.list_metadata().data.skills == []
    assert container.exec("ls", "-A", "/home/agent/skills") == ""


# --- captcha ----------------------------------------------------------------------------------

CAPTCHA_PAGE = """<!doctype html>
<html><head><title>Login</title></head><body>
<form><input name="user"></form>
<div id="box" class="g-recaptcha" data-sitekey="fake" style="width: 304px; height: 78px">
  <iframe src="http://127.0.0.1:9/recaptcha/api2/anchor?k=fake" width="304" height="78"></iframe>
  <textarea name="g-recaptcha-response" style="display: none"></textarea>
</div>
<iframe id="turnstile" src="http://127.0.0.1:9/challenges.cloudflare.com/turnstile" width="300" height="65"></iframe>
</body></html>
"""


@pytest.fixture(scope="module")
def captcha_page(box):
    container, client = box
    container.exec("sh", "-c", "mkdir -p /tmp/captcha-site")
    client.file.write_file(file="/tmp/captcha-site/login.html", content=CAPTCHA_PAGE)
    client.file.write_file(file="/tmp/captcha-site/plain.html", content="<p>nothing to solve</p>")
    container.exec(
        "sh", "-c",
        f"cd /tmp/captcha-site && setsid python3 -m http.server {PORT} --bind 127.0.0.1 >/dev/null 2>&1 &",
    )
    base = f"http://127.0.0.1:{PORT}"
    for _ in range(100):
        try:
            client.browser_page.navigate(url=f"{base}/plain.html")
            break
        except ApiError:
            time.sleep(0.1)
    return base


def test_captcha_widgets_are_detected_and_waited_for_until_removed(box, captcha_page):
    _, client = box
    client.browser_page.navigate(url=f"{captcha_page}/plain.html")
    clean = client.browser_captcha.detect()
    assert clean.success and clean.data["detected"] is False and clean.data["widgets"] == []

    client.browser_page.navigate(url=f"{captcha_page}/login.html")
    found = client.browser_captcha.detect()
    assert found.data["detected"] is True, found
    kinds = sorted(w["kind"] for w in found.data["widgets"])
    # The reCAPTCHA container (its iframe inside counts once) and the Turnstile iframe.
    assert kinds == ["recaptcha", "turnstile"], found.data
    assert found.data["url"].endswith("/login.html")

    # Nobody solves it: the wait times out, unresolved.
    started = time.monotonic()
    waited = client.browser_captcha.wait(timeout=1.0, poll_interval=0.2)
    assert isinstance(waited, ResponseCaptchaWaitResult) and isinstance(waited.data, CaptchaWaitResult)
    assert waited.data.resolved is False
    assert 0.9 <= time.monotonic() - started < 10

    # A "person" solves the reCAPTCHA (its token filled in) and the Turnstile goes away.
    def solve():
        time.sleep(1.5)
        client.browser_page.evaluate(
            expression="document.querySelector('[name=g-recaptcha-response]').value = 'token';"
            " document.getElementById('turnstile').remove(); true"
        )

    person = threading.Thread(target=solve)
    person.start()
    started = time.monotonic()
    waited = client.browser_captcha.wait(timeout=20, poll_interval=0.2)
    person.join()
    assert waited.data.resolved is True, waited
    assert 1.2 <= time.monotonic() - started < 15
    after = client.browser_captcha.detect()
    assert after.data["detected"] is False
    assert [w["solved"] for w in after.data["widgets"]] == [True]


def test_bad_captcha_waits_are_refused_naming_the_field(box):
    _, client = box
    _unprocessable(lambda: client.browser_captcha.wait(timeout=0), ["body", "timeout"])
    _unprocessable(lambda: client.browser_captcha.wait(timeout=601), ["body", "timeout"])
    _unprocessable(lambda: client.browser_captcha.wait(timeout=5, poll_interval=0.01), ["body", "poll_interval"])


# --- hooks ------------------------------------------------------------------------------------


def test_bad_hooks_are_refused_naming_the_field_and_change_nothing(box):
    _, client = box
    before = client.sandbox.list_hooks().data
    _unprocessable(lambda: client.sandbox.register_hook(name="a b", command="true"), ["body", "name"])
    _unprocessable(lambda: client.sandbox.register_hook(name="x", command="  "), ["body", "command"])
    _unprocessable(lambda: client.sandbox.register_hook(name="x", command="true", timeout=60), ["body", "timeout"])
    _unprocessable(lambda: client.sandbox.register_hook(name="x", command="true", event="startup"), ["body", "event"])
    _unprocessable(lambda: client.sandbox.list_hooks(event="startup"), ["query", "event"])
    _status(lambda: client.sandbox.remove_hook("nobody"), 404)
    assert client.sandbox.list_hooks().data == before


def test_shutdown_hooks_run_in_priority_order_when_the_container_stops():
    env_hooks = json.dumps([
        {"name": "from-env", "command": "echo HOOK-ENV-RAN; echo env >> /home/agent/hooks.log", "priority": 5},
    ])
    container = SandboxContainer(env={"SANDBOX_SHUTDOWN_HOOKS": env_hooks})
    try:
        client = Sandbox(base_url=container.base_url, headers=container.headers(), timeout=60)
        listed = client.sandbox.list_hooks()
        assert isinstance(listed, ResponseListSandboxHook)
        assert [(h.name, h.source) for h in listed.data] == [("from-env", "env")]
        # An environment hook cannot be removed.
        _status(lambda: client.sandbox.remove_hook("from-env"), 403)
        _status(lambda: client.sandbox.register_hook(name="from-env", command="true"), 409)

        first = client.sandbox.register_hook(
            name="first", command="sleep 0.3; echo first >> /home/agent/hooks.log; echo HOOK-FIRST-RAN",
            event="shutdown", timeout=3, priority=1,
        )
        assert isinstance(first, ResponseSandboxHook) and isinstance(first.data, SandboxHook)
        assert first.data.source == "api" and first.data.priority == 1 and first.data.timeout == 3
        # Same priority: in parallel with "first".
        client.sandbox.register_hook(name="also-first", command="echo also >> /home/agent/also.log", priority=1)
        # Runs first of all, and sees the workspace as its directory and no API key.
        client.sandbox.register_hook(
            name="zero", command='pwd > /home/agent/zero.log; echo "key=${SANDBOX_API_KEY:-none}" >> /home/agent/zero.log',
            priority=0,
        )
        # Hangs: killed at its timeout, the stop still within Docker's grace period.
        client.sandbox.register_hook(name="hangs", command="sleep 60", timeout=2, priority=9)
        # Registered then removed: never runs.
        client.sandbox.register_hook(name="gone", command="echo GONE >> /home/agent/hooks.log")
        client.sandbox.remove_hook("gone")
        names = [h.name for h in client.sandbox.list_hooks(event="shutdown").data]
        assert names == ["zero", "also-first", "first", "from-env", "hangs"]

        started = time.monotonic()
        docker("stop", container.id)
        took = time.monotonic() - started
        # Killed by Docker after 10 s would exit 137.
        assert docker("inspect", "-f", "{{.State.ExitCode}}", container.id) == "0"
        assert took < 10, took
        assert took >= 2, took  # the hanging hook was given its 2 s

        def read(path):
            return subprocess.run(
                ["docker", "cp", f"{container.id}:{path}", "-"], capture_output=True, check=True
            ).stdout

        assert b"first\nenv\n" in read("/home/agent/hooks.log")
        assert b"GONE" not in read("/home/agent/hooks.log")
        assert b"also" in read("/home/agent/also.log")
        zero = read("/home/agent/zero.log")
        assert b"/home/agent/workspace" in zero and b"key=none" in zero, zero
        logs = subprocess.run(["docker", "logs", container.id], capture_output=True, text=True)
        output = logs.stdout + logs.stderr
        assert output.index("HOOK-FIRST-RAN") < output.index("HOOK-ENV-RAN"), output[-3000:]
    finally:
        container.close()


# --- page screencast --------------------------------------------------------------------------

ANIMATED_PAGE = """<!doctype html>
<html><body style="margin: 0">
<div id="n" style="font-size: 120px">0</div>
<script>let n = 0; setInterval(() => { document.getElementById('n').textContent = ++n; }, 50);</script>
</body></html>
"""


def ffprobe(container, path):
    out = container.exec(
        "ffprobe", "-v", "error", "-show_entries", "format=duration:stream=codec_name,width,height",
        "-of", "json", path,
    )
    return json.loads(out)


def test_page_record_once_makes_a_real_video_of_the_page(box, captcha_page):
    container, client = box
    client.file.write_file(file="/tmp/captcha-site/anim.html", content=ANIMATED_PAGE)
    client.browser_page.navigate(url=f"{captcha_page}/anim.html")
    started = time.monotonic()
    answer = client.browser_page.record(action="once", duration=2, fps=10, save_path="/tmp/page-once.mp4")
    assert isinstance(answer, ResponseDict) and answer.success, answer
    assert time.monotonic() - started >= 2
    data = answer.data
    assert data["status"] == "stopped" and data["ended"] == "stopped", data
    assert data["save_path"] == "/tmp/page-once.mp4"
    assert 15 <= data["frames"] <= 25, data
    probe = ffprobe(container, "/tmp/page-once.mp4")
    assert probe["streams"][0]["codec_name"] == "h264"
    assert 1.5 <= float(probe["format"]["duration"]) <= 3.0, probe
    downloaded = b"".join(client.file.download_file(path="/tmp/page-once.mp4"))
    assert len(downloaded) == data["file_size_bytes"] > 0


def test_page_record_start_pause_resume_stop(box, captcha_page):
    container, client = box
    client.browser_page.navigate(url=f"{captcha_page}/anim.html")
    started = client.browser_page.record(action="start", fps=10, save_path="/tmp/page-start.mp4")
    assert started.data["status"] == "recording"
    # One at a time.
    _status(lambda: client.browser_page.record(action="start"), 409)
    time.sleep(1.0)
    paused = client.browser_page.record(action="pause")
    assert paused.data["status"] == "paused"
    frames = paused.data["frames"]
    time.sleep(1.0)
    # Paused: no frame is added.
    assert client.browser_page.record(action="status").data["frames"] <= frames + 1
    assert client.browser_page.record(action="resume").data["status"] == "recording"
    time.sleep(1.0)
    stopped = client.browser_page.record(action="stop")
    assert stopped.data["status"] == "stopped" and stopped.data["ended"] == "stopped", stopped.data
    assert 14 <= stopped.data["frames"] <= 26, stopped.data
    probe = ffprobe(container, "/tmp/page-start.mp4")
    assert 1.4 <= float(probe["format"]["duration"]) <= 2.8, probe
    _status(lambda: client.browser_page.record(action="stop"), 409)
    _status(lambda: client.browser_page.record(action="pause"), 409)
    assert "ffmpeg" not in container.exec("ps", "-eo", "comm")


def test_bad_page_records_are_refused_naming_the_field_and_start_nothing(box):
    container, client = box
    _unprocessable(lambda: client.browser_page.record(action="rewind"), ["body", "action"])
    _unprocessable(lambda: client.browser_page.record(action="once", duration=61), ["body", "duration"])
    _unprocessable(lambda: client.browser_page.record(action="start", fps=0), ["body", "fps"])
    _unprocessable(lambda: client.browser_page.record(action="start", quality=101), ["body", "quality"])
    _unprocessable(lambda: client.browser_page.record(action="start", save_path="  "), ["body", "save_path"])
    _status(lambda: client.browser_page.record(action="start", save_path="/etc/x.mp4"), 403)
    assert client.browser_page.record(action="status").data["status"] != "recording"
    assert "ffmpeg" not in container.exec("ps", "-eo", "comm")
