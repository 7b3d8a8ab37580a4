"""Speculative decoding (prompt lookup) in the CPU engine alone, with and without, side by side.

Two request files, generated here from a fixed seed (SmolLM2-135M-Instruct's
chat template, greedy, EOS honoured):

* rewrite: "copy / fix / extract" instructions over a generated paragraph,
  where the answer repeats much of the prompt (the case prompt lookup is for);
* chat: open-ended questions (stories, explanations, advice), where it rarely
  can guess.

For each file and each concurrency (max_running = 1, 16) the same requests
run with BLENDSERVE_SPECULATIVE off and ngram, interleaved (off, ngram, off,
ngram... for --runs), each on a fresh engine (no prefix cache carried over).
Each row: output tokens/s of both (medians), the speed-up, the acceptance
rate (accepted / drafted draft tokens), draft tokens per output token, and
how many outputs are identical to plain decoding's (all of them in float32).

    PYTHONPATH=. python benchmarks/spec_decode.py --out benchmarks/results/spec_decode.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from blendserve.core.engine_settings import CpuEngineSettings  # noqa: E402
from blendserve.core.modelstore import ensure_checkpoint, load_tokenizer, smollm2_gguf_path  # noqa: E402
from blendserve.worker.engines.base import GenRequest, SamplingParams  # noqa: E402
from blendserve.worker.engines.cpu import CpuEngine, default_dtype  # noqa: E402
from blendserve.worker.engines.cpu.speculative import SpecConfig  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"

NAMES = ["Alice", "Bruno", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jun"]
PLACES = ["Lisbon", "Nairobi", "Oslo", "Lima", "Hanoi", "Quebec", "Tbilisi", "Perth", "Accra", "Bergen"]
THINGS = ["a red bicycle", "two old maps", "a box of tea", "the spare keys", "a wooden chair",
          "three lamps", "a blue kettle", "the garden hose", "a stack of letters", "a small radio"]
VERBS = ["bought", "sold", "repaired", "painted", "borrowed", "found", "packed", "delivered"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

REWRITE_TASKS = [
    "Copy the following text exactly, without changing anything:\n\n{text}",
    "Rewrite the following text, replacing every name with \"the customer\":\n\n{text}",
    "Correct the spelling mistakes in the following text and return the whole corrected text:\n\n{text}",
    "Extract every sentence that mentions a day of the week, one per line, word for word:\n\n{text}",
    "Turn each sentence of the following text into a bullet point, keeping its words:\n\n{text}",
]

CHAT = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how photosynthesis works to a ten-year-old.",
    "What are some good habits for staying productive when working from home?",
    "Describe your ideal weekend in the mountains.",
    "Give me three ideas for a birthday party for my grandmother.",
    "Why is the sky blue? Answer in a few sentences.",
    "Write a poem about autumn rain.",
    "What should I consider when adopting a dog?",
    "Explain the difference between weather and climate.",
    "Suggest a plan for learning to cook simple meals.",
    "Tell me about the history of the bicycle.",
    "How can I make my small garden more friendly to bees?",
    "Write a letter to a friend who moved to another country.",
    "What are the benefits of reading fiction?",
    "Describe a busy market on a Saturday morning.",
    "How do I start running if I have never exercised before?",
]


def paragraph(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        s = (f"On {rng.choice(DAYS)}, {rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(THINGS)} "
             f"in {rng.choice(PLACES)}.")
        if rng.random() < 0.3:   # a few misspellings for the correction task
            s = s.replace("the ", "teh ", 1)
        out.append(s)
    return " ".join(out)


def requests_for(kind: str, n: int, max_tokens: int, tokenizer) -> list[GenRequest]:
    rng = random.Random(13)
    texts = []
    for i in range(n):
        if kind == "rewrite":
            texts.append(REWRITE_TASKS[i % len(REWRITE_TASKS)].format(text=paragraph(rng, rng.randint(4, 8))))
        else:
            texts.append(CHAT[i % len(CHAT)] + ("" if i < len(CHAT) else " Be brief."))
    out = []
    for i, text in enumerate(texts):
        chat = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer(chat, add_special_tokens=False)["input_ids"]
        out.append(GenRequest(i, ids, SamplingParams(max_tokens=max_tokens, temperature=0.0)))
    return out


def run_once(path: Path, requests: list[GenRequest], concurrency: int, spec: SpecConfig,
             dtype: torch.dtype | None) -> dict:
    engine = CpuEngine(path, MODEL, max_running=concurrency, threads=1, speculative=spec, dtype=dtype,
                       config=CpuEngineSettings())
    engine.step_log = []
    t = time.perf_counter()
    results = {r.key: r.output_ids for r in engine.generate(requests)}
    seconds = time.perf_counter() - t
    tokens = sum(len(v) for v in results.values())
    stats = engine.spec_stats
    return {"seconds": seconds, "tokens": tokens, "outputs": results, "drafted": stats.drafted,
            "accepted": stats.accepted, "steps": len(engine.step_log)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=16, help="requests per file")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--files", nargs="+", default=["rewrite", "chat"])
    ap.add_argument("--runs", type=int, default=1, help="runs of each setting (interleaved); medians reported")
    ap.add_argument("--spec-tokens", type=int, default=SpecConfig.tokens)
    ap.add_argument("--ngram-min", type=int, default=SpecConfig.min_n)
    ap.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                    help="auto: the engine's own choice (bfloat16 where the CPU has AVX512-BF16)")
    ap.add_argument("--out", type=Path, help="append one JSON line per row here")
    args = ap.parse_args()

    models_dir = Path(os.environ.get("BLENDSERVE_MODELS_DIR", "/tmp/blendserve-models"))
    path = ensure_checkpoint(smollm2_gguf_path(), models_dir)
    tokenizer = load_tokenizer(path)
    on = SpecConfig("ngram", args.spec_tokens, args.ngram_min)
    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    dtype_name = str(dtype or default_dtype()).removeprefix("torch.")
    for kind in args.files:
        requests = requests_for(kind, args.requests, args.max_tokens, tokenizer)
        for concurrency in args.concurrency:
            runs: dict[str, list[dict]] = {"off": [], "ngram": []}
            for _ in range(args.runs):
                runs["off"].append(run_once(path, requests, concurrency, SpecConfig("off"), dtype))
                runs["ngram"].append(run_once(path, requests, concurrency, on, dtype))
            speed = {k: statistics.median(r["tokens"] / r["seconds"] for r in v) for k, v in runs.items()}
            spec = runs["ngram"][-1]
            row = {
                "file": kind, "requests": len(requests), "concurrency": concurrency, "max_tokens": args.max_tokens,
                "dtype": dtype_name, "spec_tokens": on.tokens, "ngram": [on.min_n, on.max_n], "runs": args.runs,
                "off_tok_s": round(speed["off"], 2), "ngram_tok_s": round(speed["ngram"], 2),
                "speedup": round(speed["ngram"] / speed["off"], 3),
                "acceptance": round(spec["accepted"] / spec["drafted"], 3) if spec["drafted"] else 0.0,
                "draft_per_output_token": round(spec["drafted"] / max(1, spec["tokens"]), 3),
                "output_tokens": spec["tokens"], "steps_off": runs["off"][-1]["steps"], "steps_ngram": spec["steps"],
                # outputs equal to the first plain run's, request by request (float32: all of them;
                # bfloat16 moves near-ties with any change of a step's shape, batching included)
                "identical": sum(all(r["outputs"][k] == runs["off"][0]["outputs"][k] for r in runs["ngram"])
                                 for k in runs["off"][0]["outputs"]),
            }
            line = json.dumps(row)
            print(line, flush=True)
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                with args.out.open("a") as f:
                    f.write(line + "\n")


if __name__ == "__main__":
    main()
