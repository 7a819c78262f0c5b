"""Agentbox's A2A *client*: runs whose model is `a2a:<agent card URL>` hand their task to a
remote A2A agent and follow it. Seed 003's semantics table, row by row, against two remotes:

- a second Agentbox orchestrator on loopback, its runs driven by the conformance executor
  (deterministic answers chosen by the task's first word; no sandbox);
- a small A2A server written with the official `a2a-sdk` (`a2a_remote_agent.py`), for what an
  Agentbox remote does not do: refuse a cancel, cut a stream mid-task, answer without
  streaming (polled), a file by URL behind its bearer;
- a raw socket that takes a request and hangs up, for the send whose outcome is unknown.

Every run here is real: the local orchestrator's driver, its SQLite, the remote's JSON-RPC."""

import json
import pathlib
import secrets
import socket
import sqlite3
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from orchestrator_process import OrchestratorProcess  # noqa: E402

ADMIN_KEY = "py-a2a-client-admin-" + secrets.token_hex(16)
TERMINAL = {"completed", "failed", "canceled", "unknown"}


class Node(OrchestratorProcess):
    def __init__(self, prefix, extra=()):
        super().__init__(ADMIN_KEY, prefix, list(extra))

    def api(self, method, path, key=ADMIN_KEY, **kwargs):
        headers = kwargs.pop("headers", {})
        headers["Authorization"] = f"Bearer {key}"
        return requests.request(method, self.url + path, headers=headers, timeout=90, **kwargs)

    def new_key(self, name):
        answer = self.api("POST", "/v1/keys", json={"name": name + "-" + secrets.token_hex(3)})
        assert answer.status_code == 201, answer.text
        return answer.json()["key"]

    @property
    def card_url(self):
        return self.url + "/.well-known/agent-card.json"


@pytest.fixture(scope="module")
def remote():
    node = Node("pya2ar-", ["--a2a-conformance", "--a2a-model", "conformance"])
    yield node
    node.close()


@pytest.fixture(scope="module")
def local():
    # The remotes here are on this host: allowed explicitly (public addresses only by default).
    node = Node("pya2al-", ["--a2a-remote-networks", "127.0.0.0/8"])
    yield node
    node.close()


@pytest.fixture(scope="module")
def remote_key(remote):
    return remote.new_key("remote-caller")


@pytest.fixture(scope="module")
def key(local, remote, remote_key):
    """A key of the local orchestrator with the remote's key stored as its credential."""
    key = local.new_key("local")
    answer = local.api("POST", "/v1/a2a/credentials", key, json={"agent": remote.card_url, "token": remote_key})
    assert answer.status_code == 201, answer.text
    return key


def start(local, key, task, model, **headers):
    answer = local.api("POST", "/v1/runs", key, json={"task": task, "model": model}, headers=headers)
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


def wait_for(local, key, run_id, statuses, timeout=90):
    deadline = time.time() + timeout
    run = None
    while time.time() < deadline:
        run = local.api("GET", f"/v1/runs/{run_id}", key).json()
        if run["status"] in statuses:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} never became {statuses}: {run}\n{events(local, key, run_id)}")


def events(local, key, run_id):
    answer = local.api("GET", f"/v1/runs/{run_id}/events?format=json", key)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return body["events"] if isinstance(body, dict) else body


def of_type(log, kind):
    return [e for e in log if e.get("type") == kind or e.get("data", {}).get("type") == kind]


def data(event):
    return event.get("data", event)


def remote_runs(remote, remote_key, task):
    runs = remote.api("GET", "/v1/runs", remote_key).json()["runs"]
    return [r for r in runs if r["task"] == task]


# --- the credential ------------------------------------------------------------------------


