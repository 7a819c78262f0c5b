"""A scripted remote A2A agent for the tests that point the orchestrator's A2A *client* at
someone else's agent: a real A2A 1.0 JSON-RPC server built on the official `a2a-sdk` (1.x line:
`DefaultRequestHandler`, `InMemoryTaskStore`, the SDK's Starlette routes), run by uvicorn in a
background thread on 127.0.0.1.

What it does is chosen by the first word of the message's text:

    direct    a Message, no task: "direct answer"
    complete  working, ~0.3 s later completed ("all done") with a text artifact "result.txt"
    fail      working, ~0.3 s later failed ("remote failure: disk full")
    reject    rejected ("not my kind of task")
    ask       input-required ("Which colour?"); a follow-up with text X -> completed "got X"
    auth      auth-required ("Sign in at https://example.test/login"); a follow-up -> completed
              "authorized"
    nocancel  working for `slow_seconds` (20 s) then completed; CancelTask is refused with the
              SDK's TaskNotCancelableError (-32002) and the task goes on
    slow      working for `slow_seconds` (20 s) then completed; CancelTask -> canceled
    drop      working, then (on SendStreamingMessage) the HTTP stream is cut without a terminal
              event; the task goes on and completes ~1 s later (GetTask shows it)
    file      completed with two artifacts: inline bytes ("inline.txt", b"inline bytes") and a URL
              to `<base>/files/report.txt` on this server (b"report body", bearer required)
    other     a direct Message "unscripted: <text>"

Every route but the card (`/.well-known/agent-card.json`) wants `Authorization: Bearer <token>`
and answers 401 with `WWW-Authenticate: Bearer` otherwise. The JSON-RPC endpoint is
`<base>/a2a`; the SDK wants `A2A-Version: 1.0` on it (a missing header counts as 0.3, which this
server does not accept).

The task store is in memory and belongs to one run of the server: `restart()` (or `stop()` and a
new `start()` on the same port) forgets every task, on purpose (a remote agent that lost its
state). The counters live on the `RemoteAgent` and survive a restart.

Run alone: `python a2a_remote_agent.py --port 8123 --token t [--no-streaming]`."""

import argparse
import asyncio
import collections
import datetime
import hmac
import json
import logging
import secrets
import signal
import socket
import sys
import threading
import time
import uuid

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from a2a.helpers import get_message_text
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import TaskNotCancelableError

RPC_PATH = "/a2a"
REPORT_PATH = "/files/report.txt"
REPORT_BODY = b"report body"
INLINE_BYTES = b"inline bytes"
WORDS = ("direct", "complete", "fail", "reject", "ask", "auth", "nocancel", "slow", "drop", "file")


def first_word(text):
    words = text.split()
    return words[0].lower() if words else ""


