"""Schemathesis over /openapi.json against a live API, with no keys and with keys, on SQLite and PostgreSQL.

Every operation gets positive cases (valid per the schema) and negative cases
(violating it), and every response goes through schemathesis' checks: no 5xx,
status codes, content types, headers and bodies as documented, invalid input
refused, valid input accepted, auth enforced when keys are set. The number of
cases per operation and mode is BLENDSERVE_FUZZ_EXAMPLES (CI-sized default);
the totals are printed (`-s`) and asserted non-trivial.
"""
from __future__ import annotations

import builtins
import os
from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.conftest import TINY
from tests.live import chat_lines, jsonl

EXAMPLES = int(os.environ.get("BLENDSERVE_FUZZ_EXAMPLES", "12"))
# A failure inside hypothesis can arrive as an exception group (Python >= 3.11 only).
_GROUP = getattr(builtins, "BaseExceptionGroup", Exception)
# Headers that frame the HTTP message itself: a generated `content-length: K-<Jz` is refused by the
# HTTP server (uvicorn's "Invalid HTTP request received.", text/plain) before any route or schema is
# reached, so such a case tests uvicorn, not this API. They are dropped from generated cases.
FRAMING = {"content-length", "transfer-encoding", "host", "connection", "expect"}
KEY = "fuzz-key"


@pytest.fixture(scope="module", params=["open", "keyed"])
def target(request, make_deployment):
    keyed = request.param == "keyed"
    d = make_deployment(**({"BLENDSERVE_API_KEYS": KEY} if keyed else {}))
    d.start("api")
    d.wait_ready()
    c = d.client(KEY)     # real objects, so some generated ids and cursors hit something
    f = c.files.create(file=("seed.jsonl", jsonl(chat_lines(2, TINY))), purpose="batch")
    c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    return d, keyed


def test_openapi_holds_against_the_live_api(target):
    d, keyed = target
    # With keys, schemathesis authenticates positive cases with the real key, and its negative cases
    # (missing or wrong Authorization) must get 401.
    config = schemathesis.Config.from_dict({"auth": {"openapi": {"bearer": {"bearer": KEY}}}} if keyed else {})
    schema = schemathesis.openapi.from_url(f"http://127.0.0.1:{d.port}/openapi.json", config=config)
    tried: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    for result in schema.get_all_operations():
        op = result.ok()
        if op.path == "/ready":     # its 503 is the contract (this API runs with no scheduler or worker);
            continue                # tests/test_ops_endpoints.py checks both of its answers
        if op.path in ("/v1/chat/completions", "/v1/completions"):   # likewise: no worker, so a valid body's
            continue                # answer is 503; tests/test_interactive.py drives them with a worker
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @given(case=op.as_strategy(mode))
            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            def run(case) -> None:
                tried[mode.value] += 1
                for name in [h for h in case.headers or {} if h.lower() in FRAMING]:
                    del case.headers[name]
                try:
                    resp = case.call_and_validate(timeout=30)
                    statuses[resp.status_code] += 1
                except (Exception, _GROUP) as e:      # every failure, not just the first
                    failures.append(f"{op.label} [{mode.value}]: {type(e).__name__}: {str(e)[:600]}")

            try:
                run()
            except Unsatisfiable:       # nothing to violate (an operation without parameters or body)
                assert mode is GenerationMode.NEGATIVE, op.label
    print(f"\nschemathesis ({'keyed' if keyed else 'open'}): {dict(tried)} cases, statuses {dict(statuses)}")
    assert not failures, "\n\n".join(failures[:10]) + f"\n... {len(failures)} failure(s)"
    assert sum(tried.values()) >= 100 and statuses[200] > 0
