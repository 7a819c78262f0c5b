"""AIO's screen recording (``client.display.record``) through AIO's own SDK, unchanged, against
sandboxd in the image: ffmpeg records the real Xvfb desktop, the file is a real video (checked
with ffprobe in the container) and downloadable through the file API; one recording at a time,
bounded, and bad input refused naming the field."""

import json
import time

import pytest
from agent_sandbox.core.api_error import ApiError
from agent_sandbox.types import DisplayRecordResult, ResponseDisplayRecordResult


def ffprobe(sandbox, path: str) -> dict:
    out = sandbox.exec(
        "ffprobe", "-v", "error", "-show_entries", "format=duration:stream=codec_name,width,height",
        "-of", "json", path,
    )
    return json.loads(out)


def screen_size(sandbox) -> tuple[int, int]:
    """The X screen's size, as the X server reports it."""
    info = sandbox.exec("xdpyinfo", "-display", ":1")
    dimensions = next(line for line in info.splitlines() if "dimensions:" in line)
    width, height = dimensions.split()[1].split("x")
    return int(width), int(height)


def ffmpeg_running(sandbox) -> bool:
    return "ffmpeg" in sandbox.exec("ps", "-eo", "comm")


def test_record_start_stop_makes_a_real_video_of_the_screen(client, sandbox):
    path = "/home/agent/workspace/rec/desktop.mp4"
    started = client.display.record(action="start", save_path=path, fps=10)
    assert isinstance(started, ResponseDisplayRecordResult)
    assert isinstance(started.data, DisplayRecordResult)
    assert started.data.status == "recording"
    assert started.data.save_path == path
    limits = started.data.model_dump()
    # The limits are in the answer.
    assert limits["max_duration"] == 600
    assert limits["max_file_size_bytes"] == 1 << 30
    # Something moves on screen while recording.
    client.browser_page.navigate(url="about:blank")
    time.sleep(2.5)
    status = client.display.record(action="status").data
    assert status.status == "recording"
    assert status.duration > 0.5
    stopped = client.display.record(action="stop").data
    assert stopped.status == "stopped"
    assert stopped.save_path == path
    assert stopped.duration >= 2
    assert stopped.file_size_bytes > 1000
    assert stopped.model_dump()["ended"] == "stopped"
    assert not ffmpeg_running(sandbox)

    probe = ffprobe(sandbox, path)
    width, height = screen_size(sandbox)
    stream = probe["streams"][0]
    assert stream["codec_name"] == "h264"
    assert (stream["width"], stream["height"]) == (width & ~1, height & ~1)
    assert float(probe["format"]["duration"]) > 1.5

    downloaded = b"".join(client.file.download_file(path=path))
    assert len(downloaded) == stopped.file_size_bytes
    assert downloaded[4:8] == b"ftyp"

    # Stop again: the last recording's report, not a new one.
    again = client.display.record(action="stop").data
    assert again.status == "stopped" and again.save_path == path


def test_a_second_start_is_a_conflict_and_the_first_goes_on(client, sandbox):
    first = client.display.record(action="start", fps=5).data
    try:
        assert first.status == "recording"
        assert first.save_path.startswith("/home/agent/workspace/recordings/recording_")
        with pytest.raises(ApiError) as refused:
            client.display.record(action="start", save_path="/tmp/second.mp4")
        assert refused.value.status_code == 409
        assert "already in progress" in refused.value.body["message"]
        assert client.display.record(action="status").data.status == "recording"
    finally:
        stopped = client.display.record(action="stop").data
    assert stopped.status == "stopped"
    assert float(ffprobe(sandbox, stopped.save_path)["format"]["duration"]) > 0


def test_max_duration_stops_the_recording_by_itself(client, sandbox):
    started = client.display.record(
        action="start", save_path="/tmp/short.mp4", max_duration=1.5, width=320, height=240
    ).data
    assert started.status == "recording"
    for _ in range(100):
        if client.display.record(action="status").data.status == "stopped":
            break
        time.sleep(0.1)
    ended = client.display.record(action="status").data
    assert ended.status == "stopped"
    assert ended.model_dump()["ended"] == "limit_reached"
    assert not ffmpeg_running(sandbox)
    probe = ffprobe(sandbox, "/tmp/short.mp4")
    assert (probe["streams"][0]["width"], probe["streams"][0]["height"]) == (320, 240)
    assert 1.0 <= float(probe["format"]["duration"]) <= 1.6


@pytest.mark.parametrize(
    "body, field",
    [
        ({"action": "start", "fps": 0}, "fps"),
        ({"action": "start", "fps": 2.5}, "fps"),
        ({"action": "start", "crf": 60}, "crf"),
        ({"action": "start", "max_duration": 0}, "max_duration"),
        ({"action": "start", "max_duration": 99999}, "max_duration"),
        ({"action": "start", "width": 99999}, "width"),
        ({"action": "start", "height": 241}, "height"),
        ({"action": "rewind"}, "action"),
        ({}, "action"),
    ],
)
def test_bad_fields_are_refused_naming_them_and_start_nothing(sandbox, body, field):
    status, answer = sandbox.request("POST", "/v1/display/record", body)
    assert status == 422, answer
    assert answer["detail"][0]["loc"][-1] == field, answer
    assert not ffmpeg_running(sandbox)


def test_save_path_is_confined(sandbox):
    status, answer = sandbox.request(
        "POST", "/v1/display/record", {"action": "start", "save_path": "/etc/evil.mp4"}
    )
    assert status == 403, answer
    assert not ffmpeg_running(sandbox)


def test_stop_with_nothing_recorded_is_a_conflict(own_sandbox):
    status, answer = own_sandbox.request("POST", "/v1/display/record", {"action": "stop"})
    assert status == 409, answer
    assert "no recording" in answer["message"]
    status, answer = own_sandbox.request("POST", "/v1/display/record", {"action": "status"})
    assert status == 200 and answer["data"]["status"] == "idle"

