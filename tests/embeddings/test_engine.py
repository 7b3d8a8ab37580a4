"""The embedding engine computes sentence-transformers' vectors for all-MiniLM-L6-v2 (cosine >= 0.999), for
every input of a request, whatever sub-batch and step it lands in, and lets interactive requests cut in."""
from __future__ import annotations

import numpy as np
import pytest

from blendserve.protocol.embeddings import embed_model_info, join
from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.embed import EmbeddingEngine

TEXTS = ["Hello world", "The capital of France is Paris.", "a " * 250, "Ünïcödé ça va? 東京 🙂",
         "short", "Embeddings place similar sentences close together. " * 8, "x", "Batch inference, offline."]


@pytest.fixture(scope="module")
def engine(minilm) -> EmbeddingEngine:
    return EmbeddingEngine(minilm, "m", threads=1, step_tokens=300, sub_batch_tokens=512)


@pytest.fixture(scope="module")
def reference(minilm) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm), device="cpu").encode(TEXTS)


def _vectors(engine: EmbeddingEngine, requests: list[GenRequest], **kw) -> dict[int, np.ndarray]:
    return {r.key: r.vectors for r in engine.generate(requests, **kw)}


def test_vectors_match_sentence_transformers(engine, minilm, reference) -> None:
    info = embed_model_info("m", minilm)
    ids = info.encode(TEXTS)
    # Three requests of several inputs each, over a small step budget: several steps and sub-batches.
    reqs = [GenRequest(1, join(ids[:3]), SamplingParams(0)), GenRequest(2, join(ids[3:4]), SamplingParams(0)),
            GenRequest(3, join(ids[4:]), SamplingParams(0))]
    got = _vectors(engine, reqs)
    vectors = np.concatenate([got[1], got[2], got[3]])
    cos = (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)
    assert cos.min() >= 0.999, cos
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)     # MiniLM's Normalize module


def test_result_counts_each_input_tokens(engine, minilm) -> None:
    info = embed_model_info("m", minilm)
    ids = info.encode(TEXTS[:2])
    (res,) = list(engine.generate([GenRequest(7, join(ids), SamplingParams(0))]))
    assert res.key == 7 and res.vectors.shape == (2, 384)
    assert res.prompt_tokens == len(ids[0]) + len(ids[1]) and res.completion_tokens == 0


def test_interactive_request_cuts_in_between_sub_batches(engine, minilm) -> None:
    info = embed_model_info("m", minilm)
    batch = [GenRequest(k, join(info.encode([f"batch text number {k} " * 20])), SamplingParams(0))
             for k in range(1, 9)]
    lane = [[GenRequest(-1, join(info.encode(["urgent"])), SamplingParams(0))]]
    calls = []

    def urgent() -> list[GenRequest]:
        calls.append(1)
        return lane.pop() if len(calls) == 2 and lane else []     # arrives while the first step runs

    order = [r.key for r in engine.generate(batch, urgent=urgent)]
    assert sorted(order) == [-1, *range(1, 9)]
    assert order.index(-1) < order.index(1)       # answered before the step it cut into


def test_cancelled_requests_get_no_result(engine, minilm) -> None:
    info = embed_model_info("m", minilm)
    reqs = [GenRequest(k, join(info.encode(["text"])), SamplingParams(0)) for k in (1, 2, 3)]
    assert sorted(r.key for r in engine.generate(reqs, cancelled=lambda k: k == 2)) == [1, 3]