def test_a_credential_is_stored_sealed_and_never_given_back(local, remote):
    key = local.new_key("cred")
    token = "tok-" + secrets.token_hex(12)
    made = local.api("POST", "/v1/a2a/credentials", key, json={"agent": remote.card_url, "token": token})
    assert made.status_code == 201, made.text
    assert token not in made.text and made.json()["origin"] == remote.url
    listed = local.api("GET", "/v1/a2a/credentials", key)
    assert token not in listed.text
    assert [c["origin"] for c in listed.json()["credentials"]] == [remote.url]
    # Another key sees none of it.
    assert local.api("GET", "/v1/a2a/credentials", local.new_key("other")).json()["credentials"] == []
    # Nothing in the database file holds the token in the clear.
    for path in pathlib.Path(local.data.name).rglob("*.db*"):
        assert token.encode() not in path.read_bytes(), path
    # Bad input names the field and changes nothing.
    for body, field in [({"agent": "file:///etc/passwd", "token": "x"}, "agent"),
                        ({"agent": "http://user:pw@h/card", "token": "x"}, "agent"),
                        ({"agent": remote.card_url, "token": ""}, "token"),
                        ({"agent": remote.card_url, "token": "two words"}, "token")]:
        refused = local.api("POST", "/v1/a2a/credentials", key, json=body)
        assert refused.status_code == 422 and field in refused.text, refused.text
    assert local.api("POST", "/v1/a2a/credentials", key, json={"agent": remote.card_url, "token": "x", "extra": 1}).status_code in (400, 422)
    assert len(local.api("GET", "/v1/a2a/credentials", key).json()["credentials"]) == 1
    gone = local.api("DELETE", f"/v1/a2a/credentials/{made.json()['id']}", key)
    assert gone.status_code == 204, gone.text
    assert local.api("DELETE", f"/v1/a2a/credentials/{made.json()['id']}", key).status_code == 404


def test_bad_a2a_models_are_refused_and_make_no_run(local, key):
    before = len(local.api("GET", "/v1/runs", key).json()["runs"])
    for model in ["a2a:", "a2a:file:///etc/passwd", "a2a:not a url", "a2a:http://u:p@h/card"]:
        answer = local.api("POST", "/v1/runs", key, json={"task": "x", "model": model})
        assert answer.status_code == 422 and "model" in answer.text, (model, answer.text)
    assert len(local.api("GET", "/v1/runs", key).json()["runs"]) == before


# --- seed 003's table against a second orchestrator ----------------------------------------


def test_async_completion_is_what_the_remote_says(local, key, remote):
    run = start(local, key, "tck-complete-task " + uuid.uuid4().hex[:6], "a2a:" + remote.card_url)
    assert run["status"] in ("queued", "running"), "accepted is not completed"
    done = wait_for(local, key, run["id"], TERMINAL)
    assert done["status"] == "completed", done
    assert done["answer"] == "Hello from TCK"
    log = [data(e) for e in events(local, key, run["id"])]
    submitted = of_type(log, "remote.submitted")
    assert len(submitted) == 1 and submitted[0]["agent"] == remote.card_url
    revealed = [e for e in of_type(log, "remote.task") if e.get("task_id")]
    assert revealed and revealed[-1]["state"] == "TASK_STATE_COMPLETED", log
    # The remote's task is a run there, completed.
    task_id = revealed[0]["task_id"]
    assert remote.api("GET", f"/v1/runs/{task_id}", remote.admin_key).json()["status"] == "completed"


def test_a_direct_message_is_a_direct_answer_without_a_task(local, key, remote):
    run = start(local, key, "tck-message-response", "a2a:" + remote.card_url)
    done = wait_for(local, key, run["id"], TERMINAL)
    assert done["status"] == "completed" and done["answer"] == "Direct message response", done
    told = of_type([data(e) for e in events(local, key, run["id"])], "remote.task")
    assert told and told[0]["state"] == "message" and "task_id" not in told[0], told


def test_rejection_and_failure_keep_the_remotes_state_and_reason(local, key, remote):
    rejected = start(local, key, "tck-reject-task", "a2a:" + remote.card_url)
    failed = start(local, key, "agentbox-fail", "a2a:" + remote.card_url)
    rejected = wait_for(local, key, rejected["id"], TERMINAL)
    failed = wait_for(local, key, failed["id"], TERMINAL)
    assert rejected["status"] == "failed" and "rejected" in rejected["reason"], rejected
    assert failed["status"] == "failed" and "asked to fail" in failed["reason"], failed
    for run, state, kind in [(rejected, "TASK_STATE_REJECTED", "rejected"), (failed, "TASK_STATE_FAILED", "remote_error")]:
        log = [data(e) for e in events(local, key, run["id"])]
        assert of_type(log, "remote.task")[-1]["state"] == state, log
        assert of_type(log, "error")[-1]["kind"] == kind, log


def test_input_continuation_through_the_runs_input_route(local, key, remote):
    run = start(local, key, "tck-input-required", "a2a:" + remote.card_url)
    waiting = wait_for(local, key, run["id"], {"waiting_for_input"} | TERMINAL)
    assert waiting["status"] == "waiting_for_input", waiting
    asked = of_type([data(e) for e in events(local, key, run["id"])], "input.requested")
    assert asked and asked[-1]["question"] == "Input required by TCK"
    answered = local.api("POST", f"/v1/runs/{run['id']}/input", key, json={"text": "blue"})
    assert answered.status_code == 200, answered.text
    done = wait_for(local, key, run["id"], TERMINAL)
    assert done["status"] == "completed" and done["answer"] == "Received: blue", done


