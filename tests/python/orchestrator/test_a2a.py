"""The orchestrator as an A2A agent, driven by the official `a2a-sdk` 1.x client (and, for the
envelope's error codes, by raw JSON-RPC): the card, blocking and non-blocking sends, streams,
get with history, list with paging, cancel, a direct message, an input-required round trip
through a real run (a `script:` model asking a person, in a real sandbox), artifacts, another
key's tasks, and bad input on every method.

Tasks other than the real run use the conformance executor (`--a2a-conformance`, model
`conformance`): deterministic answers chosen by the message id's prefix, no sandbox."""

import asyncio
import contextlib
import json
import pathlib
import secrets
import sys
import tempfile
import uuid

import httpx
import pytest
import requests

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from orchestrator_process import OrchestratorProcess  # noqa: E402

from a2a.client import ClientConfig, create_client  # noqa: E402
from a2a.types import (  # noqa: E402
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import A2AError  # noqa: E402

ADMIN_KEY = "py-a2a-admin-" + secrets.token_hex(16)


class A2aOrchestrator(OrchestratorProcess):
    def __init__(self):
        self.scripts = tempfile.TemporaryDirectory()
        pathlib.Path(self.scripts.name, "ask.json").write_text(json.dumps([
            {"action": "REQUEST_HUMAN", "question": "Which colour should the triangle be?"},
            {"action": "FINAL", "answer": "Asked and was answered."},
        ]))
        super().__init__(ADMIN_KEY, "pya2a-", [
            "--scripts-dir", self.scripts.name, "--a2a-conformance", "--a2a-model", "conformance"])

    def close(self):
        super().close()
        self.scripts.cleanup()


@pytest.fixture(scope="module")
def server():
    process = A2aOrchestrator()
    yield process
    process.close()


@pytest.fixture(scope="module")
def key(server):
    """A key of its own (not the admin's): tasks are scoped to the key that made them."""
    answer = requests.post(server.url + "/v1/keys", json={"name": "a2a-" + secrets.token_hex(3)},
                           headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30)
    assert answer.status_code == 201, answer.text
    return answer.json()["key"]


def run(coroutine):
    return asyncio.run(coroutine)


@contextlib.asynccontextmanager
async def client_for(server, key, streaming=False):
    """The SDK's client, from the card at the server's origin, sending `key` as its bearer."""
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120)
    try:
        yield await create_client(server.url, ClientConfig(streaming=streaming, httpx_client=http))
    finally:
        await http.aclose()


def message(message_id_prefix, text="hello", task_id=None, context_id=None, model=None):
    msg = Message(message_id=f"{message_id_prefix}-{uuid.uuid4()}", role=Role.ROLE_USER,
                  parts=[Part(text=text)])
    if task_id:
        msg.task_id = task_id
    if context_id:
        msg.context_id = context_id
    if model:
        msg.metadata.update({"model": model})
    return msg


async def send(client, msg, return_immediately=False, history_length=None):
    configuration = SendMessageConfiguration(return_immediately=return_immediately)
    if history_length is not None:
        configuration.history_length = history_length
    events = []
    async for event in client.send_message(SendMessageRequest(message=msg, configuration=configuration)):
        events.append(event)
    return events


def rpc(server, key, method, params, version="1.0", **kwargs):
    headers = {"Authorization": f"Bearer {key}"}
    if version:
        headers["A2A-Version"] = version
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return requests.post(server.url + "/a2a", json=body, headers=headers, timeout=60, **kwargs)


def test_the_card_is_open_cacheable_and_names_the_endpoint(server):
    answer = requests.get(server.url + "/.well-known/agent-card.json", timeout=30)
    assert answer.status_code == 200
    card = answer.json()
    assert card["supportedInterfaces"][0]["url"] == server.url + "/a2a"
    assert card["url"] == server.url + "/a2a" and card["protocolVersion"] == "0.3.0"
    assert {s["id"] for s in card["skills"]} >= {"desktop-task", "browser-task"}
    assert "bearer" in card["securitySchemes"]
    assert ADMIN_KEY not in answer.text
    assert "max-age" in answer.headers["Cache-Control"] and answer.headers["Last-Modified"]
    again = requests.get(server.url + "/.well-known/agent-card.json",
                         headers={"If-None-Match": answer.headers["ETag"]}, timeout=30)
    assert again.status_code == 304


