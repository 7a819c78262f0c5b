"""Every method of AIO Sandbox's own Python SDK (``agent-sandbox`` 0.0.30, 131 methods) through
the orchestrator: the SDK given the sandbox's ``urls.api`` and the orchestrator's key, as a
client of the orchestrator uses it. The cases are the direct sweep's
(``tests/python/aio_sweep.py``); their effects are checked in the sandbox's container with
``docker exec``.

The sweep has an orchestrator and a sandbox of its own (it restarts the browser, changes its
configuration and registers a shutdown hook). Its pages are served inside the sandbox on
loopback, which the sandbox's browser opens only with ``SANDBOXD_BROWSER_ALLOW_PRIVATE=true``;
the orchestrator reserves ``SANDBOX*`` variables, so the sandbox runs an image made for the
run (the real image plus that variable, nothing else), allowed with ``--allow-image``.
"""

import os
import pathlib
import secrets
import subprocess
import sys

import pytest
import requests

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import aio_sweep  # noqa: E402
from orchestrator_process import OrchestratorProcess, docker  # noqa: E402

# Methods that cannot pass through the orchestrator, each with the orchestrator defect that
# stops it (see the case in aio_sweep.py); a method listed here that passes fails the run.
KNOWN_DEFECTS: dict[str, str] = {}

# Methods the orchestrator refuses by design (501, naming the way that works): the terminal
# page is sandboxd's own page, whose script would run on the orchestrator's origin.
ORCHESTRATOR_REFUSALS = {
    "shell.get_terminal_url": (lambda c: c.shell.get_terminal_url(), "/v1/shell/exec"),
}


@pytest.fixture(scope="module")
def box(admin_key):
    base = os.environ.get("AGENTBOX_SANDBOX_IMAGE", "agentbox/sandbox:latest")  # as OrchestratorProcess
    image = f"agentbox/sandbox-sweep:{secrets.token_hex(6)}"
    built = subprocess.run(
        ["docker", "build", "-q", "-t", image, "-"],
        input=f"FROM {base}\nENV SANDBOXD_BROWSER_ALLOW_PRIVATE=true\n",
        capture_output=True, text=True,
    )
    assert built.returncode == 0, built.stderr
    server = None
    try:
        server = OrchestratorProcess(admin_key, "pytest-sweep-", ["--allow-image", image])
        headers = {"Authorization": f"Bearer {admin_key}"}
        created = requests.post(f"{server.url}/v1/sandboxes", json={"image": image}, headers=headers, timeout=300)
        assert created.status_code == 201, created.text
        sandbox = created.json()
        container = docker("ps", "-q", "--filter", f"label=agentbox.sandbox_id={sandbox['id']}").stdout.strip()
        assert container, f"no container for sandbox {sandbox['id']}"

        def exec_in(*command: str) -> str:
            result = docker("exec", container, *command)
            if result.returncode != 0:
                raise RuntimeError(f"docker exec {' '.join(command)} failed: {result.stderr.strip()}")
            return result.stdout.strip()

        ws = server.url.replace("http://", "ws://", 1)
        yield aio_sweep.prepare(aio_sweep.Box(
            base_url=sandbox["urls"]["api"],
            headers=headers,
            exec=exec_in,
            cdp_at=f"{ws}/v1/sandboxes/{sandbox['id']}/cdp?token=",
            viewer_cookie="agentbox_vnc",
        ))
    finally:
        if server is not None:
            server.close()
        docker("rmi", "-f", image)


def cases():
    for method in aio_sweep.CASES:
        if method in ORCHESTRATOR_REFUSALS:
            continue
        if method in KNOWN_DEFECTS:
            yield pytest.param(method, marks=pytest.mark.xfail(reason=KNOWN_DEFECTS[method], strict=True))
        else:
            yield method


@pytest.mark.parametrize("method", list(cases()))
def test_method(box, method):
    aio_sweep.run_case(box, method)


@pytest.mark.parametrize("method", sorted(aio_sweep.UNSUPPORTED))
def test_unsupported_method_answers_501(box, method):
    aio_sweep.run_refusal(box, method)


@pytest.mark.parametrize("method", sorted(ORCHESTRATOR_REFUSALS))
def test_what_the_orchestrator_does_not_serve_answers_501(box, method):
    aio_sweep.run_refusal(box, method, ORCHESTRATOR_REFUSALS)


def test_a_terminal_ticket_is_refused_and_a_viewer_ticket_opens_once_for_its_sandbox(box):
    """The orchestrator's own AIO tickets: a terminal one is refused like the terminal URL; a
    desktop one is good once, and only at its own sandbox's address."""
    def ticket(body):
        return requests.post(f"{box.base_url}/tickets", json=body, headers=box.headers, timeout=30)

    refused = ticket({"terminal": True})
    assert refused.status_code == 501 and "/v1/shell/exec" in refused.text, refused.text
    answer = ticket({"view_only": True})
    assert answer.status_code == 200, answer.text
    made = answer.json()["data"]
    assert made["view_only"] is True and made["viewer_path"].startswith("/vnc/index.html?ticket=")
    elsewhere = box.base_url.replace("/v1/sandboxes/", "/v1/sandboxes/sbx-elsewhere-", 1)
    wrong = requests.get(elsewhere + made["viewer_path"], allow_redirects=False, timeout=30)
    assert wrong.status_code == 401, "a ticket presented at another sandbox's address is refused"
    status, _, _ = box.raw_get(made["viewer_path"])
    assert status == 401, "the ticket was used up by the wrong-address attempt"
    fresh = ticket({}).json()["data"]
    status, headers, _ = box.raw_get(fresh["viewer_path"])
    assert status == 303 and "agentbox_vnc=" in headers.get("set-cookie", ""), (status, headers)
    assert headers["location"].endswith("/vnc/"), headers


def test_summary(box, capsys):
    """Last: the sweep's count through the orchestrator, printed in the suite's output. Every
    method checked with its effect or refused as documented, but for the known defects."""
    line, short = aio_sweep.summary(box, "through the orchestrator")
    line += f" ({', '.join(sorted(ORCHESTRATOR_REFUSALS))} refused by the orchestrator)"
    if KNOWN_DEFECTS:
        line += f" ({', '.join(sorted(KNOWN_DEFECTS))}: orchestrator defects)"
    with capsys.disabled():
        print("\n" + line)
    assert short == sorted(KNOWN_DEFECTS), line + f": {short}"
    refusals = len(aio_sweep.UNSUPPORTED) + len(ORCHESTRATOR_REFUSALS)
    assert f"{refusals} documented refusals (501)" in line, line
