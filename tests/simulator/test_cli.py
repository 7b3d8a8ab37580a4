"""`blendserve simulate` / `python -m blendserve.simulator`: the JSON contract, inputs and errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from blendserve.simulator.cli import main

POLICY_KEYS = {"tokens_per_s", "fraction_of_optimal", "sharing_ratio", "sharing_vs_dfs", "plan_seconds"}


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    out = capsys.readouterr().out
    return json.loads(out)      # exactly one JSON object, nothing else on stdout


def test_json_has_the_documented_keys(capsys):
    doc = _json(capsys, ["--workload", "trace2", "--requests", "1500", "--json"])
    assert list(doc) == ["workloads"] and len(doc["workloads"]) == 1
    wl = doc["workloads"][0]
    assert wl["name"] == "trace2" and wl["requests"] == 1500 and wl["optimal_tokens_per_s"] > 0
    assert set(wl["policies"]) == {"fcfs", "dfs", "balance", "blendserve"}
    for p in wl["policies"].values():
        assert POLICY_KEYS <= set(p)
        assert 0 < p["fraction_of_optimal"] <= 1 and p["tokens_per_s"] > 0 and p["plan_seconds"] >= 0


def test_plan_only_leaves_simulated_fields_null(capsys):
    doc = _json(capsys, ["--workload", "trace1", "--requests", "800", "--json", "--plan-only",
                         "--policies", "dfs,blendserve"])
    pol = doc["workloads"][0]["policies"]
    assert set(pol) == {"dfs", "blendserve"}
    assert pol["dfs"]["tokens_per_s"] is None and pol["dfs"]["fraction_of_optimal"] is None
    assert pol["blendserve"]["sharing_ratio"] > 0


def test_workload_file_and_plot(tmp_path: Path, capsys):
    f = tmp_path / "reqs.jsonl"
    rows = [{"input_ids": [1, 2, 3, 4] * 20 + [i], "output_len": 5 + i % 7, "max_tokens": 64} for i in range(60)]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    png = tmp_path / "u.png"
    doc = _json(capsys, ["--workload-file", str(f), "--json", "--policies", "fcfs,dfs", "--plot", str(png)])
    wl = doc["workloads"][0]
    assert wl["name"] == "reqs" and wl["requests"] == 60
    assert wl["dfs_sharing_ratio"] == pytest.approx(1 - (80 + 60) / (81 * 60))
    assert png.stat().st_size > 1000


def test_readable_table_without_json(capsys):
    assert main(["--workload", "mmlu", "--requests", "300", "--policies", "dfs"]) == 0
    out = capsys.readouterr().out
    assert "mmlu: 300 requests" in out and "of T*" in out and "optimum T*" in out and "dfs" in out


@pytest.mark.parametrize("argv, message", [
    (["--workload", "nope"], "unknown workload"),
    (["--policies", "fcfs,lifo"], "unknown policies"),
    (["--gpu", "tpu"], "unknown gpu"),
    (["--model", "gpt-9"], "unknown model"),
    (["--requests", "0"], "at least 1"),
    (["--plan-only", "--plot", "x.png"], "--plot needs"),
    (["--requests", "50", "--step-tokens", "512", "--max-running", "600"], "max_running must not exceed"),
    (["--efficiency", "1.5"], "efficiency must be"),
    (["--overlap", "sequential", "--step-fill", "balanced"], "needs overlap 'nanoflow'"),
    (["--requests", "50"], "too few requests"),
])
def test_bad_arguments_are_clear_errors(capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_plot_without_matplotlib_names_the_extra(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)        # as if the [plot] extra were not installed
    assert main(["--plot", "x.png"]) == 2
    assert "pip install 'blendserve[plot]'" in capsys.readouterr().err


def test_bad_workload_file_line(tmp_path: Path, capsys):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"input_ids": [1, 2], "output_len": 3}\n{"input_ids": "x", "output_len": 3}\n')
    assert main(["--workload-file", str(f)]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    out = subprocess.run([sys.executable, "-m", "blendserve.simulator", "--workload", "burstgpt", "--requests", "200",
                          "--policies", "fcfs", "--json"], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert json.loads(out.stdout)["workloads"][0]["requests"] == 200


def test_dfs_keeps_the_better_direction_and_overlap_is_reported(capsys):
    import json

    from blendserve.planner import plan
    from blendserve.planner.workload import Workload
    from blendserve.simulator import workloads
    from blendserve.simulator.engine import EngineConfig, output_lengths, simulate
    from tests.simulator.conftest import GPU, MODEL

    assert main(["--workload", "trace3", "--requests", "3000", "--policies", "dfs", "--overlap", "sequential",
                 "--step-tokens", "512", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)["workloads"][0]
    assert j["overlap"] == "sequential" and j["step_tokens"] == 512 and j["step_fill"] == "budget"
    dfs = j["policies"]["dfs"]
    w = workloads.generate("trace3", 3000, seed=0, model=MODEL, hw=GPU)
    cfg = EngineConfig(step_tokens=512, max_running=512, overlap="sequential")
    truth = Workload(w.tokens, w.offsets, w.max_tokens, output_lengths(w).astype(float))
    order = plan(truth, MODEL, GPU, "dfs", kv_capacity_bytes=cfg.capacity(MODEL, GPU) * MODEL.kv_bytes_per_token).order
    both = [simulate(w, o, MODEL, GPU, cfg).tokens_per_s for o in (order, order[::-1].copy())]
    assert dfs["tokens_per_s"] == pytest.approx(max(both), rel=1e-12)
    assert dfs["dfs_direction"] == ("ascending" if both[0] >= both[1] else "descending")
    ideal_over_optimal = j["ideal_tokens_per_s"] / j["optimal_tokens_per_s"]
    assert 0 < dfs["fraction_of_optimal"] <= dfs["fraction_of_ideal"] * ideal_over_optimal + 1e-9


def test_plan_only_takes_s_dfs_from_the_planners_tree():
    """--plan-only skips the simulator's trie (its peak memory at 400K requests) but reports the same s_DFS."""
    from blendserve.simulator import workloads
    from blendserve.simulator.runner import run_workload
    from tests.simulator.conftest import GPU, MODEL

    w = workloads.generate("trace1", 2000, seed=4, model=MODEL, hw=GPU)
    planned = run_workload("t", w, MODEL, GPU, ["dfs"], plan_only=True)
    simulated = run_workload("t", w, MODEL, GPU, ["dfs"])
    assert planned.dfs_sharing == pytest.approx(simulated.dfs_sharing, abs=1e-12) and planned.dfs_sharing > 0.3
    assert planned.runs["dfs"].result is None and planned.runs["dfs"].plan_cpu_seconds > 0
