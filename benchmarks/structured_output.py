"""Structured output on the CPU engine or the vLLM engine: a file of mixed JSON schemas, every output checked,
and its tokens/s against the same prompts unconstrained.

One file of `--lines` requests (default 500) over five schemas (a sentiment label, an extraction record with
free strings, a list of tags, a bounded integer score behind a `$ref`, and json_object; `--kinds profile`: a
record of length-bounded strings and a patterned code, the keywords beyond OpenAI's strict subset), each a chat prompt
that asks for it, on SmolLM2 through the CPU engine or, with `--engine vllm` (in .venv-vllm), vLLM's with its
defaults here (VllmOptions; xgrammar as its structured-output backend) (no service: the engine is what the
mask costs). Ways,
alternated for `--repeats` rounds (fresh prefix cache each), speculative decoding off in both:
  json   the bodies with `response_format`, at `--max-tokens`;
  free   the same bodies without it, each line's max_tokens the tokens its constrained twin just produced,
         so both ways prefill the same prompts and decode the same number of tokens a line: the ratio is
         the mask's cost, not a difference in output lengths (free text runs to max_tokens, JSON stops).
Reported: every constrained output that finished with "stop" parses and validates (share), the share that
finished by "stop", and completion tokens per wall second and per CPU-second of this process and its
children (all their threads: the masks' and vLLM's engine core's included) of each way; medians of the
repeats and their ratios.

    .venv/bin/python -m benchmarks.structured_output --lines 500 --repeats 3
    .venv/bin/python -m benchmarks.structured_output --lines 200 --repeats 3 --kinds profile
    scripts/setup_vllm.sh .venv-vllm/bin/python -m benchmarks.structured_output --engine vllm --lines 500
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import jsonschema_rs

from benchmarks.harness import tree_cpu_s
from blendserve.core.engine_settings import CpuEngineSettings, VllmSettings
from blendserve.core.modelstore import ensure_checkpoint, load_tokenizer, smollm2_gguf_path
from blendserve.protocol.bodies import model_info, tokenize
from blendserve.protocol.requests import sampling_params
from blendserve.worker.engines.base import Engine, GenRequest
from blendserve.worker.engines.cpu import CpuEngine
from blendserve.worker.engines.speculative import SpecConfig

LABEL = {"type": "object", "additionalProperties": False, "required": ["sentiment", "confident"],
         "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]}, "confident": {"type": "boolean"}}}
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "city", "age"],
          "properties": {"name": {"type": "string"}, "city": {"type": "string"},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}}}
TAGS = {"type": "object", "additionalProperties": False, "required": ["tags"],
        "properties": {"tags": {"type": "array", "maxItems": 3, "items": {"enum": ["food", "service", "price",
                                                                                   "place"]}}}}
SCORE = {"type": "object", "additionalProperties": False, "required": ["review"],
         "properties": {"review": {"$ref": "#/$defs/score"}},
         "$defs": {"score": {"type": "object", "additionalProperties": False, "required": ["stars", "summary"],
                             "properties": {"stars": {"type": "integer", "minimum": 1, "maximum": 5},
                                            "summary": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}}
# String bounds and a pattern (the keywords vLLM's xgrammar backend enforces beyond OpenAI's strict subset).
PROFILE = {"type": "object", "additionalProperties": False, "required": ["name", "city", "code", "bio"],
           "properties": {"name": {"type": "string", "minLength": 2, "maxLength": 24},
                          "city": {"type": "string", "minLength": 2, "maxLength": 24},
                          "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                          "bio": {"type": "string", "minLength": 20, "maxLength": 120}}}
KINDS = ("label", "person", "tags", "score", "object", "profile")
REVIEWS = ["The soup was cold and the waiter rude.", "Lovely place, fair prices, we will come back.",
           "Food fine, service slow.", "Best pizza in town, but loud.", "Nothing special; it was okay."]
PEOPLE = ["Anna Berg, 34, lives in Oslo.", "Mr. Tanaka (61) moved to Kyoto.", "Lea from Lyon is 27 years old."]


def lines(n: int, kinds: tuple[str, ...] = KINDS[:5]) -> list[tuple[dict, dict | None]]:
    """(body, schema to validate against) for n requests, the given kinds in turn."""
    out = []
    for i in range(n):
        review, person = REVIEWS[i % len(REVIEWS)], PEOPLE[i % len(PEOPLE)]
        kind = KINDS.index(kinds[i % len(kinds)])
        schema, ask = [(LABEL, f"Classify the sentiment of this review: {review}"),
                       (PERSON, f"Extract the person's name, city and age: {person} (#{i})"),
                       (TAGS, f"Which topics does this review mention? {review} (#{i})"),
                       (SCORE, f"Score this review from 1 to 5 and summarise it: {review} (#{i})"),
                       (None, f"Describe this review as a JSON object: {review} (#{i})"),
                       (PROFILE, f"Describe the reviewer of this review as JSON with name, city, code and bio: "
                                 f"{review} (#{i})")][kind]
        fmt = {"type": "json_object"} if schema is None else \
            {"type": "json_schema", "json_schema": {"name": f"k{kind}", "schema": schema, "strict": True}}
        body = {"messages": [{"role": "user", "content": ask}], "temperature": 0.7, "seed": i,
                "response_format": fmt}
        out.append((body, schema or {"type": "object"}))
    return out


def run(engine: Engine, prompts: list[list[int]], bodies: list[dict],
        max_tokens: list[int]) -> tuple[list, float, float]:
    """Results, wall seconds and CPU seconds of this process and its children."""
    engine.reset_cache() if hasattr(engine, "reset_cache") else engine.close()   # a fresh prefix cache each run
    requests = [GenRequest(i, ids, sampling_params(b, mt))
                for i, (ids, b, mt) in enumerate(zip(prompts, bodies, max_tokens))]
    seen: dict[int, float] = {}
    t0, c0 = time.perf_counter(), tree_cpu_s(os.getpid(), seen)
    results = sorted(engine.generate(requests), key=lambda r: r.key)
    return results, time.perf_counter() - t0, tree_cpu_s(os.getpid(), seen) - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--models", type=Path, default=Path("blendserve-data/models"))
    ap.add_argument("--engine", choices=("cpu", "vllm"), default="cpu")
    ap.add_argument("--kinds", default=",".join(KINDS[:5]),
                    help=f"schemas in turn, of {', '.join(KINDS)} (profile: minLength/maxLength/pattern)")
    ap.add_argument("--out", type=Path, help="append rows here (default benchmarks/results/structured_output"
                                              "[_vllm].jsonl)")
    args = ap.parse_args()
    out = args.out or Path("benchmarks/results/structured_output" + ("_vllm" if args.engine == "vllm" else "")
                           + ".jsonl")
    path = ensure_checkpoint(smollm2_gguf_path(), args.models)
    if args.engine == "vllm":
        from blendserve.worker.engines.vllm import VllmEngine, VllmOptions

        engine: Engine = VllmEngine(path, "SmolLM2-135M-Instruct", VllmOptions.from_settings(VllmSettings()))
    else:       # speculation off: constrained sequences do not draft, and the comparison is of the mask's cost
        engine = CpuEngine(path, "SmolLM2-135M-Instruct", speculative=SpecConfig(), config=CpuEngineSettings())
    info = model_info("SmolLM2-135M-Instruct", path, load_tokenizer(path))
    file = lines(args.lines, tuple(args.kinds.split(",")))
    bodies = [b for b, _ in file]
    free = [{k: v for k, v in b.items() if k != "response_format"} for b in bodies]
    prompts = tokenize("/v1/chat/completions", bodies, info)
    rates: dict[str, list[float]] = {"json": [], "free": []}
    per_cpu: dict[str, list[float]] = {"json": [], "free": []}
    for rep in range(args.repeats):
        lengths = [args.max_tokens] * len(bodies)
        for way, use in (("json", bodies), ("free", free)):
            results, dt, cpu = run(engine, prompts, use, lengths)
            tokens = sum(r.completion_tokens for r in results)
            rates[way].append(tokens / dt)
            per_cpu[way].append(tokens / cpu)
            row = {"way": way, "repeat": rep, "lines": len(results), "seconds": round(dt, 2), "tokens": tokens,
                   "tokens_per_s": round(tokens / dt, 1), "cpu_seconds": round(cpu, 2),
                   "tokens_per_cpu_s": round(tokens / cpu, 1)}
            if way == "json":
                stopped = [(r, s) for r, (_, s) in zip(results, file) if r.finish_reason == "stop"]
                valid = 0
                for r, schema in stopped:
                    try:
                        jsonschema_rs.validate(schema, json.loads(r.text))
                        valid += 1
                    except (ValueError, jsonschema_rs.ValidationError):
                        print("INVALID", repr(r.text[:200]))
                row.update(stopped=len(stopped), valid=valid)
                lengths = [max(1, r.completion_tokens) for r in results]     # the free twin's max_tokens
            print(json.dumps(row), flush=True)
            with out.open("a") as f:
                f.write(json.dumps({"engine": args.engine, **row}) + "\n")
    med = {k: statistics.median(v) for k, v in rates.items()}
    med_cpu = {k: statistics.median(v) for k, v in per_cpu.items()}
    summary = {"engine": args.engine, "median_tokens_per_s": {k: round(v, 1) for k, v in med.items()},
               "ratio_json_to_free": round(med["json"] / med["free"], 3),
               "median_tokens_per_cpu_s": {k: round(v, 1) for k, v in med_cpu.items()},
               "cpu_ratio_json_to_free": round(med_cpu["json"] / med_cpu["free"], 3)}
    print(json.dumps(summary))
    with out.open("a") as f:
        f.write(json.dumps(summary) + "\n")
    engine.close()          # vLLM's engine core is a process of its own: without this the run never exits


if __name__ == "__main__":
    main()
