"""Embedding throughput: the service's /v1/embeddings batch beside sentence-transformers' own `encode`, same
texts, same model (all-MiniLM-L6-v2 from its PyPI package), same machine and torch threads.

Ways, in this order:
  st       SentenceTransformer.encode(texts) at its defaults (batch_size 32; it sorts the whole list by
           length first), tokenization included;
  engine   the EmbeddingEngine alone over one request per text (tokenized by the service's tokenizer, the
           time of which is included), in file order;
  service  real api/scheduler/worker processes on SQLite: upload, batch create -> completed (validation,
           tokenizing, planning, the engine, the result writes and the output file).
Tokens are the texts' token counts ([CLS] and [SEP] included, what usage.prompt_tokens reports), the
same for every way, so tokens/s compare directly. Texts: random words of the model's vocabulary, 4 to 80 a
line (seeded), so lengths vary as a corpus's do.

    .venv/bin/python -m benchmarks.embeddings_vs_st --lines 50000 --threads 2 --out benchmarks/results/embeddings.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path


def corpus(vocab: list[str], lines: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(vocab) for _ in range(int(min(80, 4 + rng.expovariate(1 / 22)))))
            for _ in range(lines)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=50_000)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: every usable CPU)")
    ap.add_argument("--ways", default="st,engine,service")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import torch

    from blendserve.core.embedstore import MINILM, ensure_minilm
    from blendserve.protocol.embeddings import embed_model_info, join

    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    work = Path(tempfile.mkdtemp(prefix="embbench-"))
    path = ensure_minilm(work / "models")
    info = embed_model_info(MINILM, path)
    from transformers import AutoTokenizer

    vocab = [w for w in AutoTokenizer.from_pretrained(str(path)).get_vocab() if w.isalpha() and w.isascii()]
    texts = corpus(sorted(vocab), args.lines)
    tokens = sum(len(ids) for ids in info.encode(texts))
    rows = []

    def report(way: str, seconds: float, **extra) -> None:
        row = {"way": way, "lines": len(texts), "tokens": tokens, "seconds": round(seconds, 2),
               "tokens_per_s": round(tokens / seconds), "threads": threads, **extra}
        rows.append(row)
        print(json.dumps(row), flush=True)

    ways = args.ways.split(",")
    if "st" in ways:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(path), device="cpu")
        t0 = time.perf_counter()
        model.encode(texts)
        report("st", time.perf_counter() - t0, batch_size=32)
    if "engine" in ways:
        from blendserve.worker.engines.base import GenRequest, SamplingParams
        from blendserve.worker.engines.embed import EmbeddingEngine

        engine = EmbeddingEngine(path, MINILM, threads=threads)
        t0 = time.perf_counter()
        reqs = (GenRequest(k, join([ids]), SamplingParams(0)) for k, ids in enumerate(info.encode(texts)))
        n = sum(1 for _ in engine.generate(reqs))
        assert n == len(texts)
        report("engine", time.perf_counter() - t0)
    if "service" in ways:
        from tests.harness.deployment import Deployment, jsonl, wait_batch

        d = Deployment(work / "service", "", f"{MINILM}={path}", BLENDSERVE_CPU_THREADS=str(threads),
                       BLENDSERVE_MAX_REQUESTS_PER_FILE=str(max(50_000, len(texts))),
                       BLENDSERVE_CHUNK_REQUESTS="32", BLENDSERVE_POLL_INTERVAL_S="0.2",
                       BLENDSERVE_PLAN_MAX_WAIT_S="1.0", BLENDSERVE_LEASE_SECONDS="30")
        try:
            d.start("api")
            d.start("scheduler")
            d.start("worker", "worker", "--model", MINILM)
            d.wait_ready()
            c = d.client()
            lines = [{"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
                      "body": {"model": MINILM, "input": t, "encoding_format": "base64"}} for i, t in enumerate(texts)]
            t0 = time.perf_counter()
            f = c.files.create(file=("embed.jsonl", jsonl(lines)), purpose="batch")
            b = c.batches.create(input_file_id=f.id, endpoint="/v1/embeddings", completion_window="24h")
            b = wait_batch(c, b.id, timeout=7200, every=2.0)
            seconds = time.perf_counter() - t0
            assert b.status == "completed" and b.request_counts.completed == len(texts), b
            report("service", seconds, planner=os.environ.get("BLENDSERVE_PLANNER", "blendserve"))
        finally:
            d.stop()
    if args.out:
        with args.out.open("a") as fh:
            for row in rows:
                fh.write(json.dumps({**row, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")


if __name__ == "__main__":
    main()
