"""vLLM's pooling runner as the embedding engine (CPU build, all-MiniLM-L6-v2): the CPU embedding engine's
vectors (which are sentence-transformers', tests/embeddings) for requests of one and of several inputs, an
interactive request ahead of queued work, and a batch of /v1/embeddings lines through a `--engine vllm`
worker with the real SDK."""
from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from blendserve.core.embedstore import MINILM, ensure_minilm
from blendserve.protocol.embeddings import embed_model_info, join
from blendserve.worker.engines.base import GenRequest, SamplingParams
from tests.live import Deployment, read_lines, run_batch

pytest.importorskip("vllm", reason="vllm is not installed in this interpreter (scripts/setup_vllm.sh installs it)")

from blendserve.worker.engines.embed import EmbeddingEngine  # noqa: E402
from blendserve.worker.engines.vllm import VllmOptions  # noqa: E402
from blendserve.worker.engines.vllm_embed import VllmEmbeddingEngine  # noqa: E402

WORDS = "the cat sat on a mat while quick brown foxes jumped over lazy dogs near river banks at dawn".split()
EMBED = SamplingParams(max_tokens=0)


def texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 60))) for _ in range(n)]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_minilm(tmp_path_factory.mktemp("minilm"))


@pytest.fixture(scope="module")
def engine(minilm: Path) -> Iterator[VllmEmbeddingEngine]:
    e = VllmEmbeddingEngine(minilm, MINILM, VllmOptions(max_num_seqs=8, queued=4))
    yield e
    e.close()


def test_vectors_are_the_cpu_embedding_engines(engine: VllmEmbeddingEngine, minilm: Path) -> None:
    ids = embed_model_info(MINILM, minilm).encode(texts(30))
    # Ten requests of one input, ten of two: a request's vectors come back in its inputs' order.
    requests = [GenRequest(i, ids[i], EMBED) for i in range(10)] + \
        [GenRequest(10 + i, join([ids[10 + 2 * i], ids[11 + 2 * i]]), EMBED) for i in range(10)]
    want = {r.key: r for r in EmbeddingEngine(minilm, MINILM).generate(requests)}
    got = {r.key: r for r in engine.generate(requests)}
    assert sorted(got) == sorted(want) == list(range(20))
    for k, r in got.items():
        assert r.vectors.shape == want[k].vectors.shape == ((1 if k < 10 else 2), 384)
        assert r.prompt_tokens == want[k].prompt_tokens
        cosine = (r.vectors * want[k].vectors).sum(1) / np.linalg.norm(r.vectors, axis=1)
        assert cosine.min() >= 0.999, (k, cosine)
        assert np.allclose(np.linalg.norm(r.vectors, axis=1), 1.0, atol=1e-3)      # normalized, as MiniLM's


def test_interactive_request_goes_ahead_of_queued_work(engine: VllmEmbeddingEngine, minilm: Path) -> None:
    ids = embed_model_info(MINILM, minilm).encode(texts(40, seed=1))
    batch = [GenRequest(i, ids[i], EMBED) for i in range(40)]
    hot = GenRequest(-1, ids[0], EMBED)
    polls = iter([[], [hot]])
    keys = [r.key for r in engine.generate(batch, urgent=lambda: next(polls, []))]
    assert sorted(keys) == [-1, *range(40)]
    assert keys.index(-1) < 20          # not behind the 12 requests already handed to vLLM and the rest


def test_embeddings_batch_through_a_vllm_worker(tmp_path_factory: pytest.TempPathFactory, minilm: Path,
                                               engine: VllmEmbeddingEngine) -> None:
    d = Deployment(tmp_path_factory.mktemp("bs-vllm-embed"), "", f"{MINILM}={minilm}")
    for role in ("api", "scheduler"):
        d.start(role)
    d.start("worker", None, "--engine", "vllm")
    try:
        d.wait_ready(timeout=300)
        client = d.client()
        lines = texts(12, seed=2)
        rows = [{"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
                 "body": {"model": MINILM, "input": [t, t.upper()] if i % 3 == 0 else t}} for i, t in enumerate(lines)]
        b = run_batch(client, rows, endpoint="/v1/embeddings")
        assert b.status == "completed" and b.request_counts.completed == 12, d.log("worker")
        out = {x["custom_id"]: x["response"]["body"] for x in read_lines(client, b.output_file_id)}
        info = embed_model_info(MINILM, minilm)
        for i, t in enumerate(lines):
            data = out[f"e{i}"]["data"]
            assert [x["index"] for x in data] == list(range(2 if i % 3 == 0 else 1))
            want = next(engine.generate([GenRequest(0, info.encode([t])[0], EMBED)])).vectors[0]
            assert float(np.dot(np.asarray(data[0]["embedding"]), want)) >= 0.999
            assert out[f"e{i}"]["usage"]["prompt_tokens"] == sum(len(x) for x in info.encode(
                [t, t.upper()] if i % 3 == 0 else [t]))
        assert "serving " + MINILM in d.log("worker", tail=None)
    finally:
        d.stop()
