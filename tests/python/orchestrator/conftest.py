"""Fixtures for the Python client tests: a real orchestrator (the binary built by cargo, path in
ORCHESTRATOR_BIN, default target/release/orchestrator) with the real sandbox image
(AGENTBOX_SANDBOX_IMAGE), its own instance label, network and data directory, all removed at
the end."""

import pathlib
import secrets
import sys

import pytest
import requests

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from orchestrator_process import OrchestratorProcess  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
ADMIN_KEY = "py-admin-key-" + secrets.token_hex(16)


class Orchestrator(OrchestratorProcess):
    def __init__(self, extra_args=()):
        super().__init__(ADMIN_KEY, "pytest-", extra_args)
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {ADMIN_KEY}"

    def create(self, **body):
        response = self.session.post(self.url + "/v1/sandboxes", json=body, timeout=300)
        assert response.status_code == 201, response.text
        return response.json()

    def delete(self, sandbox_id):
        return self.session.delete(f"{self.url}/v1/sandboxes/{sandbox_id}", timeout=60).status_code


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
    """An orchestrator for one test alone (for tests whose deletes must not reach others'), with
    at most 3 sandboxes per key: a generated fork of up to 20 stops at the quota (429, all or
    nothing) instead of starting 20 desktops."""
    server = Orchestrator(extra_args=("--max-sandboxes-per-key", "3"))
    yield server
    server.close()
