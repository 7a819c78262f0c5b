"""AIO's file watch API (``client.file.watch_*``) through AIO's own SDK, unchanged, against
sandboxd in the image on real inotify: changes made through the file API and through a shell
command are seen by poll, by wait and by the Server-Sent Events stream; bad input is a 4xx
naming the field; a stopped watcher is gone."""

import json
import threading
import time
import uuid

import httpx
import pytest
from agent_sandbox.core.api_error import ApiError
from agent_sandbox.errors import UnprocessableEntityError

BASE = "/home/agent/workspace"


@pytest.fixture
def tree(client):
    path = f"{BASE}/watch-{uuid.uuid4().hex[:8]}"
    client.shell.exec_command(command=f"mkdir -p {path}/sub")
    return path


@pytest.fixture
def watcher(client, tree):
    created = client.file.watch_create(path=tree, debounce=50)
    yield created
    try:
        client.file.watch_stop(created["watcher_id"])
    except ApiError:
        pass


def poll_until(client, watcher_id, done, cursor=0, deadline=10.0):
    """Long-polls until ``done(events)`` holds; returns the events and the cursor."""
    events = []
    end = time.monotonic() + deadline
    while not done(events):
        assert time.monotonic() < end, f"timed out; events so far: {events}"
        answer = client.file.watch_poll(watcher_id, since=cursor, timeout=2)
        assert answer["watcher_id"] == watcher_id and answer["active"] is True
        assert answer["overflow"] is False, answer
        events += answer["events"]
        cursor = answer["cursor"]
    return events, cursor


def seen(events, kind, rel):
    return any(e["type"] == kind and e["relative_path"] == rel for e in events)


def test_create_answers_the_watcher_and_lists_it(client, tree, watcher):
    assert watcher["watcher_id"].startswith("w-")
    assert watcher["path"] == tree
    assert watcher["recursive"] is True
    assert watcher["debounce"] == 50
    assert ".git" in watcher["exclude"] and "node_modules" in watcher["exclude"]
    assert watcher["directories"] == 2
    listed = client.file.watch_list()
    assert watcher["watcher_id"] in [w["watcher_id"] for w in listed["watchers"]]
    assert listed["count"] == len(listed["watchers"])


def test_poll_sees_writes_through_the_api_and_the_shell(client, tree, watcher):
    wid = watcher["watcher_id"]
    client.file.write_file(file=f"{tree}/api.txt", content="from the API\n")
    client.shell.exec_command(
        command=f"head -c 100000 /dev/zero > {tree}/sub/shell.bin && mv {tree}/sub/shell.bin {tree}/moved.bin"
        f" && chmod 600 {tree}/moved.bin && rm {tree}/api.txt"
    )
    events, cursor = poll_until(
        client, wid, lambda ev: seen(ev, "remove", "api.txt") and seen(ev, "chmod", "moved.bin")
    )
    created = next(e for e in events if e["relative_path"] == "api.txt" and e["type"] == "create")
    assert created["path"] == f"{tree}/api.txt"
    assert created["size"] == len("from the API\n")
    assert created["is_dir"] is False and created["inode"] > 0 and created["mtime"] > 0
    shell = next(e for e in events if e["relative_path"] == "sub/shell.bin")
    assert shell["type"] == "create" and shell["size"] == 100000
    renamed = next(e for e in events if e["type"] == "rename")
    assert renamed["path"] == f"{tree}/moved.bin"
    assert renamed["old_path"] == f"{tree}/sub/shell.bin"
    assert [e["seq"] for e in events] == list(range(events[0]["seq"], events[0]["seq"] + len(events)))

    # Nothing new: an immediate poll answers at once with the same cursor.
    started = time.monotonic()
    answer = client.file.watch_poll(wid, since=cursor)
    assert answer["events"] == [] and answer["cursor"] == cursor
    assert time.monotonic() - started < 1.0
    # The events route without `Accept: text/event-stream` answers the same JSON.
    again = client.file.watch_events(wid)
    assert [e["seq"] for e in again["events"]][: len(events)] == [e["seq"] for e in events]


