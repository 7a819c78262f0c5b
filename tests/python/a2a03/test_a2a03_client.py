"""The orchestrator as an A2A agent, driven by the official `a2a-sdk` client of the 0.3 line
(no `A2A-Version` header, `kind`-tagged objects, lowercase states): the card, a blocking send, a
stream, get with history, a conversation continued by its task id, cancel, and an unknown task.
The tasks use the conformance executor (no sandbox)."""

import asyncio
import contextlib
import pathlib
import secrets
import sys
import uuid

import httpx
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from orchestrator_process import OrchestratorProcess  # noqa: E402

from a2a.client import ClientConfig, ClientFactory  # noqa: E402
from a2a.client.errors import A2AClientJSONRPCError  # noqa: E402
from a2a.types import (  # noqa: E402
    Message,
    Part,
    Role,
    TaskIdParams,
    TaskQueryParams,
    TaskState,
    TextPart,
)

ADMIN_KEY = "py-a2a03-admin-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def server():
    process = OrchestratorProcess(ADMIN_KEY, "pya2a03-", ["--a2a-conformance", "--a2a-model", "conformance"])
    yield process
    process.close()


@contextlib.asynccontextmanager
async def client_for(server, streaming):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=120)
    try:
        yield await ClientFactory.connect(server.url, ClientConfig(streaming=streaming, httpx_client=http))
    finally:
        await http.aclose()


def message(prefix, text="hello", task_id=None):
    return Message(role=Role.user, parts=[Part(root=TextPart(text=text))],
                   message_id=f"{prefix}-{uuid.uuid4()}", task_id=task_id)


async def events_of(client, msg):
    return [event async for event in client.send_message(msg)]


def test_a_blocking_send_completes_and_get_limits_the_history(server):
    async def scenario():
        async with client_for(server, streaming=False) as client:
            [(task, update)] = await events_of(client, message("tck-complete-task"))
            assert update is None
            assert task.status.state == TaskState.completed
            assert task.status.message.parts[0].root.text == "Hello from TCK"
            got = await client.get_task(TaskQueryParams(id=task.id, history_length=1))
            assert got.id == task.id and len(got.history) == 1
            [reply] = await events_of(client, message("tck-message-response"))
            assert isinstance(reply, Message) and reply.role == Role.agent
    asyncio.run(scenario())


def test_a_stream_ends_with_a_final_completed_status(server):
    async def scenario():
        async with client_for(server, streaming=True) as client:
            events = await events_of(client, message("tck-stream-003"))
            # The stream opens with the task as it is by then: the executor may have finished.
            task = events[-1][0]
            assert task.status.state == TaskState.completed
            assert task.artifacts[0].parts[0].root.text == "Stream task lifecycle"
            updates = [u for _, u in events if u is not None]
            if updates:
                kinds = [u.kind for u in updates]
                last = updates[-1]
                assert last.kind == "status-update" and last.final, kinds
                assert last.status.state == TaskState.completed
                assert kinds.count("status-update") >= 1
    asyncio.run(scenario())


def test_a_conversation_continues_by_task_id_and_is_canceled(server):
    async def scenario():
        async with client_for(server, streaming=False) as client:
            [(task, _)] = await events_of(client, message("plain"))
            assert task.status.state == TaskState.input_required
            [(again, _)] = await events_of(client, message("reply", text="more", task_id=task.id))
            assert again.id == task.id and again.context_id == task.context_id
            assert again.status.state == TaskState.input_required
            assert [m.parts[0].root.text for m in again.history if m.role == Role.user] == ["hello", "more"]
            canceled = await client.cancel_task(TaskIdParams(id=task.id))
            assert canceled.status.state == TaskState.canceled
            with pytest.raises(A2AClientJSONRPCError) as refused:
                await client.cancel_task(TaskIdParams(id=task.id))
            assert refused.value.error.code == -32002
            with pytest.raises(A2AClientJSONRPCError) as unknown:
                await client.get_task(TaskQueryParams(id="run_unknown"))
            assert unknown.value.error.code == -32001
    asyncio.run(scenario())
