"""API keys: 401 without a valid key; each key sees only its own files and batches."""
from __future__ import annotations

import httpx
import openai
import pytest

from tests.conftest import TINY
from tests.live import chat_lines, jsonl


@pytest.fixture(scope="module")
def secured(make_deployment):
    return make_deployment(BLENDSERVE_API_KEYS="key-alice,key-bob").start_all()


def test_missing_or_wrong_key_is_401(secured):
    r = httpx.get(f"{secured.base_url}/batches")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    with pytest.raises(openai.AuthenticationError):
        secured.client("key-mallory").files.list()


def test_keys_cannot_see_each_others_objects(secured):
    alice, bob = secured.client("key-alice"), secured.client("key-bob")
    f = alice.files.create(file=("a.jsonl", jsonl(chat_lines(1, TINY))), purpose="batch")
    b = alice.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    for call in (lambda: bob.files.retrieve(f.id), lambda: bob.files.content(f.id),
                 lambda: bob.files.delete(f.id), lambda: bob.batches.retrieve(b.id),
                 lambda: bob.batches.cancel(b.id),
                 lambda: bob.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                            completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            call()
    assert f.id not in {x.id for x in bob.files.list()}
    assert b.id not in {x.id for x in bob.batches.list()}
    assert f.id in {x.id for x in alice.files.list()} and alice.batches.retrieve(b.id).id == b.id
