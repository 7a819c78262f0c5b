"""The real orchestrator binary (ORCHESTRATOR_BIN, default target/release/orchestrator) as a
child of the test process, with the real sandbox image (AGENTBOX_SANDBOX_IMAGE), its own
instance label, network and data directory; `close()` kills it and removes every container and
the network it made. The Python suites' fixtures build on it."""

import json
import os
import pathlib
import secrets
import subprocess
import tempfile
import threading

ROOT = pathlib.Path(__file__).resolve().parents[2]


def docker(*args):
    return subprocess.run(["docker", *args], capture_output=True, text=True)


class OrchestratorProcess:
    def __init__(self, admin_key, instance_prefix, extra_args=()):
        self.binary = os.environ.get("ORCHESTRATOR_BIN", str(ROOT / "target/release/orchestrator"))
        if not os.path.exists(self.binary):
            raise RuntimeError(f"{self.binary} is missing: cargo build --release -p orchestrator")
        self.image = os.environ.get("AGENTBOX_SANDBOX_IMAGE", "agentbox/sandbox:latest")
        if docker("image", "inspect", self.image).returncode != 0:
            raise RuntimeError(f"the sandbox image {self.image} is missing: run images/build.sh")
        self.instance = instance_prefix + secrets.token_hex(6)
        self.network = "agentbox-" + self.instance
        self.data = tempfile.TemporaryDirectory()
        self.admin_key = admin_key
        self.extra_args = list(extra_args)
        self.logs = []
        self.url = None
        self._spawn("127.0.0.1:0")

    def _spawn(self, listen):
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "AGENTBOX_PUBLIC_URL")}
        env["AGENTBOX_ADMIN_KEY"] = self.admin_key
        self.process = subprocess.Popen(
            [self.binary, "serve", "--listen", listen, "--data-dir", self.data.name,
             "--instance", self.instance, "--network", self.network, "--image", self.image,
             *self.extra_args,
             "--pool-size", "0", "--heartbeat-secs", "5", "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        ready = threading.Event()
        process = self.process

        def read():
            for line in process.stderr:
                self.logs.append(line)
                if '"listening"' in line and not ready.is_set():
                    self.url = "http://" + json.loads(line)["addr"]
                    ready.set()
        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(120):
            self.close()
            raise RuntimeError("the orchestrator did not start:\n" + "".join(self.logs))

    def restart(self):
        """Kills the process (no orderly shutdown: a crash) and starts it again on the same
        address, with the same data directory and instance."""
        listen = self.url.removeprefix("http://")
        self.process.kill()
        self.process.wait()
        self._spawn(listen)

    def close(self):
        self.process.kill()
        self.process.wait()
        ids = docker("ps", "-aq", "--filter", f"label=agentbox.instance={self.instance}").stdout.split()
        if ids:
            docker("rm", "-f", "-v", *ids)
        networks = docker("network", "ls", "-q", "--filter", f"label=agentbox.instance={self.instance}").stdout.split()
        if networks:
            docker("network", "rm", *networks)
        self.data.cleanup()