class RemoteAgent:
    """A running scripted agent: `url` (base), `card_url`, `rpc_url`, `token`, `stop()`,
    `restart()`; counters `submissions` (first word -> SendMessage/SendStreamingMessage calls
    that started work: a new task or a direct answer, not follow-ups), `followups` (a list of
    (first word of the task, follow-up text)) and `cancels` (first word of the task, or "unknown"
    for a task this run does not know -> CancelTask calls, refused ones included)."""

    def __init__(self, port, token, streaming, slow_seconds):
        self.port = port
        self.token = token
        self.streaming = streaming
        self.slow_seconds = slow_seconds
        self.submissions = collections.Counter()
        self.cancels = collections.Counter()
        self.followups = []
        self._lock = threading.Lock()
        self._server = None
        self._thread = None
        self._loop = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def card_url(self):
        return self.url + AGENT_CARD_WELL_KNOWN_PATH

    @property
    def rpc_url(self):
        return self.url + RPC_PATH

    @property
    def report_url(self):
        return self.url + REPORT_PATH

    def count(self, counter, word):
        with self._lock:
            counter[word] += 1

    def add_followup(self, word, text):
        with self._lock:
            self.followups.append((word, text))

    def _start(self):
        """Binds the port (0: any free one, then kept for restarts) and serves until `stop()`."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(_build_app(self), log_level="warning", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=1)
        server = uvicorn.Server(config)
        loop = []

        async def serve():
            loop.append(asyncio.get_running_loop())
            await server.serve(sockets=[sock])

        thread = threading.Thread(target=asyncio.run, args=(serve(),),
                                  name=f"a2a-remote-agent:{self.port}", daemon=True)
        thread.start()
        deadline = time.monotonic() + 15
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                sock.close()
                raise RuntimeError(f"the A2A remote agent did not start on port {self.port}")
            time.sleep(0.02)
        self._server, self._thread, self._loop = server, thread, loop[0]
        return self

    def stop(self):
        """Stops serving as a crash would: open connections (streams too) are cut at once, and
        every task is forgotten."""
        server, thread, loop = self._server, self._thread, self._loop
        self._server = self._thread = self._loop = None
        if server is None:
            return

        def cut():
            for connection in list(server.server_state.connections):
                connection.transport.abort()
            server.should_exit = True

        loop.call_soon_threadsafe(cut)
        thread.join(15)

    def restart(self):
        """Stops and serves again on the same port with an empty task store."""
        self.stop()
        return self._start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start(port: int = 0, token: str | None = None, streaming: bool = True,
          slow_seconds: float = 20.0) -> RemoteAgent:
    """Serves the scripted agent on 127.0.0.1:`port` (0: a free port) in a background thread.
    `token` defaults to a random one (read it back from `.token`)."""
    return RemoteAgent(port, token or "remote-" + secrets.token_hex(16), streaming,
                       slow_seconds)._start()


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


class _ScriptedExecutor(AgentExecutor):
    def __init__(self, agent):
        self.agent = agent
        self.words = {}  # task id -> the first word of the message that made it (this run only)

    async def execute(self, context: RequestContext, event_queue) -> None:
        text = get_message_text(context.message) if context.message else ""
        task = context.current_task
        if task is not None:
            await self._follow_up(task, text, event_queue)
            return
        word = first_word(text)
        self.agent.count(self.agent.submissions, word)
        if word not in WORDS or word == "direct":
            answer = "direct answer" if word == "direct" else f"unscripted: {text}"
            await event_queue.enqueue_event(Message(
                message_id=str(uuid.uuid4()), context_id=context.context_id,
                role=Role.ROLE_AGENT, parts=[Part(text=answer)]))
            return
        self.words[context.task_id] = word
        submitted = Task(id=context.task_id, context_id=context.context_id,
                         status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                         history=[context.message])
        submitted.status.timestamp.FromDatetime(_now())
        await event_queue.enqueue_event(submitted)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)

        def say(line):
            return updater.new_agent_message([Part(text=line)])

        if word == "reject":
            await updater.reject(say("not my kind of task"))
        elif word == "ask":
            await updater.requires_input(say("Which colour?"))
        elif word == "auth":
            await updater.requires_auth(say("Sign in at https://example.test/login"))
        else:
            await updater.start_work()
            if word == "complete":
                await asyncio.sleep(0.3)
                await updater.add_artifact([Part(text="the result")], name="result.txt")
                await updater.complete(say("all done"))
            elif word == "fail":
                await asyncio.sleep(0.3)
                await updater.failed(say("remote failure: disk full"))
            elif word in ("nocancel", "slow"):
                await asyncio.sleep(self.agent.slow_seconds)
                await updater.complete(say("finally done"))
            elif word == "drop":
                await asyncio.sleep(1.0)
                await updater.add_artifact([Part(text="the result")], name="result.txt")
                await updater.complete(say("all done"))
            elif word == "file":
                await updater.add_artifact(
                    [Part(raw=INLINE_BYTES, media_type="text/plain", filename="inline.txt")],
                    name="inline.txt")
                await updater.add_artifact(
                    [Part(url=self.agent.report_url, media_type="text/plain",
                          filename="report.txt")],
                    name="report.txt")
                await updater.complete(say("files attached"))

    async def _follow_up(self, task, text, event_queue):
        word = self.words.get(task.id, "unknown")
        self.agent.add_followup(word, text)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if word == "ask" and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.start_work()
            await updater.complete(updater.new_agent_message([Part(text=f"got {text}")]))
        elif word == "auth" and task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED:
            await updater.start_work()
            await updater.complete(updater.new_agent_message([Part(text="authorized")]))
        # Anything else sent to a task: noted, and nothing changes.

    async def cancel(self, context: RequestContext, event_queue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(updater.new_agent_message([Part(text="canceled on request")]))


class _Handler(DefaultRequestHandler):
    """The SDK's handler, but CancelTask on a `nocancel` task is refused before it reaches the
    executor: an exception raised from `AgentExecutor.cancel` makes the SDK mark the task
    FAILED (and cancel its producer), and this task must go on working."""

    def __init__(self, executor, **kwargs):
        super().__init__(agent_executor=executor, **kwargs)
        self._executor = executor

    async def on_cancel_task(self, params, context):
        word = self._executor.words.get(params.id, "unknown")
        self._executor.agent.count(self._executor.agent.cancels, word)
        if word == "nocancel":
            stored = await self.task_store.get(params.id, context)
            if stored is not None:
                raise TaskNotCancelableError(message="this task cannot be canceled")
        return await super().on_cancel_task(params, context)


def _card(agent):
    return AgentCard(
        name="Scripted remote agent",
        description="A test double for a remote A2A agent: what it does is chosen by the first "
                    "word of the message (" + ", ".join(WORDS) + ").",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=agent.rpc_url, protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=agent.streaming, push_notifications=False),
        security_schemes={"bearer": SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))},
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList()})],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="scripted", name="Scripted answers",
                           description="Answers by script, chosen by the message's first word.",
                           tags=["test"], examples=[f"{w} please" for w in WORDS])],
    )


class _BearerAuth:
    """Every path but the card wants the bearer token: 401 with a challenge otherwise."""

    def __init__(self, app, token, open_paths):
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.open_paths = open_paths

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] not in self.open_paths:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = JSONResponse({"error": "a bearer token is required"}, status_code=401,
                                        headers={"WWW-Authenticate": 'Bearer realm="a2a"'})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _CutStream(Exception):
    """Raised to make uvicorn close the connection in the middle of a response."""


class _DropStreams:
    """Cuts a SendStreamingMessage whose text starts with `drop` right after its first event
    that carries TASK_STATE_WORKING: the connection is closed with the chunked body unfinished
    (no terminal event, no end of stream), while the task goes on in the background."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != RPC_PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if not self._to_drop(body):
            await self.app(scope, replay, send)
            return

        async def cutting_send(message):
            await send(message)
            if message["type"] == "http.response.body" and b"TASK_STATE_WORKING" in \
                    message.get("body", b""):
                raise _CutStream()

        try:
            await self.app(scope, replay, cutting_send)
        except BaseException as error:  # the SDK's task groups may wrap it
            if _holds(error, _CutStream):
                raise _CutStream() from None
            raise

    @staticmethod
    def _to_drop(body):
        try:
            request = json.loads(body)
            if request.get("method") != "SendStreamingMessage":
                return False
            message = request["params"]["message"]
            if message.get("taskId"):
                return False
            text = " ".join(p.get("text", "") for p in message.get("parts", []) if "text" in p)
            return first_word(text) == "drop"
        except (ValueError, KeyError, TypeError, AttributeError):
            return False


