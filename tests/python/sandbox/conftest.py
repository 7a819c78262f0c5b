"""Fixtures for the end-to-end tests driven by clients nobody here wrote.

A session-wide sandbox container is started from the real image (``AGENTBOX_SANDBOX_IMAGE``,
default ``agentbox/sandbox:latest``) and removed at the end, even when tests fail.
``AGENTBOX_SANDBOXD_BIN``, when set, is a sandboxd binary mounted over the image's (a change to
sandboxd tried against the real image without rebuilding it; the host is Debian 12 like the
image).
"""

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest

IMAGE = os.environ.get("AGENTBOX_SANDBOX_IMAGE", "agentbox/sandbox:latest")


def docker(*args: str) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


class SandboxContainer:
    """One sandbox container, reached at its address on Docker's bridge network."""

    def __init__(self, env: dict[str, str] | None = None, key: bool = True):
        """``key=False``: a sandboxd without a key (``SANDBOX_AUTH=none``), as AIO runs by
        default."""
        self.api_key = "py-" + uuid.uuid4().hex if key else None
        auth = f"SANDBOX_API_KEY={self.api_key}" if key else "SANDBOX_AUTH=none"
        args = ["run", "-d", "--label", "agentbox.test=1", "-e", auth]
        for name, value in (env or {}).items():
            args += ["-e", f"{name}={value}"]
        sandboxd = os.environ.get("AGENTBOX_SANDBOXD_BIN")
        if sandboxd:
            args += ["-v", f"{os.path.abspath(sandboxd)}:/usr/local/bin/sandboxd:ro"]
        self.id = docker(*args, IMAGE)
        self.ip = docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", self.id)
        self.base_url = f"http://{self.ip}:8080"
        # CDP on sandboxd's own port, behind the key (Chromium itself listens on loopback only).
        self.cdp_url = f"http://{self.ip}:8080/cdp"
        self.wait_ready()

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def request(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=self.headers())
        if data is not None:
            req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                status, body = self.request("GET", "/readyz")
                if status == 200:
                    return
                last = body
            except OSError as error:
                last = error
            time.sleep(0.1)
        raise RuntimeError(f"sandbox {self.id[:12]} not ready: {last}\n{docker('logs', '--tail', '40', self.id)}")

    def exec(self, *command: str) -> str:
        return docker("exec", self.id, *command)

    def close(self) -> None:
        subprocess.run(["docker", "rm", "-f", "-v", self.id], capture_output=True)


@pytest.fixture(scope="session")
def sandbox():
    container = SandboxContainer()
    try:
        yield container
    finally:
        container.close()


@pytest.fixture(scope="session")
def client(sandbox):
    from agent_sandbox import Sandbox

    return Sandbox(base_url=sandbox.base_url, headers=sandbox.headers(), timeout=60)


SITE_PORT = 8765


@pytest.fixture(scope="session")
def browsing():
    """A sandbox whose browser may open loopback pages, with a web server on
    ``127.0.0.1:8765`` inside it serving ``/tmp/site`` (tests write their pages there)."""
    container = SandboxContainer(env={"SANDBOXD_BROWSER_ALLOW_PRIVATE": "true"})
    try:
        container.exec("sh", "-c", "mkdir -p /tmp/site")
        container.exec(
            "sh", "-c",
            f"cd /tmp/site && setsid python3 -m http.server {SITE_PORT} --bind 127.0.0.1 >/dev/null 2>&1 &",
        )
        container.site = f"http://127.0.0.1:{SITE_PORT}"
        for _ in range(100):
            try:
                container.exec("curl", "-sf", "-o", "/dev/null", container.site + "/")
                break
            except RuntimeError:
                time.sleep(0.1)
        yield container
    finally:
        container.close()


@pytest.fixture
def own_sandbox():
    """A sandbox container for one test alone (for tests that may break what they drive)."""
    created = SandboxContainer()
    yield created
    created.close()
