"""SGLang's embedding mode as the embedding engine (its CPU path, all-MiniLM-L6-v2): the CPU embedding engine's
vectors (which are sentence-transformers', tests/embeddings) for requests of one and of two inputs, an interactive
request ahead of queued work, a cancelled request dropped, and a batch of /v1/embeddings lines through a
`--engine sglang` worker with the real SDK.

The engine checks run SGLang in a child process (this module run as a script, tests/sglang/conftest.py says why),
once for all of them; the child writes what the engine returned and the tests here judge it."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from blendserve.core.embedstore import MINILM, ensure_minilm
from blendserve.protocol.embeddings import embed_model_info, join
from blendserve.worker.engines.base import GenRequest, SamplingParams
from tests.live import Deployment, read_lines, run_batch
from tests.sglang.conftest import CPU_ENV

pytest.importorskip("sglang", reason="sglang is not installed in this interpreter (scripts/setup_sglang.sh)")

from blendserve.worker.engines.embed import EmbeddingEngine  # noqa: E402

WORDS = "the cat sat on a mat while quick brown foxes jumped over lazy dogs near river banks at dawn".split()
EMBED = SamplingParams(max_tokens=0)
ROOT = Path(__file__).resolve().parents[2]


def texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 60))) for _ in range(n)]


def vector_requests(ids: list[list[int]]) -> list[GenRequest]:
    """Ten requests of one input, ten of two: a request's vectors come back in its inputs' order."""
    return [GenRequest(i, ids[i], EMBED) for i in range(10)] + \
        [GenRequest(10 + i, join([ids[10 + 2 * i], ids[11 + 2 * i]]), EMBED) for i in range(10)]


def engine_checks(minilm: Path, out: Path) -> None:
    """In the child: one SGLang embedding engine through every engine check; what it returned into `out`."""
    from blendserve.core.engine_settings import SglangSettings
    from blendserve.worker.engines.sglang_embed import SGLangEmbeddingEngine

    # A window of a few inputs (in_flight_kv of the 4096-token pool), so that work is queued behind it.
    engine = SGLangEmbeddingEngine(minilm, MINILM, options=SglangSettings(in_flight_kv=0.05))
    try:
        info = embed_model_info(MINILM, minilm)
        got = {r.key: r for r in engine.generate(vector_requests(info.encode(texts(30))))}
        arrays = {f"v{k}": r.vectors for k, r in got.items()}
        report: dict = {"prompt_tokens": {k: r.prompt_tokens for k, r in got.items()}}

        ids = info.encode(texts(40, seed=1))
        # A batch cancelled once its first result is in: the worker's feed admits none of it after that, and
        # the cancel epoch moves; what SGLang still runs is aborted, and nothing more comes back.
        cancel = {"on": False, "epoch": 0}

        def feed() -> Iterator[GenRequest]:
            for i in range(40):
                if cancel["on"]:
                    return
                yield GenRequest(i, ids[i], EMBED)

        report["cancelled"] = []
        for r in engine.generate(feed(), cancelled=lambda k: cancel["on"], cancel_epoch=lambda: cancel["epoch"]):
            report["cancelled"].append(r.key)
            cancel.update(on=True, epoch=1)
        report["idle"] = engine.stats().running_sequences

        polls = iter([[], [GenRequest(-1, ids[0], EMBED)]])
        report["interactive"] = [r.key for r in engine.generate([GenRequest(i, ids[i], EMBED) for i in range(40)],
                                                                 urgent=lambda: next(polls, []))]
        np.savez(out / "vectors.npz", **arrays)
        (out / "report.json").write_text(json.dumps(report))
    finally:
        engine.close()


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_minilm(tmp_path_factory.mktemp("minilm"))


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory, minilm: Path) -> Iterator[tuple[dict, dict]]:
    out = tmp_path_factory.mktemp("sglang-embed")
    env = {**os.environ, **CPU_ENV, "SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1",
           "SGLANG_EXTERNAL_MODEL_PACKAGE": "blendserve.worker.engines"}    # what `blendserve worker` sets
    p = subprocess.run([sys.executable, "-m", "tests.sglang.test_sglang_embeddings", str(minilm), str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    report = json.loads((out / "report.json").read_text())
    with np.load(out / "vectors.npz") as z:
        yield report, {int(k[1:]): z[k] for k in z.files}


def test_sglang_gets_the_checkpoints_pooling_and_whole_input_prefills(minilm: Path) -> None:
    from sglang.srt.models import bert

    from blendserve.core.engine_settings import SglangSettings
    from blendserve.worker.engines import sglang_embed

    args = sglang_embed.embedding_args(minilm, SglangSettings(), cuda=False)
    assert json.loads(args["json_model_override_args"]) == {"pooling_type": "MEAN", "normalize": True}
    assert args["is_embedding"] and args["disable_radix_cache"] and args["chunked_prefill_size"] == -1
    assert args["dtype"] == "float32" and args["schedule_policy"] == "fcfs" and "enable_mixed_chunk" not in args
    assert "dtype" not in sglang_embed.embedding_args(minilm, SglangSettings(), cuda=True)
    # What SGLang's registry takes from SGLANG_EXTERNAL_MODEL_PACKAGE: one class, resolving "BertModel".
    (model,) = sglang_embed.EntryClass
    assert model.__name__ == "BertModel" and issubclass(model, bert.BertModel)


def test_vectors_are_the_cpu_embedding_engines(checked: tuple[dict, dict], minilm: Path) -> None:
    report, vectors = checked
    requests = vector_requests(embed_model_info(MINILM, minilm).encode(texts(30)))
    want = {r.key: r for r in EmbeddingEngine(minilm, MINILM).generate(requests)}
    assert sorted(vectors) == sorted(want) == list(range(20))
    for k, v in vectors.items():
        assert v.dtype == np.float32
        assert v.shape == want[k].vectors.shape == ((1 if k < 10 else 2), 384)
        assert report["prompt_tokens"][str(k)] == want[k].prompt_tokens
        cosine = (v * want[k].vectors).sum(1) / np.linalg.norm(v, axis=1)
        assert cosine.min() >= 0.999, (k, cosine)
        assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-3)      # normalized, as MiniLM's


def test_interactive_request_goes_ahead_of_queued_work(checked: tuple[dict, dict]) -> None:
    keys = checked[0]["interactive"]
    assert sorted(keys) == [-1, *range(40)]
    assert keys.index(-1) < 20          # not behind the few inputs already handed to SGLang and the rest


def test_a_cancelled_batch_stops(checked: tuple[dict, dict]) -> None:
    report = checked[0]
    keys = report["cancelled"]
    assert 1 <= len(keys) < 12 and len(set(keys)) == len(keys), keys      # the window of a few, not all 40
    assert report["idle"] == 0          # nothing left counted in flight; the interactive check ran after it


def test_embeddings_batch_through_an_sglang_worker(tmp_path_factory: pytest.TempPathFactory, minilm: Path) -> None:
    d = Deployment(tmp_path_factory.mktemp("bs-sglang-embed"), "", f"{MINILM}={minilm}", **CPU_ENV)
    for role in ("api", "scheduler"):
        d.start(role)
    d.start("worker", None, "--engine", "sglang")
    try:
        d.wait_ready(timeout=400)
        client = d.client()
        lines = texts(12, seed=2)
        rows = [{"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
                 "body": {"model": MINILM, "input": [t, t.upper()] if i % 3 == 0 else t}} for i, t in enumerate(lines)]
        b = run_batch(client, rows, endpoint="/v1/embeddings")
        assert b.status == "completed" and b.request_counts.completed == 12, d.log("worker")
        out = {x["custom_id"]: x["response"]["body"] for x in read_lines(client, b.output_file_id)}
        info = embed_model_info(MINILM, minilm)
        cpu = EmbeddingEngine(minilm, MINILM)
        for i, t in enumerate(lines):
            inputs = [t, t.upper()] if i % 3 == 0 else [t]
            data = out[f"e{i}"]["data"]
            assert [x["index"] for x in data] == list(range(len(inputs)))
            want = next(cpu.generate([GenRequest(0, join(info.encode(inputs)), EMBED)])).vectors
            got = np.asarray([x["embedding"] for x in data])
            assert ((got * want).sum(1) >= 0.999).all()
            assert out[f"e{i}"]["usage"]["prompt_tokens"] == sum(len(x) for x in info.encode(inputs))
        live = client.embeddings.create(model=MINILM, input=lines[1])     # interactive, on the same worker
        assert live.usage.prompt_tokens == out["e1"]["usage"]["prompt_tokens"]
        assert float(np.dot(live.data[0].embedding, out["e1"]["data"][0]["embedding"])) >= 0.9999
        assert "serving " + MINILM in d.log("worker", tail=None)
    finally:
        d.stop()


if __name__ == "__main__":
    engine_checks(Path(sys.argv[1]), Path(sys.argv[2]))
