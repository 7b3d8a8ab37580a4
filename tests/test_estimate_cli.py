"""`blendserve estimate`: a real batch file through the service's validation and tokenizer, planned and simulated."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.live import chat_lines, jsonl


def _estimate(tiny_model, path, *args: str, **env_extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "BLENDSERVE_MODELS": f"tiny-llama={tiny_model}",
           "BLENDSERVE_DATA_DIR": str(path.parent / "data"), **env_extra}
    return subprocess.run([sys.executable, "-m", "blendserve", "estimate", str(path), *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_estimate_orders_and_ranks(tiny_model, tmp_path):
    rows = chat_lines(60, "tiny-llama", max_tokens=200, prefix="A long shared instruction. " * 30)
    rows += chat_lines(40, "tiny-llama", max_tokens=40)
    for i, r in enumerate(rows):
        r["custom_id"] = f"r{i}"
    f = tmp_path / "in.jsonl"
    f.write_bytes(jsonl(rows))
    one = _estimate(tiny_model, f, "--gpu", "a100-80gb", "--output-tokens", "64", "--json")
    assert one.returncode == 0, one.stderr
    e = json.loads(one.stdout)
    assert e["requests"] == 100 and set(e["policies"]) == {"fcfs", "dfs", "blendserve"}
    for c in e["policies"].values():
        assert 0 < c["expected"]["seconds"] < c["all_to_max_tokens"]["seconds"]     # 64 < max_tokens
    two = json.loads(_estimate(tiny_model, f, "--gpu", "a100-80gb", "--output-tokens", "64", "--gpus", "2",
                               "--json").stdout)
    s1, s2 = e["policies"]["fcfs"]["expected"]["seconds"], two["policies"]["fcfs"]["expected"]["seconds"]
    assert abs(s2 - s1 / 2) < 1e-9 * s1
    table = _estimate(tiny_model, f, "--gpu", "h200")
    assert table.returncode == 0 and "blendserve" in table.stdout and "GPU-hours" in table.stdout


def test_estimate_refuses_what_the_service_refuses(tiny_model, tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "x"}}\n')
    r = _estimate(tiny_model, f)
    assert r.returncode == 1 and "line 1: model_not_found" in r.stderr      # nothing left to estimate
    good = chat_lines(3, "tiny-llama", max_tokens=8)
    f.write_bytes(jsonl(good) + b"{not json\n")                              # the file's own error: refused
    r = _estimate(tiny_model, f)
    assert r.returncode == 1 and "line 4: invalid_json_line" in r.stderr
    good[1]["body"]["temperature"] = 9                                      # a request's own: listed, left out
    f.write_bytes(jsonl(good))
    r = _estimate(tiny_model, f, "--json")
    assert r.returncode == 0, r.stderr
    assert "line 2: invalid_value" in r.stderr and "fail alone" in r.stderr


def test_cpu_estimate_learns_output_lengths_from_a_sample_run(tiny_model, tmp_path):
    """With --gpu cpu the command runs a warm-up sample of the file on the CPU engine: a subtree whose answers
    stop at once (EOS favoured) and one that runs to max_tokens are told apart, where an assumption cannot."""
    from blendserve.core.modelstore import eos_token_ids

    eos = eos_token_ids(tiny_model)[0]
    short = chat_lines(30, "tiny-llama", max_tokens=40, prefix="Answer with one word. " * 20,
                       logit_bias={str(eos): 100})
    long = chat_lines(30, "tiny-llama", max_tokens=30, prefix="Write at length. " * 20)
    rows = short + long
    for i, r in enumerate(rows):
        r["custom_id"] = f"r{i}"
    f = tmp_path / "in.jsonl"
    f.write_bytes(jsonl(rows))
    sampled = _estimate(tiny_model, f, "--gpu", "cpu", "--json")
    assert sampled.returncode == 0, sampled.stderr
    e = json.loads(sampled.stdout)
    assert e["output_tokens_from"] == "sample" and "running 16 requests" in sampled.stderr
    assert 8 < e["assumed_output_tokens"] < 22          # ~1 token on one half, ~30 on the other
    # The CPU profile is this machine's, measured on first use and cached in the data dir.
    assert "measuring the CPU engine's rates on this machine" in sampled.stderr
    assert e["profile"]["source"].startswith("measured now: measured on this machine")
    assumed = _estimate(tiny_model, f, "--gpu", "cpu", "--sample", "0", "--json")
    assert "measuring" not in assumed.stderr
    assumed = json.loads(assumed.stdout)
    assert assumed["profile"]["source"].startswith("cached:") and assumed["profile"]["path"] == e["profile"]["path"]
    assert assumed["output_tokens_from"] == "assumed" and assumed["assumed_output_tokens"] == 35.0
    fast, slow = (x["policies"]["blendserve"]["expected"]["seconds"] for x in (e, assumed))
    assert fast < slow


def test_the_cpu_profile_is_measured_again_where_what_it_depends_on_changed(tiny_model, tmp_path):
    """Another thread count (or CPU, or model) is another machine: its cached profile is not reused."""
    f = tmp_path / "in.jsonl"
    f.write_bytes(jsonl(chat_lines(4, "tiny-llama", max_tokens=8)))
    one = json.loads(_estimate(tiny_model, f, "--gpu", "cpu", "--sample", "0", "--json").stdout)
    two = _estimate(tiny_model, f, "--gpu", "cpu", "--sample", "0", "--json", BLENDSERVE_CPU_THREADS="2")
    assert "measuring" in two.stderr
    two = json.loads(two.stdout)
    assert two["profile"]["path"] != one["profile"]["path"] and "2 threads" in two["profile"]["source"]
    again = _estimate(tiny_model, f, "--gpu", "cpu", "--sample", "0", "--remeasure", "--json")
    assert "measuring" in again.stderr and json.loads(again.stdout)["profile"]["path"] == one["profile"]["path"]
    stored = json.loads(open(one["profile"]["path"]).read())
    assert stored["profile"]["flops"] > 0 and stored["profile"]["bandwidth"] > 0
    assert stored["profile"]["step_overhead"] >= 0 and stored["key"]["model"] == "tiny-llama"