def test_without_a_key_the_endpoint_answers_401_with_a_challenge(server):
    for headers in ({}, {"Authorization": "Bearer not-a-key"}):
        answer = requests.post(server.url + "/a2a", json={"jsonrpc": "2.0", "id": 1,
                               "method": "GetTask", "params": {"id": "x"}},
                               headers={"A2A-Version": "1.0", **headers}, timeout=30)
        assert answer.status_code == 401, answer.text
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")


def test_blocking_and_non_blocking_sends_a_direct_message_and_history(server, key):
    async def scenario():
        async with client_for(server, key) as client:
            [event] = await send(client, message("tck-complete-task"))
            task = event.task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert task.status.message.parts[0].text == "Hello from TCK"
            assert task.context_id
            # History: the client's message first, with its own id.
            got = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
            assert len(got.history) == 1
            full = await client.get_task(GetTaskRequest(id=task.id))
            assert full.history[0].role == Role.ROLE_USER
            assert full.history[0].parts[0].text == "hello"

            [event] = await send(client, message("test-resubscribe-message-id"), return_immediately=True)
            assert event.task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
            for _ in range(100):
                polled = await client.get_task(GetTaskRequest(id=event.task.id))
                if polled.status.state == TaskState.TASK_STATE_COMPLETED:
                    break
                await asyncio.sleep(0.1)
            assert polled.status.state == TaskState.TASK_STATE_COMPLETED

            [event] = await send(client, message("tck-message-response"))
            assert event.HasField("message")
            assert event.message.parts[0].text == "Direct message response"
            assert event.message.role == Role.ROLE_AGENT
    run(scenario())


def test_a_stream_carries_the_task_then_its_updates_in_order(server, key):
    async def scenario():
        async with client_for(server, key, streaming=True) as client:
            # A conversation: the task is still going when the stream opens, so its updates
            # come on the stream (a task that already ended is sent as it is, alone).
            events = await send(client, message("converse"))
            kinds = [e.WhichOneof("payload") for e in events]
            assert kinds[0] == "task", kinds
            task_id = events[0].task.id
            last = events[-1]
            state = (last.status_update.status.state if last.HasField("status_update")
                     else last.task.status.state)
            assert state == TaskState.TASK_STATE_INPUT_REQUIRED, kinds
            # The answer's stream: the task first, and it ends when the task asks again.
            events = await send(client, message("answer", text="go on", task_id=task_id))
            assert events[0].HasField("task")
            last = events[-1]
            state = (last.status_update.status.state if last.HasField("status_update")
                     else last.task.status.state)
            assert state == TaskState.TASK_STATE_INPUT_REQUIRED
            got = await client.get_task(GetTaskRequest(id=task_id))
            assert [m.parts[0].text for m in got.history if m.role == Role.ROLE_USER] == ["hello", "go on"]
            # A task that streams artifacts ends completed, its artifact on the stream or in it.
            events = await send(client, message("tck-stream-001"))
            final_task = next(e.task for e in events if e.HasField("task"))
            streamed = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
            artifacts = streamed or list(final_task.artifacts)
            assert artifacts[0].parts[0].text == "Stream hello from TCK"
            last = events[-1]
            if last.HasField("status_update"):
                assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED
            else:
                assert last.task.status.state == TaskState.TASK_STATE_COMPLETED
            await client.cancel_task(CancelTaskRequest(id=task_id))
    run(scenario())


