"""The interactive lane's N_max / T_max rule, and stream deltas that never run past a stop string."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from blendserve.core.modelstore import load_tokenizer
from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.http_io import TextStream
from blendserve.worker.lane import Lane

P = SamplingParams(max_tokens=4)


def req(lane: Lane) -> GenRequest:
    return GenRequest(lane.new_key(), [1, 2, 3], P)


def test_a_group_starts_at_n_max_or_once_its_oldest_waited_t_max() -> None:
    lane = Lane(max_batch=3, max_wait_s=0.2)
    a, b = req(lane), req(lane)
    lane.put(a)
    lane.put(b)
    assert lane.take() == []                       # two of three, and the oldest has not waited 200 ms
    c = req(lane)
    lane.put(c)
    assert lane.take() == [a, b, c]                # N_max reached: at once
    d = req(lane)
    lane.put(d)
    assert 0.1 < lane.due_in() <= 0.2 and lane.take() == []
    time.sleep(0.21)
    assert lane.due_in() == 0.0 and lane.take() == [d]
    assert lane.due_in() is None
    assert a.key < 0 and len({a.key, b.key, c.key, d.key}) == 4


def test_an_arrival_wakes_an_idle_worker_waiting_on_the_shared_condition() -> None:
    arrived = threading.Condition()
    lane = Lane(max_batch=16, max_wait_s=0.0, arrived=arrived)
    r = req(lane)
    threading.Timer(0.1, lane.put, args=(r,)).start()
    t0 = time.monotonic()
    with arrived:
        assert arrived.wait(5.0)
    assert time.monotonic() - t0 < 1.0 and lane.due_in() == 0.0 and lane.take() == [r]


def test_a_cancelled_request_never_reaches_the_engine() -> None:
    lane = Lane(max_batch=2, max_wait_s=0.0)
    a, b = req(lane), req(lane)
    lane.put(a)
    lane.put(b)
    lane.cancel(a.key)
    assert lane.take() == [b] and not lane.cancelled(a.key)     # dropped while waiting: the engine never saw it
    lane.cancel(b.key)                                          # now running: the engine is told once
    assert lane.cancelled(b.key) and not lane.cancelled(b.key)


def test_stream_deltas_add_up_to_the_final_text_and_stop_short_of_a_stop_string(tiny_model: Path) -> None:
    tok = load_tokenizer(tiny_model)
    ids = tok("The cat sat on the mat. STOP and then more text", add_special_tokens=False)["input_ids"]
    stream = TextStream(tok, ("STOP",))
    deltas = [stream.add([t]) for t in ids]
    full = tok.decode(ids, skip_special_tokens=True)
    final = full[:full.index("STOP")]
    sent = "".join(deltas)
    assert final.startswith(sent) and "S" not in sent[len("The cat sat on the mat. "):]
    assert sent + stream.close(final) == final


def test_stream_deltas_without_stops_follow_every_token(tiny_model: Path) -> None:
    tok = load_tokenizer(tiny_model)
    ids = tok("héllo wörld, ünïcode ☃ done", add_special_tokens=False)["input_ids"]
    stream = TextStream(tok, ())
    deltas = [stream.add([t]) for t in ids]
    full = tok.decode(ids, skip_special_tokens=True)
    assert "".join(deltas) == full and "\ufffd" not in "".join(deltas)
    assert stream.close(full) == ""


def test_the_lane_share_counts_the_last_window_only() -> None:
    from blendserve.worker.lane import Share

    share = Share(window_s=0.3)
    assert share.value() == 0.0
    share.add(300, interactive=False)
    share.add(100, interactive=True)
    assert share.value() == 0.25
    time.sleep(0.35)
    share.add(50, interactive=True)
    assert share.value() == 1.0


def test_the_planner_paces_to_what_the_lane_leaves(tmp_path: Path, tiny_model: Path, monkeypatch) -> None:
    """A worker whose lane took 40% of its tokens is planned with 60% of its step budget."""
    from blendserve.core.config import Settings
    from blendserve.core.db import make_engine, make_sessionmaker
    from blendserve.core.models import Worker
    from blendserve.migrations.upgrade import upgrade
    from blendserve.scheduler.service import policy_for

    settings = Settings(data_dir=tmp_path, models=f"tiny={tiny_model}")
    upgrade(settings.db_url)
    with make_sessionmaker(make_engine(settings.db_url)).begin() as s:
        for wid, share in (("w-busy", 0.4), ("w-idle", 0.0)):
            s.add(Worker(id=wid, model="tiny", engine="cpu", host="h", kv_capacity_tokens=1000, step_tokens=1000,
                         pid=1, started_at=0.0, heartbeat_at=0.0, interactive_share=share))
    assert policy_for(settings).step_budgets(["w-busy", "w-idle"]) == {"w-busy": 600, "w-idle": 1000}