def _holds(error, kind):
    if isinstance(error, kind):
        return True
    return any(_holds(inner, kind) for inner in getattr(error, "exceptions", ()))


class _QuietCut(logging.Filter):
    """Keeps uvicorn's "Exception in ASGI application" for a deliberate cut out of the log."""

    def filter(self, record):
        return not (record.exc_info and _holds(record.exc_info[1], _CutStream))


logging.getLogger("uvicorn.error").addFilter(_QuietCut())


def _build_app(agent):
    executor = _ScriptedExecutor(agent)
    card = _card(agent)
    handler = _Handler(executor, task_store=InMemoryTaskStore(), agent_card=card)

    async def report(request):
        return Response(REPORT_BODY, media_type="text/plain")

    app = Starlette(routes=[
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url=RPC_PATH),
        Route(REPORT_PATH, report, methods=["GET"]),
    ])
    return _BearerAuth(_DropStreams(app), agent.token, {AGENT_CARD_WELL_KNOWN_PATH})


def main():
    parser = argparse.ArgumentParser(description="A scripted A2A 1.0 remote agent.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None)
    parser.add_argument("--no-streaming", action="store_true")
    parser.add_argument("--slow-seconds", type=float, default=20.0)
    args = parser.parse_args()
    agent = start(args.port, args.token, streaming=not args.no_streaming,
                  slow_seconds=args.slow_seconds)
    print(f"A2A remote agent at {agent.url} (card {agent.card_url}, token {agent.token})",
          flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        agent.stop()


if __name__ == "__main__":
    main()