def test_artifacts_of_each_kind_and_their_download_needs_the_key(server, key):
    async def scenario():
        async with client_for(server, key) as client:
            by_kind = {}
            for prefix in ("tck-artifact-text", "tck-artifact-file-url", "tck-artifact-file", "tck-artifact-data"):
                [event] = await send(client, message(prefix))
                assert event.task.status.state == TaskState.TASK_STATE_COMPLETED, prefix
                [artifact] = event.task.artifacts
                by_kind[prefix] = (event.task, artifact.parts[0])
            assert by_kind["tck-artifact-text"][1].text == "Generated text content"
            assert by_kind["tck-artifact-file-url"][1].url == "https://example.com/output.txt"
            file_task, file_part = by_kind["tck-artifact-file"]
            assert file_part.raw == b"tck" and file_part.filename == "output.txt"
            assert file_part.media_type == "text/plain"
            data = by_kind["tck-artifact-data"][1].data
            assert data.struct_value.fields["key"].string_value == "value"
            return file_task
    task = run(scenario())
    url = f"{server.url}/v1/runs/{task.id}/artifacts/outputs/output.txt"
    assert requests.get(url, timeout=30).status_code == 401
    answer = requests.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert answer.status_code == 200 and answer.content == b"tck"


def test_list_pages_through_the_callers_tasks_only(server, key):
    async def scenario():
        async with client_for(server, key) as client:
            context = f"ctx-{uuid.uuid4()}"
            made = []
            for _ in range(3):
                [event] = await send(client, message("tck-complete-task", context_id=context))
                assert event.task.context_id == context
                made.append(event.task.id)
            first = await client.list_tasks(ListTasksRequest(context_id=context, page_size=2))
            assert len(first.tasks) == 2 and first.next_page_token
            assert first.total_size == 3
            second = await client.list_tasks(ListTasksRequest(
                context_id=context, page_size=2, page_token=first.next_page_token))
            assert len(second.tasks) == 1 and second.next_page_token == ""
            listed = [t.id for t in first.tasks] + [t.id for t in second.tasks]
            assert sorted(listed) == sorted(made)
            # Newest change first.
            assert listed[0] == made[-1]
            return made[0]
    task_id = run(scenario())

    # Another key (even the admin's) sees none of them.
    async def other():
        async with client_for(server, ADMIN_KEY) as client:
            with pytest.raises(A2AError) as refused:
                await client.get_task(GetTaskRequest(id=task_id))
            assert "TaskNotFound" in type(refused.value).__name__ or "not found" in str(refused.value).lower()
    run(other())


