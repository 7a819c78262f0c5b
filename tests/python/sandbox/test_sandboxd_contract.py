"""sandboxd answers as its committed OpenAPI document says: schemathesis against its own
container (fuzzing writes files, runs commands and drives the browser), through tests/python/contract.py."""

import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import contract  # noqa: E402


def test_sandboxd_answers_as_its_document_says(own_sandbox, tmp_path):
    sandbox = own_sandbox
    # Stopping or restarting Chromium mid-run would turn every browser route into its
    # documented 503 until it is back (a hard `/v1/browser/restart` did, in one run); process
    # control and the browser's restart have their own tests. So does the home archive, which
    # stops the browser and freezes the agent's processes (held for up to 60 s with
    # `keep_held`): the orchestrator's hibernation and snapshot tests take it end to end.
    result = contract.run("sandboxd", sandbox.base_url, sandbox.api_key, tmp_path,
                          exclude_path_regex=r"^/v1/processes/\{name\}/(stop|restart)$"
                          r"|^/v1/browser/restart$|^/v1/sandbox/home/(archive|release)$")
    assert result.returncode == 0, contract.summary(result)
    assert "generated" in result.stdout, result.stdout[-2000:]
