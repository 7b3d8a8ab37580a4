"""The API holds an interactive body to the worker's rules before forwarding it: a body they refuse is a 400
from the API alone (no worker runs here, so anything forwarded would be a 503), in the words the worker's own
check uses; a body they pass goes on. A refused body thus never costs the engine's process (docs/design.md §12.1)."""
from __future__ import annotations

import httpx
import pytest

from blendserve.core.grammar_settings import GrammarSettings
from blendserve.core.limit_settings import LimitSettings
from blendserve.protocol.bodies import check_interactive, model_info
from blendserve.protocol.fields import BodyError
from blendserve.protocol.grammar_limits import with_grammar
from tests.conftest import SQLITE_ONLY, TINY

KEY = "sk-rules-7d21"
HI = [{"role": "user", "content": "hi"}]


def _pattern(p: str) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "s", "strict": True, "schema": {
        "type": "object", "additionalProperties": False, "required": ["a"],
        "properties": {"a": {"type": "string", "pattern": p}}}}}


REFUSED = {
    "backreference": ("/chat/completions", {"model": TINY, "messages": HI, "response_format": _pattern(r"(a)\1")}),
    "word boundary": ("/chat/completions", {"model": TINY, "messages": HI, "response_format": _pattern(r"\bx\b")}),
    "enum of 60,000": ("/chat/completions", {"model": TINY, "messages": HI, "response_format": {
        "type": "json_schema", "json_schema": {"name": "s", "schema": {"enum": [f"v{i}" for i in range(60_000)]}}}}),
    "id past the vocabulary": ("/completions", {"model": TINY, "prompt": [1, 60000], "max_tokens": 2}),
    "temperature as text": ("/chat/completions", {"model": TINY, "messages": HI, "temperature": "hot"}),
    "responses pattern": ("/responses", {"model": TINY, "input": "hi", "text": {"format": {
        "type": "json_schema", "name": "s", "strict": True, "schema": _pattern(r"(a)\1")["json_schema"]["schema"]}}}),
}


@pytest.fixture(scope="module")
def api(make_deployment):
    d = make_deployment(BLENDSERVE_API_KEYS=KEY)
    d.start("api")
    d.wait_ready()
    return d


def _post(api, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{api.base_url}{path}", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)


@SQLITE_ONLY       # the rules run before any query
@pytest.mark.parametrize("kind", list(REFUSED))
def test_a_body_the_rules_refuse_is_the_apis_400(api, tiny_model, kind):
    path, body = REFUSED[kind]
    r = _post(api, path, body)
    assert r.status_code == 400, (r.status_code, r.text[:300])
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    if path != "/responses":          # the same words as the worker's own check of the body
        info = with_grammar(model_info(TINY, tiny_model), GrammarSettings(), LimitSettings())
        with pytest.raises(BodyError) as e:
            check_interactive(f"/v1{path}", body, info)
        assert (error["message"], error["code"], error["param"]) == (e.value.message, e.value.code, e.value.param)


@SQLITE_ONLY
def test_a_body_the_rules_pass_goes_on_to_a_worker(api):
    r = _post(api, "/chat/completions", {"model": TINY, "messages": HI, "max_tokens": 4,
                                         "response_format": _pattern("[a-z]{1,8}")})
    assert r.status_code == 503 and r.json()["error"]["code"] == "no_worker_available", r.text[:300]
