"""A request the engine cannot run fails alone, with its own error line; its neighbours, its batch and
the batch beside it all finish."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import TINY
from tests.live import Deployment, chat_lines, jsonl, pg_schema_url, read_lines, wait_batch

POISON = 100_000    # past the tiny model's real 512-row embedding table: the engine refuses it


@pytest.fixture(scope="module")
def deployment(tiny_model, backend, tmp_path_factory):
    """The tiny model behind a config.json that claims a larger vocabulary than its weights hold (a checkpoint
    whose config and weights disagree): validation lets POISON through; the engine checks a prompt against
    its own embedding table before the request enters a step shared with others, and refuses it there."""
    path = tmp_path_factory.mktemp("lying") / "model"
    shutil.copytree(tiny_model, path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "vocab_size": 2 * POISON}))
    d = Deployment(tmp_path_factory.mktemp(f"bs-{backend}"), "" if backend == "sqlite" else pg_schema_url(),
                   f"{TINY}={path}").start_all()
    yield d
    d.stop()


def _completion(i: int, prompt) -> dict:
    return {"custom_id": f"c-{i}", "method": "POST", "url": "/v1/completions",
            "body": {"model": TINY, "prompt": prompt, "max_tokens": 24}}


def test_poison_request_fails_alone(deployment):
    c = deployment.client()
    rows = [_completion(i, f"hello number {i}") for i in range(12)]
    rows[5] = _completion(5, [3, 4, POISON, 5])
    f = c.files.create(file=("poison.jsonl", jsonl(rows)), purpose="batch")
    poisoned = c.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h")
    healthy_rows = chat_lines(8, TINY, max_tokens=24)
    g = c.files.create(file=("healthy.jsonl", jsonl(healthy_rows)), purpose="batch")
    healthy = c.batches.create(input_file_id=g.id, endpoint="/v1/chat/completions", completion_window="24h")

    b = wait_batch(c, poisoned.id, timeout=150)
    assert b.status == "completed", b
    out, err = read_lines(c, b.output_file_id), read_lines(c, b.error_file_id)
    assert sorted(o["custom_id"] for o in out) == sorted(r["custom_id"] for r in rows if r["custom_id"] != "c-5")
    assert [e["custom_id"] for e in err] == ["c-5"]
    message = err[0]["error"]["message"]
    assert err[0]["error"]["code"] == "server_error" and "3 times" not in message
    assert message == "Token id 100000 at prompt position 2 is outside the model's vocabulary of 512 tokens " \
                      "(ids 0 to 511)."
    assert b.request_counts.completed == 11 and b.request_counts.failed == 1

    h = wait_batch(c, healthy.id, timeout=150)
    assert h.status == "completed" and h.error_file_id is None, h
    assert len(read_lines(c, h.output_file_id)) == 8
