"""Fixtures for the Python client tests: a real orchestrator (the binary built by cargo, path in
ORCHESTRATOR_BIN, default target/release/orchestrator) with the real sandbox image
(AGENTBOX_SANDBOX_IMAGE), its own instance label, network and data directory, all removed at
the end."""

import json
import os
import pathlib
import secrets
import subprocess
import tempfile
import threading

import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parents[3]
ADMIN_KEY = "py-admin-key-" + secrets.token_hex(16)


def _docker(*args):
    return subprocess.run(["docker", *args], capture_output=True, text=True)


class Orchestrator:
    def __init__(self):
        binary = os.environ.get("ORCHESTRATOR_BIN", str(ROOT / "target/release/orchestrator"))
        if not os.path.exists(binary):
            raise RuntimeError(f"{binary} is missing: cargo build --release -p orchestrator")
        self.image = os.environ.get("AGENTBOX_SANDBOX_IMAGE", "agentbox/sandbox:latest")
        self.instance = "pytest-" + secrets.token_hex(6)
        self.network = "agentbox-" + self.instance
        self.data = tempfile.TemporaryDirectory()
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "AGENTBOX_PUBLIC_URL")}
        env["AGENTBOX_ADMIN_KEY"] = ADMIN_KEY
        self.process = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", self.data.name,
             "--instance", self.instance, "--network", self.network, "--image", self.image,
             "--pool-size", "0", "--heartbeat-secs", "5", "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.logs = []
        ready = threading.Event()
        self.url = None

        def read():
            for line in self.process.stderr:
                self.logs.append(line)
                if '"listening"' in line and self.url is None:
                    self.url = "http://" + json.loads(line)["addr"]
                    ready.set()
        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(120):
            self.close()
            raise RuntimeError("the orchestrator did not start:\n" + "".join(self.logs))
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {ADMIN_KEY}"

    def create(self, **body):
        response = self.session.post(self.url + "/v1/sandboxes", json=body, timeout=300)
        assert response.status_code == 201, response.text
        return response.json()

    def delete(self, sandbox_id):
        return self.session.delete(f"{self.url}/v1/sandboxes/{sandbox_id}", timeout=60).status_code

    def close(self):
        self.process.kill()
        self.process.wait()
        ids = _docker("ps", "-aq", "--filter", f"label=agentbox.instance={self.instance}").stdout.split()
        if ids:
            _docker("rm", "-f", "-v", *ids)
        _docker("network", "rm", self.network)
        self.data.cleanup()


@pytest.fixture(scope="session")
def orchestrator():
    server = Orchestrator()
    yield server
    server.close()


@pytest.fixture(scope="session")
def sandbox(orchestrator):
    created = orchestrator.create(metadata={"suite": "python"})
    yield created
    orchestrator.delete(created["id"])


@pytest.fixture(scope="session")
def admin_key():
    return ADMIN_KEY


@pytest.fixture
def own_orchestrator():
    """An orchestrator for one test alone (for tests whose deletes must not reach others')."""
    server = Orchestrator()
    yield server
    server.close()
