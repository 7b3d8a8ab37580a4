"""vLLM's own batch runner vs BlendServe driving the same vLLM engine, one JSONL file, three ways.

(a) `python -m vllm.entrypoints.openai.run_batch` with prefix caching on: what
    most people run for offline batches (file order, no job state);
(b) the service (real api/scheduler/worker processes, SQLite) with a
    `--engine vllm` worker and BLENDSERVE_PLANNER=blendserve;
(c) the same with BLENDSERVE_PLANNER=fcfs: what the planner alone adds;
(d) the same with BLENDSERVE_PLANNER=dfs: prefix-sorted order across jobs;
(e) run_batch on the file sorted by prompt: what a user gets by sorting it;
(s) the service whose worker runs `--engine openai` in front of `vllm serve`, started with (b)'s engine
    arguments: what a team that already runs vLLM servers gets.
The planner's figure is (b) against the better of (c) and (d); the service's,
(b) against the better of (a) and (e); the server engine's, (s) against (b) and that better run_batch.

The file: benchmarks/prefix_mix.py, half MMLU-style exam questions over
--subjects subjects (one ~900-token 5-shot prefix each, 1-2 token answers),
10% long generations (256 tokens), 40% chat behind shared system prompts (64
tokens), interleaved. With --num-blocks the KV cache is scaled down to the
file, as a real batch is many times a GPU's cache; without it every prefix of
a file this small fits vLLM's smallest CPU cache (1 GiB, ~46K tokens) and
order cannot matter.

Every way uses the same engine arguments (VllmOptions, also given to run_batch
and the server as flags) and the same VLLM_CPU_KVCACHE_SPACE. Each run starts
from a fresh engine, so no run inherits another's prefix cache. Reported per run:
  first_s   the first result: (a) process start to the output file written (it
            writes every line at the end); (b-d, s) upload start to the first
            result written;
  whole_s   (a) process start to the output file written; (b-d, s) upload start
            to the last result written, with the worker already up (the service
            keeps its engine warm between jobs, run_batch starts one per file);
  run_tok_s prompt + completion tokens over the run phase: (a) from its
            "Reading batch" log line to the output file written, (b-d, s) from
            the batch's first claimed request to the last result written;
  cached    the share of prompt tokens served from vLLM's prefix cache;
  tok/cpu_s the same tokens over the CPU-seconds of the process tree doing the
            run ((a) run_batch and its engine processes, run phase; (b-d) the
            worker and its engine processes, (s) the worker and the server's,
            upload to completed): on a machine
            shared with other work this moves much less than wall-clock rates.

    scripts/setup_vllm.sh .venv-vllm/bin/python -m benchmarks.vllm_vs_run_batch --repeats 3 --num-blocks 272
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.harness import WayRun, emit, run_service_way, tree_cpu_s
from benchmarks.paper_files import FILES, build
from benchmarks.prefix_mix import workload
from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.served import smollm2_checkpoint
from blendserve.worker.engines.vllm import VllmOptions
from tests.harness.deployment import jsonl
from tests.harness.vllm_server import VllmServer, cli_flags


def sorted_by_prompt(rows: list[dict]) -> list[dict]:
    """The file sorted by its messages: requests behind one prefix become neighbours (a DFS of the prompts)."""
    return sorted(rows, key=lambda r: json.dumps(r["body"]["messages"]))


def run_vllm_batch(rows: list[dict], model: Path, options: VllmOptions, tmp: Path, way: str = "a") -> WayRun:
    """(a): vLLM's run_batch as a user runs it; (e) the same on the file sorted by prompt."""
    src, out = tmp / "input.jsonl", tmp / "output.jsonl"
    src.write_bytes(jsonl(rows))
    model_args = {k: v for k, v in options.engine_args(model, SMOLLM2).items() if k != "model"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.run_batch", "-i", str(src), "-o", str(out),
           "--model", str(model), "--enable-prompt-tokens-details", *cli_flags(model_args)]
    log = tmp / "run_batch.log"
    t0 = time.time()
    with log.open("w") as sink:
        p = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    started, cpu0, cpu1, seen = None, 0.0, 0.0, {}
    while p.poll() is None:       # the log's own timestamps are whole seconds: watch for the line instead
        cpu1 = tree_cpu_s(p.pid, seen)
        if started is None and "Reading batch from" in log.read_text(errors="replace"):
            started, cpu0 = time.time(), cpu1
        time.sleep(0.1)
    if p.returncode or started is None:
        raise RuntimeError("run_batch failed:\n" + log.read_text(errors="replace")[-4000:])
    done = out.stat().st_mtime
    usage = [json.loads(x)["response"]["body"]["usage"] for x in out.read_text().splitlines() if x.strip()]
    assert len(usage) == len(rows), f"{len(usage)} results for {len(rows)} requests"
    return WayRun("e: vllm run_batch, sorted file" if way == "e" else "a: vllm run_batch",
                  sum(u["prompt_tokens"] for u in usage),
                  sum(u["completion_tokens"] for u in usage),
                  sum((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0 for u in usage),
                  done - started, done - t0, cpu1 - cpu0, done - t0)


def run_server_way(rows: list[dict], model: Path, options: VllmOptions, tmp: Path) -> WayRun:
    """(s): the service, its worker's engine `--engine openai` in front of `vllm serve` started with the same
    engine arguments (up before the upload, as the in-process engine is); CPU counts the server's processes."""
    server = VllmServer(cli_flags(options.engine_args(model, SMOLLM2)), tmp / "vllm-server.log")
    server.start()
    try:
        return run_service_way(rows, model, "blendserve", tmp, engine="openai", worker_args=("--url", server.url),
                               server_pid=server.proc.pid)
    finally:
        server.kill()


def table(runs: list[WayRun]) -> str:
    """Medians per way, as a markdown table."""
    ways = sorted({r.way for r in runs})
    lines = ["| way | runs | first result s | whole-job s | run-phase s | run-phase tok/s | tok per CPU-s | "
             "prompt + completion tokens | cached share |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    med = {}
    for w in ways:
        rs = [r for r in runs if r.way == w]
        med[w] = {k: statistics.median(getattr(r, k) if k != "run_tok_s" else r.run_tok_s for r in rs)
                  for k in ("first_s", "whole_s", "run_s", "run_tok_s")}
        med[w]["tok_per_cpu_s"] = statistics.median(r.tok_per_cpu_s for r in rs)
        cached = statistics.median(r.cached / r.prompt for r in rs)
        toks = statistics.median(r.prompt + r.completion for r in rs)
        lines.append(f"| {w} | {len(rs)} | {med[w]['first_s']:.1f} | {med[w]['whole_s']:.1f} | {med[w]['run_s']:.1f} | "
                     f"{med[w]['run_tok_s']:.0f} | {med[w]['tok_per_cpu_s']:.0f} | {toks:.0f} | {cached:.1%} |")
    a, b, c, d, e, sv = (next((m for w, m in med.items() if w.startswith(x)), None) for x in "abcdes")

    def best(*ms):
        return max((m for m in ms if m), key=lambda m: m["run_tok_s"], default=None)

    for name, num, den in (("b/a", b, a), ("b/c", b, c), ("b/d", b, d), ("b/best of c, d", b, best(c, d)),
                           ("b/best of a, e", b, best(a, e)), ("c/a", c, a), ("s/b", sv, b),
                           ("s/best of a, e", sv, best(a, e))):
        if num and den:
            lines.append(f"\n{name}: run-phase tok/s x{num['run_tok_s'] / den['run_tok_s']:.2f}, "
                         f"tok per CPU-s x{num['tok_per_cpu_s'] / den['tok_per_cpu_s']:.2f}, "
                         f"whole-job time x{den['whole_s'] / num['whole_s']:.2f} faster")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=240)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kv-gib", type=int, default=int(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")),
                    help="VLLM_CPU_KVCACHE_SPACE: whole GiB of KV cache")
    ap.add_argument("--subjects", type=int, default=24, help="exam subjects (of MMLU's 57), one prefix each")
    ap.add_argument("--num-blocks", type=int, default=None,
                    help="KV blocks for every engine (BLENDSERVE_VLLM_NUM_BLOCKS) instead of what --kv-gib gives; "
                         "vLLM wants more than a whole context's worth (8192 / block size 32 = 256 for SmolLM2)")
    ap.add_argument("--ways", default="abcde", help="which of a-e and s to run, in this order each repeat")
    ap.add_argument("--file", choices=sorted(FILES), help="benchmarks/paper_files' file instead of prefix_mix's")
    ap.add_argument("--input", type=Path, help="a batch input file of /v1/chat/completions lines instead")
    ap.add_argument("--json", type=Path, help="append every run's figures to this file")
    args = ap.parse_args()
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(args.kv_gib)   # for run_batch and the workers alike
    if args.num_blocks:
        os.environ["BLENDSERVE_VLLM_NUM_BLOCKS"] = str(args.num_blocks)
    model = smollm2_checkpoint(Settings())
    rows = [json.loads(x) for x in args.input.read_text().splitlines() if x.strip()] if args.input else \
        build(args.file, args.seed) if args.file else \
        workload(args.requests, args.seed, subjects=args.subjects, exams=0.5, long=0.1, long_tokens=256,
                 chat_tokens=64)
    options = VllmOptions.from_settings(Settings().vllm)
    print(json.dumps({"options": asdict(options), "kv_gib": args.kv_gib, "requests": len(rows),
                      "file": str(args.input or args.file), "subjects": args.subjects}), flush=True)
    runs: list[WayRun] = []
    for _ in range(args.repeats):
        for way in args.ways:
            tmp = Path(tempfile.mkdtemp(prefix=f"bs-vllm-{way}-"))
            run = run_vllm_batch(rows, model, options, tmp) if way == "a" else \
                run_vllm_batch(sorted_by_prompt(rows), model, options, tmp, "e") if way == "e" else \
                run_server_way(rows, model, options, tmp) if way == "s" else \
                run_service_way(rows, model, {"b": "blendserve", "c": "fcfs", "d": "dfs"}[way], tmp)
            runs.append(run)
            emit({"file": str(args.input or args.file or f"prefix_mix-{len(rows)}"), **run.summary()}, args.json)
    print(table(runs))


if __name__ == "__main__":
    main()
