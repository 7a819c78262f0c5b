"""Runs schemathesis (PyPI) against one of our committed OpenAPI documents (docs/openapi/) and a
live server: property-based cases generated from the document, each answer checked for

- no 5xx, except a status the document gives the operation as by-design (504: the operation's
  own ``timeout`` ran out), allowed per operation in a generated config file;
- no status code the document does not list for the operation;
- a body that validates against the documented schema, with the documented content type.

The run is bounded (``max_examples`` per operation) and seeded, so a failure reproduces.
"""

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECKS = "not_a_server_error,status_code_conformance,response_schema_conformance,content_type_conformance"


def _config(document: dict, directory: pathlib.Path) -> pathlib.Path:
    """A schemathesis.toml allowing, per operation, the 5xx statuses its document lists by design
    (501: an AIO operation sandboxd does not serve; 504)."""
    lines = []
    for path, item in sorted(document["paths"].items()):
        for method, operation in sorted(item.items()):
            if method not in ("get", "post", "put", "delete", "patch"):
                continue
            by_design = sorted(s for s in operation.get("responses", {}) if s in ("501", "504"))
            if by_design:
                statuses = ", ".join(json.dumps(s) for s in ["2xx", "3xx", "4xx", *by_design])
                lines += [
                    "[[operations]]",
                    f"include-name = {json.dumps(method.upper() + ' ' + path)}",
                    f"checks.not_a_server_error.expected-statuses = [{statuses}]",
                    "",
                ]
    config = directory / "schemathesis.toml"
    config.write_text("\n".join(lines))
    return config


def run(name: str, url: str, key: str, tmp: pathlib.Path, exclude_path_regex: str | None = None,
        max_examples: int = 10, document: pathlib.Path | None = None,
        operations: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Runs ``st run`` for docs/openapi/<name>.json (or ``document``, another copy) against
    ``url``, on every operation or only on ``operations`` (``"GET /path"``); returns the
    process."""
    schema = document or ROOT / "docs" / "openapi" / f"{name}.json"
    config = _config(json.loads(schema.read_text()), tmp)
    st = pathlib.Path(sys.executable).parent / "st"
    # One worker: schemathesis's workers are threads, and CPython 3.11.2 (Debian's) parses
    # source in several threads with one shared recursion counter, which now and then stops the
    # run with "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905, fixed
    # in later releases). That crash, not an answer off the document, failed two of this
    # suite's runs.
    command = [
        str(st), "--config-file", str(config), "--no-color", "run", str(schema),
        "--url", url, "--header", f"Authorization: Bearer {key}",
        "--checks", CHECKS, "--max-examples", str(max_examples), "--workers", "1",
        "--request-timeout", "60", "--seed", "1", "--generation-database", "none",
    ]
    if exclude_path_regex:
        command += ["--exclude-path-regex", exclude_path_regex]
    for operation in operations:
        command += ["--include-name", operation]
    return subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=tmp)


def summary(result: subprocess.CompletedProcess) -> str:
    """The failures and summary of a run, for an assertion message."""
    out = result.stdout + result.stderr
    start = out.find("FAILURES")
    return out[start:] if start >= 0 else out[-8000:]


def failed_checks(result: subprocess.CompletedProcess) -> dict[str, set[str]]:
    """The failures a run lists in its summary (``❌ ST103 Undocumented status code: 1``), each
    code with the checks that report it, as ``st explain`` names them."""
    out = result.stdout + result.stderr
    summary_part = out[out.rfind("SUMMARY"):] if "SUMMARY" in out else ""
    st = pathlib.Path(sys.executable).parent / "st"
    failures = {}
    for code in sorted(set(re.findall(r"❌ (ST\d+) ", summary_part))):
        explained = subprocess.run([str(st), "explain", code], capture_output=True, text=True, timeout=60).stdout
        names = re.search(r"^checks (.+)$", explained, re.MULTILINE)
        failures[code] = {n.strip() for n in names.group(1).split(",")} if names else set()
    return failures
