"""The contract test (tests/python/contract.py) fails when the document and the server disagree:
its checks run, on one operation, against copies of the OpenAPI document sandboxd serves with
one defect planted in each. A copy that leaves out a status the server answers fails
``status_code_conformance``; one that names another content type than the server sends fails
``content_type_conformance``; the served document itself passes on the same operation.

The operation is ``GET /v1/sandbox/hooks``: it reads only, answers 200 (JSON) when its
``event`` is known or absent and 422 when not, so a few generated cases reach both.
"""

import copy
import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import contract  # noqa: E402

OPERATION = ("/v1/sandbox/hooks", "get")


@pytest.fixture(scope="module")
def served(sandbox):
    status, document = sandbox.request("GET", "/v1/openapi.json")
    assert status == 200, document
    responses = document["paths"][OPERATION[0]][OPERATION[1]]["responses"]
    assert "422" in responses and "application/json" in responses["200"]["content"], responses
    return document


def run(sandbox, document, tmp_path):
    path = tmp_path / "sandboxd.json"
    path.write_text(json.dumps(document))
    result = contract.run(
        "sandboxd", sandbox.base_url, sandbox.api_key, tmp_path, max_examples=5, document=path,
        operations=(f"{OPERATION[1].upper()} {OPERATION[0]}",),
    )
    return result, result.stdout + result.stderr


def mutated(served, change):
    document = copy.deepcopy(served)
    change(document["paths"][OPERATION[0]][OPERATION[1]]["responses"])
    return document


def test_the_served_document_passes(sandbox, served, tmp_path):
    result, out = run(sandbox, served, tmp_path)
    assert result.returncode == 0, contract.summary(result)
    assert contract.failed_checks(result) == {}, out[-4000:]
    assert "generated" in out, out[-2000:]


def test_an_undocumented_status_fails_status_code_conformance(sandbox, served, tmp_path):
    result, out = run(sandbox, mutated(served, lambda r: r.pop("422")), tmp_path)
    assert result.returncode != 0, out[-4000:]
    assert contract.failed_checks(result) == {"ST103": {"status_code_conformance"}}, out[-4000:]
    assert "Received: 422" in out, out[-4000:]


def test_an_undocumented_content_type_fails_content_type_conformance(sandbox, served, tmp_path):
    def to_text(responses):
        content = responses["200"]["content"]
        content["text/plain"] = content.pop("application/json")

    result, out = run(sandbox, mutated(served, to_text), tmp_path)
    assert result.returncode != 0, out[-4000:]
    assert contract.failed_checks(result) == {"ST105": {"content_type_conformance"}}, out[-4000:]
