"""Files built from the paper's four request kinds, in proportions prefix_mix's files do not use.

The kinds (the paper's Table 4, scaled to a 135M model on 2 cores):
- mmlu: an MMLU subject's few-shot prefix (prefix_mix.few_shot) and a question,
  answered in 1-2 tokens. Compute-dense, shared.
- burstgpt: a unique conversational prompt of 30-300 words, a short heavy-tailed
  answer (max_tokens 8-64). Compute-dense, unshared.
- wildchat: a system prompt from a pool (prefix_mix.SYSTEMS) and a user turn,
  a long answer (max_tokens 96-256). Memory-dense, lightly shared.
- openvid: a short prompt and a long generation (``long_tokens``): the most
  memory-dense kind (the paper's video tokens, cut to what a CPU runs in seconds).

Rows are drawn at random, so kinds interleave in file order (FCFS). A file's
``subjects`` may exceed MMLU's 57 (numbered variants of its subjects): that is how
``bigprefix`` gets more distinct prefix tokens than the CPU engine's default
2 GiB pool holds (93K tokens), and ``overpool`` about twice as many: the regime
where order decides what the cache keeps.

``--run`` sends each file through the service once (real processes, the CPU
engine, the planner) and prints the run's database, for benchmarks/engine_orders.py:

    PYTHONPATH=. .venv/bin/python -m benchmarks.paper_files --files chatheavy bigprefix --run
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from benchmarks.prefix_mix import MMLU_SUBJECTS, SYSTEMS, TOPICS, few_shot
from blendserve.core.config import SMOLLM2

WORDS = ("time data model system answer question light water market story city energy river music code "
         "garden letter window engine paper bridge forest number signal memory color planet mountain").split()

FILES: dict[str, dict] = {
    # heavier chat than any prefix_mix file, few exams: decode-heavy, little sharing
    "chatheavy": dict(n=360, mix=dict(mmlu=0.10, burstgpt=0.25, wildchat=0.55, openvid=0.10),
                      subjects=8, shots=5, long_tokens=256),
    # few-shot prefixes (3-shot, ~540 tokens) of 180 subjects: ~97K distinct prefix tokens, over the pool
    "bigprefix": dict(n=520, mix=dict(mmlu=0.75, burstgpt=0.10, wildchat=0.10, openvid=0.05),
                      subjects=180, shots=3, long_tokens=256),
    # 5-shot prefixes (~900 tokens) of 200 subjects, ~2 questions each: ~180K distinct prefix tokens, about
    # twice the pool, so in file order a prefix is mostly evicted before its next use
    "overpool": dict(n=520, mix=dict(mmlu=0.80, burstgpt=0.08, wildchat=0.07, openvid=0.05),
                     subjects=200, shots=5, long_tokens=256),
    # a third each of long generations and exams, the rest short chat: the blend's case
    "longexam": dict(n=300, mix=dict(mmlu=0.35, burstgpt=0.20, wildchat=0.10, openvid=0.35),
                     subjects=40, shots=5, long_tokens=320),
}


def subject(i: int) -> str:
    """The i-th subject: MMLU's 57, then numbered variants (each a distinct prefix)."""
    base = MMLU_SUBJECTS[i % len(MMLU_SUBJECTS)]
    return base if i < len(MMLU_SUBJECTS) else f"{base}, part {i // len(MMLU_SUBJECTS) + 1}"


def rows(n: int, mix: dict[str, float], *, subjects: int, shots: int, long_tokens: int, seed: int = 0,
         model: str = SMOLLM2) -> list[dict]:
    """``n`` chat-completions batch lines, each kind drawn with probability ``mix[kind]``."""
    rng = random.Random(seed)
    prefixes = [few_shot(subject(s), shots) for s in range(subjects)]
    kinds, weights = list(mix), list(mix.values())
    out = []
    for i in range(n):
        kind = rng.choices(kinds, weights)[0]
        if kind == "mmlu":
            s = rng.randrange(subjects)
            q = (f"In {subject(s)}, which option best describes finding number {i}?\n"
                 + "".join(f"{'ABCD'[j]}. option {rng.randint(1, 999)}\n" for j in range(4)) + "Answer:")
            body = {"messages": [{"role": "user", "content": prefixes[s] + q}], "max_tokens": rng.choice([1, 2])}
        elif kind == "burstgpt":
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 300)))
            body = {"messages": [{"role": "user", "content": f"Question {i}: summarise this in one line: {text}"}],
                    "max_tokens": rng.choice([8, 16, 32, 64])}
        elif kind == "wildchat":
            body = {"messages": [{"role": "system", "content": rng.choice(SYSTEMS)},
                                 {"role": "user", "content": f"Request {i}: help me with case "
                                                             f"{rng.randint(1, 10**6)} in detail."}],
                    "max_tokens": rng.choice([96, 128, 192, 256])}
        else:
            body = {"messages": [{"role": "user", "content": f"Write a long, detailed story about "
                                                             f"{rng.choice(TOPICS)} (story number {i})."}],
                    "max_tokens": long_tokens}
        out.append({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": model, "temperature": 0, **body}})
    return out


def build(name: str, seed: int = 0) -> list[dict]:
    spec = dict(FILES[name])
    return rows(spec.pop("n"), spec.pop("mix"), seed=seed, **spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", nargs="+", default=list(FILES), choices=sorted(FILES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", type=Path, help="write each file as DIR/NAME.jsonl")
    ap.add_argument("--run", action="store_true", help="run each file through the service (CPU engine) once")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    for name in args.files:
        lines = build(name, args.seed)
        if args.write:
            args.write.mkdir(parents=True, exist_ok=True)
            (args.write / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        if args.run:
            from benchmarks.harness import emit, run_service_way
            from blendserve.core.config import Settings
            from blendserve.core.served import smollm2_checkpoint

            tmp = Path(tempfile.mkdtemp(prefix=f"bs-cpu-c-{name}-"))
            run = run_service_way(lines, smollm2_checkpoint(Settings()), "blendserve", tmp, engine="cpu")
            emit({"file": name, "seed": args.seed, "db": str(tmp / "blendserve.db"), **run.summary()}, args.json)


if __name__ == "__main__":
    main()