def test_auth_required_is_its_own_state_not_a_question(local, key, remote):
    run = start(local, key, "agentbox-auth", "a2a:" + remote.card_url)
    waiting = wait_for(local, key, run["id"], {"auth_required"} | TERMINAL)
    assert waiting["status"] == "auth_required", waiting
    log = [data(e) for e in events(local, key, run["id"])]
    assert not of_type(log, "input.requested"), "auth-required is not a chat question"
    assert "Sign in" in of_type(log, "remote.task")[-1]["message"]
    said = local.api("POST", f"/v1/runs/{run['id']}/input", key, json={"text": "I signed in"})
    assert said.status_code == 200, said.text
    done = wait_for(local, key, run["id"], TERMINAL)
    assert done["status"] == "completed", done


def test_a_cancel_ends_the_run_when_the_remote_confirms(local, key, remote, remote_key):
    task = "please converse " + uuid.uuid4().hex[:6]
    run = start(local, key, task, "a2a:" + remote.card_url)
    wait_for(local, key, run["id"], {"waiting_for_input"})
    canceled = local.api("POST", f"/v1/runs/{run['id']}/cancel", key)
    assert canceled.status_code == 200, canceled.text
    done = wait_for(local, key, run["id"], TERMINAL)
    assert done["status"] == "canceled", done
    statuses = [e["status"] for e in of_type([data(e) for e in events(local, key, run["id"])], "run.status")]
    assert "canceling" in statuses and statuses[-1] == "canceled", statuses
    [there] = remote_runs(remote, remote_key, task)
    assert there["status"] == "canceled"


def test_file_artifacts_are_kept_and_a_failed_download_is_reported(local, key, remote):
    run = start(local, key, "tck-artifact-file", "a2a:" + remote.card_url)
    done = wait_for(local, key, run["id"], TERMINAL)
    assert done["status"] == "completed", done
    artifacts = local.api("GET", f"/v1/runs/{run['id']}/artifacts", key).json()["artifacts"]
    kept = {a["name"]: a for a in artifacts}
    assert "remote/output.txt" in kept, artifacts
    body = local.api("GET", f"/v1/runs/{run['id']}/artifacts/remote/output.txt", key)
    assert body.status_code == 200 and body.content == b"tck", body.content
    # A file the remote names at a URL nobody can reach is not kept, and the run says why.
    link = start(local, key, "tck-artifact-file-url", "a2a:" + remote.card_url)
    wait_for(local, key, link["id"], TERMINAL)
    log = [data(e) for e in events(local, key, link["id"])]
    skipped = of_type(log, "artifact.skipped")
    assert skipped and "downloading https://example.com/output.txt" in skipped[0]["reason"], log


def test_a_duplicate_submission_makes_one_remote_task(local, key, remote, remote_key):
    task = "tck-complete-task dup-" + uuid.uuid4().hex[:6]
    idempotency = {"Idempotency-Key": "dup-" + uuid.uuid4().hex}
    first = start(local, key, task, "a2a:" + remote.card_url, **idempotency)
    second = start(local, key, task, "a2a:" + remote.card_url, **idempotency)
    assert first["id"] == second["id"]
    wait_for(local, key, first["id"], TERMINAL)
    assert len(remote_runs(remote, remote_key, task)) == 1


def test_an_orchestrator_restart_mid_task_follows_the_same_remote_task(local, key, remote, remote_key):
    task = "agentbox-linger restart-" + uuid.uuid4().hex[:6]
    run = start(local, key, task, "a2a:" + remote.card_url)
    deadline = time.time() + 60
    while not [e for e in of_type([data(e) for e in events(local, key, run["id"])], "remote.task") if e.get("task_id")]:
        assert time.time() < deadline, "the remote task was never revealed"
        time.sleep(0.2)
    local.restart()
    done = wait_for(local, key, run["id"], TERMINAL, timeout=120)
    assert done["status"] == "completed", done
    assert len(remote_runs(remote, remote_key, task)) == 1, "the task was sent once"
    assert len(of_type([data(e) for e in events(local, key, run["id"])], "remote.submitted")) == 1


def test_a_remote_restart_mid_task_is_waited_out_and_the_task_followed(local, key, remote, remote_key):
    task = "agentbox-linger remote-restart-" + uuid.uuid4().hex[:6]
    run = start(local, key, task, "a2a:" + remote.card_url)
    wait_for(local, key, run["id"], {"running"})
    time.sleep(1)
    remote.restart()
    done = wait_for(local, key, run["id"], TERMINAL, timeout=120)
    assert done["status"] == "completed", (done, events(local, key, run["id"]))
    assert len(remote_runs(remote, remote_key, task)) == 1


