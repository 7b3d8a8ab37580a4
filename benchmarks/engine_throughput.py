"""CPU engine throughput with SmolLM2: request order, torch threads, dtype.

A prefix-heavy mix (few-shot exams that share long prefixes, plus short chats)
runs in prefix-grouped order (sorted by prompt tokens: a DFS of the prefix
tree) and in shuffled order, each on a fresh engine (empty prefix cache), and
the median of several runs is reported as (input + output) tokens/s. The
prefix cache is kept smaller than the mix's distinct prefixes, as a GPU
engine's cache is smaller than a large batch's, so order decides what hits.
A second figure is 64 short chat requests (the issue's reference point).

    python benchmarks/engine_throughput.py --out benchmarks/results/engine.md
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from core.modelstore import ensure_checkpoint, load_tokenizer, smollm2_gguf_path  # noqa: E402
from worker.engines.base import GenRequest, SamplingParams  # noqa: E402
from worker.engines.cpu import CpuEngine, default_dtype  # noqa: E402

SUBJECTS = ["arithmetic", "geography", "chemistry", "history", "biology", "astronomy"]
CAPITALS = [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"), ("Egypt", "Cairo"),
            ("Canada", "Ottawa"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Norway", "Oslo"), ("Chile", "Santiago")]
TOPICS = ["the sea", "a red bicycle", "winter mornings", "a busy kitchen", "an old library", "mountain trains",
          "a quiet garden", "city lights", "a thunderstorm", "learning to swim", "a market at dawn", "paper boats",
          "the moon", "a lost key", "a school play", "fresh bread"]


@dataclass
class Mix:
    name: str
    requests: list[GenRequest]


def exam_mix(tok, subjects: int = 6, questions: int = 8, chats: int = 12) -> Mix:
    """Few-shot exams (a ~200-token shared prefix per subject, short answers) plus short chats."""
    rng = random.Random(0)
    prompts: list[tuple[list[dict], int]] = []
    for s in range(subjects):
        shots = []
        for i in range(10):
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            country, capital = CAPITALS[(s + i) % len(CAPITALS)]
            shots.append(f"Q{i + 1}: What is {a} plus {b}? A: {a + b}. What is the capital of {country}? A: {capital}.")
        system = f"You are an {SUBJECTS[s]} examiner. Answer with one word.\n" + "\n".join(shots)
        for q in range(questions):
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            prompts.append(([{"role": "system", "content": system},
                             {"role": "user", "content": f"What is {a} plus {b}?"}], 8))
    for c in range(chats):
        prompts.append(([{"role": "user", "content": f"Write one sentence about {TOPICS[c % len(TOPICS)]}."}], 48))
    return Mix("exam", _requests(tok, prompts))


def chat_mix(tok, n: int = 64) -> Mix:
    prompts = [([{"role": "user", "content": f"Write one sentence about {TOPICS[i % len(TOPICS)]} ({i})."}], 48)
               for i in range(n)]
    return Mix("chat64", _requests(tok, prompts))


def _requests(tok, prompts: list[tuple[list[dict], int]]) -> list[GenRequest]:
    out = []
    for key, (messages, max_tokens) in enumerate(prompts):
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        out.append(GenRequest(key, ids, SamplingParams(max_tokens=max_tokens, temperature=0.0)))
    return out


def ordered(requests: list[GenRequest], order: str) -> list[GenRequest]:
    if order == "grouped":
        return sorted(requests, key=lambda r: r.input_ids)
    shuffled = list(requests)
    random.Random(1).shuffle(shuffled)
    return shuffled


def run_once(engine_args: dict, requests: list[GenRequest]) -> dict:
    engine = CpuEngine(**engine_args)  # fresh: empty prefix cache
    start, cpu_start = time.perf_counter(), time.process_time()
    results = list(engine.generate(requests))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    prompt = sum(r.prompt_tokens for r in results)
    output = sum(r.completion_tokens for r in results)
    return {
        "tok_s": (prompt + output) / elapsed,
        "tok_cpu_s": (prompt + output) / cpu,
        "out_tok_s": output / elapsed,
        "seconds": elapsed,
        "cached": sum(r.cached_tokens for r in results) / prompt,
        "prompt": prompt,
        "output": output,
    }


def median_of(runs: int, engine_args: dict, requests: list[GenRequest]) -> dict:
    samples = [run_once(engine_args, requests) for _ in range(runs)]
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    return ["", title, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-dir", type=Path, default=Path("blendserve-data/models"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--prefix-cache-tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="compared on a small chat mix")
    ap.add_argument("--chat-batches", type=int, nargs="*", default=[8, 16, 32])
    ap.add_argument("--chat-threads", type=int, nargs="+", default=[1], help="torch threads for the chat mix")
    ap.add_argument("--chat-only", action="store_true", help="only the chat mix (the issue's reference figure)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    path = ensure_checkpoint(smollm2_gguf_path(), args.cache_dir)
    tok = load_tokenizer(path)
    exam, chat = exam_mix(tok), chat_mix(tok)
    small = Mix("chat16", [GenRequest(r.key, r.input_ids, SamplingParams(max_tokens=16, temperature=0.0))
                           for r in chat.requests[:16]])
    base = {"model_path": path, "model_name": "SmolLM2-135M-Instruct", "max_batch": args.max_batch,
            "prefix_cache_tokens": args.prefix_cache_tokens, "threads": 1, "dtype": default_dtype()}

    def measure(label: list[str], requests: list[GenRequest], **overrides) -> list[str]:
        m = median_of(args.runs, {**base, **overrides}, requests)
        row = [*label, f"{m['tok_s']:.0f}", f"{m['tok_cpu_s']:.0f}", f"{m['out_tok_s']:.1f}", f"{m['seconds']:.1f}",
               f"{m['cached']:.0%}"]
        print(" | ".join(row), flush=True)
        return row

    cols = ["tokens/s (in+out)", "tokens per CPU-second", "output tokens/s", "seconds", "prompt tokens from cache"]
    lines = [
        "# CPU engine throughput (SmolLM2-135M-Instruct)",
        "",
        f"`python {' '.join(sys.argv)}`",
        "",
        f"Machine: {os.cpu_count()} cores, torch {torch.__version__}; load average at start "
        f"{os.getloadavg()[0]:.1f}, at the end {{load_end}} (the machine is shared with other work, so wall-clock "
        "figures move with it; tokens per CPU-second, the process's own CPU time, moves much less). "
        f"Medians of {args.runs} runs, each on a fresh engine (empty prefix cache); "
        f"greedy decoding; {str(base['dtype']).removeprefix('torch.')} weights (this CPU's default) and one "
        "thread unless a row says otherwise.",
        "",
    ]
    if not args.chat_only:
        lines.append(f"Exam mix: {len(exam.requests)} requests, {sum(len(r.input_ids) for r in exam.requests)} "
                     "prompt tokens: 6 few-shot prefixes x 8 short-answer questions (max_tokens 8) plus 12 chats "
                     f"(max_tokens 48); max_batch {args.max_batch}, prefix cache {args.prefix_cache_tokens} tokens.")
        rows = [measure([order], ordered(exam.requests, order)) for order in ("grouped", "shuffled")]
        lines += table("Request order (exam mix):", ["order", *cols], rows)
        rows = [measure([name], ordered(exam.requests, "grouped"), dtype=getattr(torch, name))
                for name in ("bfloat16", "float32")]
        lines += table("Weight dtype (exam mix, grouped):", ["dtype", *cols], rows)
        rows = [measure([str(t)], small.requests, threads=t) for t in args.threads]
        lines += table("Torch threads (16 short chats, max_tokens 16, max_batch 16):", ["threads", *cols], rows)
    rows = [measure([str(mb), str(t)], chat.requests, max_batch=mb, threads=t)
            for mb in args.chat_batches for t in args.chat_threads]
    lines += table(f"Chat mix: {len(chat.requests)} short chat requests (max_tokens 48):",
                   ["max_batch", "threads", *cols], rows)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        text = "\n".join(lines) + "\n"
        args.out.write_text(text.replace("{load_end}", f"{os.getloadavg()[0]:.1f}"))


if __name__ == "__main__":
    main()
