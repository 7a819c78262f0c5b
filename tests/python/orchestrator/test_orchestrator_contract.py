"""The orchestrator answers as its committed OpenAPI document says: schemathesis (including its
stateful phase, which creates, lists and deletes sandboxes, keys and tokens) against an
orchestrator of its own, so its deletes cannot reach the other tests' sandboxes."""

import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import contract  # noqa: E402


def test_the_orchestrator_answers_as_its_document_says(own_orchestrator, admin_key, tmp_path):
    result = contract.run("orchestrator", own_orchestrator.url, admin_key, tmp_path)
    assert result.returncode == 0, contract.summary(result)
    assert "generated" in result.stdout, result.stdout[-2000:]