def test_cancel_a_working_task_and_a_finished_one_is_not_cancelable(server, key):
    async def scenario():
        async with client_for(server, key) as client:
            [event] = await send(client, message("test-resubscribe-message-id"), return_immediately=True)
            canceled = await client.cancel_task(CancelTaskRequest(id=event.task.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            with pytest.raises(A2AError) as refused:
                await client.cancel_task(CancelTaskRequest(id=event.task.id))
            assert "NotCancelable" in type(refused.value).__name__
    run(scenario())


def test_a_real_run_asks_a_person_and_the_answer_comes_by_the_task_id(server, key):
    async def scenario():
        async with client_for(server, key) as client:
            msg = message("ask", text="Draw a triangle", model="script:ask.json")
            # A file sent inline goes to the sandbox's ~/inputs before the agent starts.
            msg.parts.append(Part(raw=b"red, green", media_type="text/plain", filename="colours.txt"))
            [event] = await send(client, msg)
            task = event.task
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task.status
            assert task.status.message.parts[0].text == "Which colour should the triangle be?"
            meta = task.metadata["https://agentbox.dev/a2a/computer-session/v1"]
            assert meta["computerSessionId"].startswith("sbx")
            read = requests.post(f"{server.url}/v1/sandboxes/{meta['computerSessionId']}/api/v1/shell/exec",
                                 json={"command": "cat ~/inputs/colours.txt"},
                                 headers={"Authorization": f"Bearer {key}"}, timeout=60)
            assert read.status_code == 200 and read.json()["data"]["output"].strip() == "red, green", read.text
            # The client's own file is not one of the task's artifacts.
            assert not any(a.artifact_id.startswith("inputs/") for a in task.artifacts)
            # The watch link: the run's share page, watch-only, without the key; the same link
            # on every read of the task.
            watch = meta["watchUrl"]
            assert "/share/runs/" + task.id in watch
            page = requests.get(watch, timeout=30, allow_redirects=True)
            assert page.status_code == 200, page.text
            again = await client.get_task(GetTaskRequest(id=task.id))
            assert again.metadata["https://agentbox.dev/a2a/computer-session/v1"]["watchUrl"] == watch
            [event] = await send(client, message("answer", text="Red", task_id=task.id))
            done = event.task
            assert done.id == task.id and done.context_id == task.context_id
            assert done.status.state == TaskState.TASK_STATE_COMPLETED, done.status
            texts = [(m.role, m.parts[0].text) for m in done.history]
            assert (Role.ROLE_USER, "Red") in texts
            # A finished task takes no more messages.
            with pytest.raises(A2AError):
                await send(client, message("late", text="more", task_id=task.id))
    run(scenario())


def test_json_rpc_errors_have_their_codes_and_change_nothing(server, key):
    def code(answer):
        assert answer.status_code == 200, answer.text
        return answer.json()["error"]["code"]

    headers = {"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}
    raw = requests.post(server.url + "/a2a", data="{not json", headers={**headers, "Content-Type": "application/json"}, timeout=30)
    assert code(raw) == -32700
    wrong = requests.post(server.url + "/a2a", json={"jsonrpc": "1.0", "id": 1, "method": "GetTask"}, headers=headers, timeout=30)
    assert code(wrong) == -32600
    assert code(rpc(server, key, "NoSuchMethod", {})) == -32601
    assert code(rpc(server, key, "SendMessage", {"message": {"role": "ROLE_USER", "parts": []}})) == -32602
    assert code(rpc(server, key, "GetTask", {"id": "run_does_not_exist"})) == -32001
    assert code(rpc(server, key, "GetTask", {"id": "x"}, version="99.0")) == -32009
    error = rpc(server, key, "GetTask", {"id": "run_does_not_exist"}).json()["error"]
    assert error["data"][0]["reason"] == "TASK_NOT_FOUND"
    text = requests.post(server.url + "/a2a", data="hi", headers={**headers, "Content-Type": "text/plain"}, timeout=30)
    assert code(text) == -32005
    assert code(rpc(server, key, "CreateTaskPushNotificationConfig", {})) == -32003
    # A 0.3 request (no header) with 1.0's method name is unknown to 0.3.
    assert code(rpc(server, key, "GetTask", {"id": "x"}, version=None)) == -32601
    # A 0.3 get of an unknown task.
    assert code(rpc(server, key, "tasks/get", {"id": "run_does_not_exist"}, version=None)) == -32001
    # Nothing was made by any of them.
    listed = rpc(server, key, "ListTasks", {"contextId": "never-used"}).json()["result"]
    assert listed["tasks"] == []


def test_a_0_3_client_speaks_the_same_tasks(server, key):
    """0.3's wire form on the same endpoint: `kind` tags, lowercase states, `final` flags."""
    msg = {"kind": "message", "messageId": f"tck-stream-001-{uuid.uuid4()}", "role": "user",
           "parts": [{"kind": "text", "text": "hello"}]}
    sent = rpc(server, key, "message/send", {"message": msg}, version=None).json()["result"]
    assert sent["kind"] == "task" and sent["status"]["state"] == "completed"
    got = rpc(server, key, "tasks/get", {"id": sent["id"], "historyLength": 1}, version=None).json()["result"]
    assert got["id"] == sent["id"] and len(got["history"]) == 1
    msg["messageId"] = f"tck-stream-003-{uuid.uuid4()}"
    answer = rpc(server, key, "message/stream", {"message": msg}, version=None, stream=True)
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    events = [json.loads(line[5:]) for line in answer.iter_lines(decode_unicode=True) if line.startswith("data:")]
    kinds = [e["result"]["kind"] for e in events]
    assert kinds[0] == "task", kinds
    last = events[-1]["result"]
    if last["kind"] == "status-update":
        # The stream caught the task working: its artifact came as an update, before the end.
        assert last["final"] is True and last["status"]["state"] == "completed"
        assert "artifact-update" in kinds
    else:
        # The task had ended by the time the stream opened: it is sent as it is, alone.
        assert kinds == ["task"] and last["status"]["state"] == "completed"
        assert last["artifacts"][0]["parts"][0]["text"] == "Stream task lifecycle"
    assert all(e["id"] == 1 for e in events)
