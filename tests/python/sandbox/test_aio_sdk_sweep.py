"""Every method of AIO Sandbox's own Python SDK (``agent-sandbox`` 0.0.30, 131 methods) against
sandboxd in the image, directly: the SDK given the container's address and the sandbox's key.
The cases are in ``tests/python/aio_sweep.py``, shared with the sweep through the orchestrator.

The sweep has a sandbox of its own (it restarts the browser, changes its configuration and
registers a shutdown hook), whose browser may open the loopback pages the sweep serves.
"""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import aio_sweep  # noqa: E402
from conftest import SandboxContainer  # noqa: E402


@pytest.fixture(scope="module")
def box():
    container = SandboxContainer(env={"SANDBOXD_BROWSER_ALLOW_PRIVATE": "true"})
    try:
        yield aio_sweep.prepare(aio_sweep.Box(
            base_url=container.base_url,
            headers=container.headers(),
            exec=container.exec,
            cdp_at=f"://{container.ip}:8080/cdp",
        ))
    finally:
        container.close()


def test_the_sweep_covers_every_sdk_method():
    aio_sweep.check_coverage()


def test_at_least_120_methods_work():
    assert len(aio_sweep.CASES) >= 120, len(aio_sweep.CASES)


@pytest.mark.parametrize("method", list(aio_sweep.CASES))
def test_method(box, method):
    aio_sweep.run_case(box, method)


@pytest.mark.parametrize("method", sorted(aio_sweep.UNSUPPORTED))
def test_unsupported_method_answers_501(box, method):
    aio_sweep.run_refusal(box, method)


def test_summary(box, capsys):
    """Last: the sweep's count, printed in the suite's output. Every method checked with its
    effect or refused as documented; none partial."""
    line, short = aio_sweep.summary(box, "direct")
    with capsys.disabled():
        print("\n" + line)
    assert short == [], line + f": {short}"
    assert line.endswith(
        f"{len(aio_sweep.CASES)} checked with their effect, "
        f"{len(aio_sweep.UNSUPPORTED)} documented refusals (501), 0 partial"
    ), line
