"""The GPU check's SGLang-lpm baseline keeps at most a window of requests waiting, so lpm really sorts
(SGLang falls back to FCFS past 128 waiting)."""
from __future__ import annotations

from tests.harness.sglang_lpm import LPM_QUEUE_MAX, LPM_WINDOW, submit_in_windows, table
from tests.sglang.fake_engine import FakeEngine


def test_at_most_a_window_waits_and_every_request_finishes() -> None:
    engine = FakeEngine(max_running_requests=4)
    try:
        ids = [[i, i + 1] for i in range(60)]
        params = [{"max_new_tokens": 5 + i % 3} for i in range(60)]
        outs = engine.loop.run_until_complete(submit_in_windows(engine, ids, params, window=6, poll_s=0.005))
        assert len(outs) == 60
        assert [o["meta_info"]["completion_tokens"] for o in outs] == [p["max_new_tokens"] for p in params]
        # all at once, 56 would wait; a snapshot a step late may let one or two more in than aimed at
        assert 0 < engine.most_waiting <= 6 + 2
        assert LPM_WINDOW + 16 <= LPM_QUEUE_MAX
    finally:
        engine.shutdown()


def test_one_table() -> None:
    text = table({"blendserve": {"run_tok_s": 200.0, "cached_share": 0.5}, "sglang_lpm": {"run_tok_s": 100.0}})
    assert text.splitlines()[2].split() == ["sglang_lpm", "100.0", "-", "0.500x"]
