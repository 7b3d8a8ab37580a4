"""The short chaos run (benchmarks/chaos.py has the full one): roles stopped with SIGTERM and SIGKILL
while a batch runs; it still completes with every custom_id exactly once and no error line."""
from __future__ import annotations

from tests.conftest import TINY
from tests.harness.chaos import run_chaos

SETUPS = {
    # The embedded default: `serve` on SQLite, stopped whole and one role at a time.
    "sqlite": dict(workers=1, schedulers=1, targets=["serve:worker", "serve:scheduler", "serve:api", "serve"]),
    # Scale-out: two workers and two schedulers on PostgreSQL, one role at a time.
    "postgresql": dict(workers=2, schedulers=2, targets=["serve:worker", "worker1", "serve:scheduler", "scheduler1"]),
}


def test_short_chaos(tmp_path, tiny_model, backend):
    # A CPU batch of 4 keeps the batch running through the stops on a fast machine too.
    rep = run_chaos(tmp_path, f"{TINY}={tiny_model}", backend, requests=120, stops=5, max_tokens=400,
                    gap_s=(0.5, 2.0), seed=1, timeout_s=300, BLENDSERVE_CPU_MAX_BATCH="4", **SETUPS[backend])
    assert sum(not s["missed"] for s in rep.stops) >= 4, rep
    assert {s["signal"] for s in rep.stops} == {"SIGTERM", "SIGKILL"}, rep
    assert all(s["exit_s"] is None or s["exit_s"] < 10 for s in rep.stops), rep
    assert rep.status == "completed" and rep.lost == 0 and rep.duplicated == 0, rep
    assert rep.error_lines == 0 and rep.completed == 120, rep
