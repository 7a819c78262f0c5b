"""httpx, one pooled ``httpx.Client``, against sandboxd: calls refused without their body being
read (401 without the key, 404 for an unknown path, 405 for a wrong method), each with a 200 KB
body, must not break the keep-alive connection the next call reuses.

Before sandboxd drained such bodies, hyper answered them as keep-alive and then closed the
connection, and httpx's next call on it failed with ``RemoteProtocolError``."""

import httpx

BODY = b"x" * (200 * 1024)
ROUNDS = 100


def run_rounds(client: httpx.Client, refusals, valid) -> tuple[list[str], list[str], int]:
    """Every refusal, ROUNDS times, each followed by the valid call. Returns the refused calls
    that went wrong, the valid calls that went wrong, and how many refusals said they close."""
    refused_failures, valid_failures, closing = [], [], 0
    for round_ in range(ROUNDS):
        for method, url, headers, expected in refusals:
            try:
                response = client.request(method, url, headers=headers, content=BODY)
                if response.status_code != expected:
                    refused_failures.append(f"round {round_} {method} {url}: {response.status_code}")
                if response.headers.get("connection", "").lower() == "close":
                    closing += 1
            except httpx.HTTPError as error:
                refused_failures.append(f"round {round_} {method} {url}: {error!r}")
            method_v, url_v, headers_v = valid
            try:
                response = client.request(method_v, url_v, headers=headers_v)
                if response.status_code != 200:
                    valid_failures.append(f"round {round_} after {method} {url}: {response.status_code}")
            except httpx.HTTPError as error:
                valid_failures.append(f"round {round_} after {method} {url}: {error!r}")
    return refused_failures, valid_failures, closing


def test_refused_calls_with_unread_bodies_leave_the_connection_usable(sandbox):
    keyed = sandbox.headers()
    base = sandbox.base_url
    refusals = [
        ("POST", f"{base}/v1/shell/exec", {}, 401),
        ("POST", f"{base}/v1/no/such/route", keyed, 404),
        ("PUT", f"{base}/v1/sandbox", keyed, 405),
    ]
    with httpx.Client(timeout=30) as client:
        refused, valid, closing = run_rounds(client, refusals, ("GET", f"{base}/v1/sandbox", keyed))
    total = ROUNDS * len(refusals)
    assert not valid, f"{len(valid)} of {total} valid calls failed: {valid[:5]}"
    assert not refused, f"{len(refused)} of {total} refused calls went wrong: {refused[:5]}"
    assert closing == 0, "bodies this small are drained, not answered with a close"