def test_wait_returns_the_change_when_it_happens(client, tree):
    target = f"{tree}/result.json"

    def write_later():
        time.sleep(0.5)
        client.shell.exec_command(command=f"echo '{{\"ok\": true}}' > {target}")

    writer = threading.Thread(target=write_later)
    writer.start()
    started = time.monotonic()
    answer = client.file.watch_wait(path=target, timeout=20, event_types=["create"])
    writer.join()
    assert answer["timed_out"] is False
    event = answer["event"]
    assert event["type"] == "create" and event["path"] == target
    assert event["size"] == len('{"ok": true}\n')
    assert 0.3 < time.monotonic() - started < 10

    # There already: `create` answers at once; otherwise the wait runs out.
    assert client.file.watch_wait(path=target, timeout=5)["event"]["seq"] == 0
    answer = client.file.watch_wait(path=target, timeout=1, event_types=["remove"])
    assert answer == {"event": None, "timed_out": True}


def test_the_event_stream_delivers_changes_as_server_sent_events(client, sandbox, tree, watcher):
    wid = watcher["watcher_id"]
    url = f"{sandbox.base_url}/v1/file/watch/{wid}/events"
    headers = {**sandbox.headers(), "Accept": "text/event-stream"}
    received = []
    with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(30.0)) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        kind, ident = None, None
        deadline = time.monotonic() + 20
        wrote = False
        for line in lines:
            assert time.monotonic() < deadline, received
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("id:"):
                ident = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                data = json.loads(line.split(":", 1)[1])
                received.append((kind, ident, data))
                if kind == "watch_started" and not wrote:
                    wrote = True
                    client.file.write_file(file=f"{tree}/sub/streamed.txt", content="x" * 10)
                    client.shell.exec_command(command=f"mkdir {tree}/newdir && touch {tree}/newdir/inner")
                if kind == "file_change" and data["relative_path"] == "newdir/inner":
                    break
    kinds = [k for k, _, _ in received]
    assert kinds[0] == "watch_started"
    changes = [d for k, _, d in received if k == "file_change"]
    assert seen(changes, "create", "sub/streamed.txt")
    assert seen(changes, "create", "newdir")
    ids = [i for k, i, _ in received if k == "file_change"]
    assert all(i == f"{wid}:{d['seq']}" for i, (_, _, d) in zip(ids, [r for r in received if r[0] == "file_change"]))


def test_bad_input_is_refused_naming_the_field(client, tree):
    def field_of(call):
        with pytest.raises(UnprocessableEntityError) as error:
            call()
        detail = error.value.body.detail
        # FastAPI's shape: ["body", field] (and an index for an item of a list).
        assert detail[0].loc[0] == "body", detail
        return detail[0].loc[1]

    assert field_of(lambda: client.file.watch_create(path=tree, debounce=10)) == "debounce"
    assert field_of(lambda: client.file.watch_create(path=tree, exclude=["a["])) == "exclude"
    assert field_of(lambda: client.file.watch_create(path=tree, include_patterns=[""])) == "include_patterns"
    assert field_of(lambda: client.file.watch_create(path="  ")) == "path"
    assert field_of(lambda: client.file.watch_wait(path=f"{tree}/x", timeout=0)) == "timeout"
    assert field_of(lambda: client.file.watch_wait(path=f"{tree}/x", event_types=["explode"])) == "event_types"

    with pytest.raises(ApiError) as error:
        client.file.watch_create(path="/etc")
    assert error.value.status_code == 403
    assert "/etc" in error.value.body["message"]
    with pytest.raises(ApiError) as error:
        client.file.watch_create(path=f"{tree}/missing")
    assert error.value.status_code == 404
    with pytest.raises(ApiError) as error:
        client.file.watch_poll("w-nosuchwatcher")
    assert error.value.status_code == 404


def test_poll_fields_are_checked_and_stop_removes_the_watcher(client, tree):
    wid = client.file.watch_create(path=tree, recursive=False)["watcher_id"]
    with pytest.raises(UnprocessableEntityError) as error:
        client.file.watch_poll(wid, limit=0)
    assert error.value.body.detail[0].loc[-1] == "limit"
    with pytest.raises(UnprocessableEntityError) as error:
        client.file.watch_poll(wid, timeout=301)
    assert error.value.body.detail[0].loc[-1] == "timeout"

    assert client.file.watch_stop(wid) == {"watcher_id": wid, "stopped": True}
    assert wid not in [w["watcher_id"] for w in client.file.watch_list()["watchers"]]
    with pytest.raises(ApiError) as error:
        client.file.watch_stop(wid)
    assert error.value.status_code == 404
