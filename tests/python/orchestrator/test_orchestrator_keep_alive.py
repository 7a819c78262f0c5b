"""httpx, one pooled ``httpx.Client``, through the orchestrator: calls refused without their body
being read, by the orchestrator itself (401 without the key, 404, 405) or by sandboxd behind the
``/api`` proxy (404, 405), each with a 200 KB body, must not break either hop's keep-alive
connection: the valid proxied call after each one succeeds.

The proxied refusals need the image's sandboxd to drain unread bodies too (an image built from
this code): an older sandboxd resets the connection while the proxy is still sending the body,
and those refusals come back as 502."""

import httpx

BODY = b"x" * (200 * 1024)
ROUNDS = 100


def test_refused_calls_leave_both_hops_usable(orchestrator, sandbox, admin_key):
    keyed = {"Authorization": f"Bearer {admin_key}"}
    api = sandbox["urls"]["api"]
    refusals = [
        ("POST", f"{api}/v1/shell/exec", {}, 401),
        ("POST", f"{orchestrator.url}/v1/no/such/route", keyed, 404),
        ("PUT", f"{orchestrator.url}/v1/sandboxes", keyed, 405),
        ("POST", f"{api}/v1/no/such/route", keyed, 404),
        ("PUT", f"{api}/v1/sandbox", keyed, 405),
    ]
    refused, valid = [], []
    with httpx.Client(timeout=60) as client:
        for round_ in range(ROUNDS):
            for method, url, headers, expected in refusals:
                try:
                    response = client.request(method, url, headers=headers, content=BODY)
                    if response.status_code != expected:
                        refused.append(f"round {round_} {method} {url}: {response.status_code}")
                except httpx.HTTPError as error:
                    refused.append(f"round {round_} {method} {url}: {error!r}")
                try:
                    response = client.get(f"{api}/v1/sandbox", headers=keyed)
                    if response.status_code != 200:
                        valid.append(f"round {round_} after {method} {url}: {response.status_code}")
                except httpx.HTTPError as error:
                    valid.append(f"round {round_} after {method} {url}: {error!r}")
    total = ROUNDS * len(refusals)
    assert not valid, f"{len(valid)} of {total} valid calls failed: {valid[:5]}"
    assert not refused, f"{len(refused)} of {total} refused calls went wrong: {refused[:5]}"