def test_attack_a_run_cannot_make_the_orchestrator_reach_the_hosts_own_services(local, remote):
    """A key holder names a URL on the orchestrator's host (or the private network, or a cloud
    metadata address) as a remote agent: without `--a2a-remote-networks` the orchestrator
    fetches nothing there, whether the host is a literal IP or a name that resolves to one."""
    key = remote.new_key("probe")
    seen = []

    class Trap(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    trap = ThreadingHTTPServer(("127.0.0.1", 0), Trap)
    threading.Thread(target=trap.serve_forever, daemon=True).start()
    try:
        port = trap.server_address[1]
        for card in [f"http://127.0.0.1:{port}/.well-known/agent-card.json",
                     f"http://localhost:{port}/.well-known/agent-card.json",
                     "http://169.254.169.254/latest/meta-data/"]:
            run = start(remote, key, "probe", "a2a:" + card)
            done = wait_for(remote, key, run["id"], TERMINAL)
            assert done["status"] == "failed" and "--a2a-remote-networks" in done["reason"], done
        assert seen == [], "nothing on the host was fetched"
    finally:
        trap.shutdown()


def test_without_a_credential_the_remote_refuses_and_the_run_says_so(local, remote):
    bare = local.new_key("bare")
    run = start(local, bare, "tck-complete-task", "a2a:" + remote.card_url)
    done = wait_for(local, bare, run["id"], TERMINAL)
    assert done["status"] == "failed" and "HTTP 401" in done["reason"] and "/v1/a2a/credentials" in done["reason"], done


# --- a send whose outcome is unknown ---------------------------------------------------------


class HangUp(BaseHTTPRequestHandler):
    """Serves an agent card; takes any POST and hangs up without an answer (a remote that
    crashed mid-request: the task may or may not exist there)."""

    posts = 0

    def do_GET(self):
        host = f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"
        body = json.dumps({"name": "hang-up", "capabilities": {"streaming": False},
                           "supportedInterfaces": [{"url": host + "/a2a", "protocolBinding": "JSONRPC",
                                                    "protocolVersion": "1.0"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        HangUp.posts += 1
        self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, *args):
        pass


def test_a_send_with_no_answer_ends_unknown_and_is_never_sent_again(local, key):
    server = ThreadingHTTPServer(("127.0.0.1", 0), HangUp)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        card = f"http://127.0.0.1:{server.server_address[1]}/.well-known/agent-card.json"
        run = start(local, key, "do something", "a2a:" + card)
        done = wait_for(local, key, run["id"], TERMINAL)
        assert done["status"] == "unknown", done
        assert "not sent again" in done["reason"]
        time.sleep(1)
        assert HangUp.posts == 1
    finally:
        server.shutdown()


# --- seed 003's table against an a2a-sdk server --------------------------------------------


@pytest.fixture(scope="module")
def sdk_agents():
    """Two a2a-sdk agents: one that streams, one that does not (its tasks are polled)."""
    import a2a_remote_agent
    streaming = a2a_remote_agent.start(token="sdk-" + secrets.token_hex(8), streaming=True, slow_seconds=8)
    polled = a2a_remote_agent.start(token="sdk-" + secrets.token_hex(8), streaming=False, slow_seconds=8)
    yield streaming, polled
    streaming.stop()
    polled.stop()


@pytest.fixture(scope="module")
def sdk_key(local, sdk_agents):
    key = local.new_key("sdk")
    for agent in sdk_agents:
        stored = local.api("POST", "/v1/a2a/credentials", key, json={"agent": agent.card_url, "token": agent.token})
        assert stored.status_code == 201, stored.text
    return key


@pytest.mark.parametrize("mode", ["streaming", "polled"])
def test_sdk_agent_completion_failure_rejection_and_direct_answer(local, sdk_key, sdk_agents, mode):
    agent = sdk_agents[0] if mode == "streaming" else sdk_agents[1]
    model = "a2a:" + agent.card_url
    runs = {word: start(local, sdk_key, f"{word} something", model)["id"]
            for word in ("complete", "fail", "reject", "direct")}
    done = {word: wait_for(local, sdk_key, run_id, TERMINAL) for word, run_id in runs.items()}
    assert done["complete"]["status"] == "completed" and done["complete"]["answer"] == "all done", done
    assert done["fail"]["status"] == "failed" and "disk full" in done["fail"]["reason"], done
    assert done["reject"]["status"] == "failed" and "not my kind of task" in done["reject"]["reason"], done
    assert done["direct"]["status"] == "completed" and done["direct"]["answer"] == "direct answer", done
    kept = local.api("GET", f"/v1/runs/{runs['complete']}/artifacts/remote/result.txt", sdk_key)
    assert kept.status_code == 200 and kept.content == b"the result", kept.text
    for word in runs:
        assert agent.submissions[word] == 1, (word, agent.submissions)


@pytest.mark.parametrize("mode", ["streaming", "polled"])
def test_sdk_agent_input_and_auth_continuations(local, sdk_key, sdk_agents, mode):
    agent = sdk_agents[0] if mode == "streaming" else sdk_agents[1]
    ask = start(local, sdk_key, "ask me", "a2a:" + agent.card_url)
    auth = start(local, sdk_key, "auth please", "a2a:" + agent.card_url)
    assert wait_for(local, sdk_key, ask["id"], {"waiting_for_input"} | TERMINAL)["status"] == "waiting_for_input"
    waiting = wait_for(local, sdk_key, auth["id"], {"auth_required"} | TERMINAL)
    assert waiting["status"] == "auth_required" and "example.test/login" in waiting["reason"], waiting
    assert local.api("POST", f"/v1/runs/{ask['id']}/input", sdk_key, json={"text": "green"}).status_code == 200
    assert local.api("POST", f"/v1/runs/{auth['id']}/input", sdk_key, json={"text": "done"}).status_code == 200
    asked = wait_for(local, sdk_key, ask["id"], TERMINAL)
    assert asked["status"] == "completed" and asked["answer"] == "got green", asked
    assert wait_for(local, sdk_key, auth["id"], TERMINAL)["status"] == "completed"


def test_sdk_agent_refuses_a_cancel_and_the_run_goes_on(local, sdk_key, sdk_agents):
    agent = sdk_agents[0]
    run = start(local, sdk_key, "nocancel this", "a2a:" + agent.card_url)
    wait_for(local, sdk_key, run["id"], {"running"})
    refused = local.api("POST", f"/v1/runs/{run['id']}/cancel", sdk_key)
    assert refused.status_code == 409 and "refused the cancel" in refused.text, refused.text
    assert local.api("GET", f"/v1/runs/{run['id']}", sdk_key).json()["status"] == "running"
    done = wait_for(local, sdk_key, run["id"], TERMINAL)
    assert done["status"] == "completed", done
    statuses = [e["status"] for e in of_type([data(e) for e in events(local, sdk_key, run["id"])], "run.status")]
    assert "canceling" in statuses and statuses.index("canceling") < len(statuses) - 2, statuses


def test_sdk_agent_cancel_confirmed(local, sdk_key, sdk_agents):
    run = start(local, sdk_key, "slow one", "a2a:" + sdk_agents[1].card_url)
    wait_for(local, sdk_key, run["id"], {"running"})
    assert local.api("POST", f"/v1/runs/{run['id']}/cancel", sdk_key).status_code == 200
    assert wait_for(local, sdk_key, run["id"], TERMINAL)["status"] == "canceled"


def test_sdk_agent_dropped_stream_is_followed_by_asking(local, sdk_key, sdk_agents):
    agent = sdk_agents[0]
    run = start(local, sdk_key, "drop it", "a2a:" + agent.card_url)
    done = wait_for(local, sdk_key, run["id"], TERMINAL)
    assert done["status"] == "completed", (done, events(local, sdk_key, run["id"]))
    assert agent.submissions["drop"] == 1


def test_sdk_agent_files_inline_and_by_url_with_its_bearer(local, sdk_key, sdk_agents):
    run = start(local, sdk_key, "file them", "a2a:" + sdk_agents[0].card_url)
    assert wait_for(local, sdk_key, run["id"], TERMINAL)["status"] == "completed"
    inline = local.api("GET", f"/v1/runs/{run['id']}/artifacts/remote/inline.txt", sdk_key)
    report = local.api("GET", f"/v1/runs/{run['id']}/artifacts/remote/report.txt", sdk_key)
    assert inline.content == b"inline bytes", inline.text
    assert report.content == b"report body", report.text


def test_sdk_agent_restart_forgets_the_task_and_the_run_fails_without_resending(local, sdk_key, sdk_agents):
    agent = sdk_agents[1]
    run = start(local, sdk_key, "slow again", "a2a:" + agent.card_url)
    wait_for(local, sdk_key, run["id"], {"running"})
    before = agent.submissions["slow"]
    agent.restart()
    done = wait_for(local, sdk_key, run["id"], TERMINAL)
    assert done["status"] == "failed" and "no longer knows task" in done["reason"], done
    assert agent.submissions["slow"] == before, "never sent again"
