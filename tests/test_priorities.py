"""Priorities between batches: high before normal before low, deadlines before any class."""
from __future__ import annotations

import numpy as np
import pytest

from blendserve.core.config import Settings
from blendserve.core.owners import owner_of_key
from blendserve.scheduler import priority
from tests.conftest import TINY
from tests.live import chat_lines, jsonl, wait_batch


def test_classes():
    key = priority.key_classes(Settings(api_keys="", key_priorities="kA=low,kB=high").key_priorities)
    cls = priority.classes([{"priority": "high"}, None, {"x": "1"}, {"priority": "low"}, None],
                           ["", owner_of_key("kA"), owner_of_key("kB"), owner_of_key("kB"), ""],
                           np.array([1e9, 1e9, 1e9, 1e9, 100.0]), now=0.0, urgent_horizon_s=900.0, key_classes=key)
    assert cls.tolist() == [1, 3, 1, 3, 0]     # metadata wins over the key's default; the deadline over both
    with pytest.raises(ValueError):
        Settings(key_priorities="kA=urgent")


def test_metadata_priority_is_the_callers_own(deployment):
    """Metadata is free-form, as at OpenAI: a priority this service does not know is kept and ignored."""
    c = deployment.client()
    f = c.files.create(file=("in.jsonl", jsonl(chat_lines(1, TINY))), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                         metadata={"priority": "urgent", "team": "ml"})
    assert c.batches.retrieve(b.id).metadata == {"priority": "urgent", "team": "ml"}
    assert wait_batch(c, b.id).status == "completed"


def _submit(c, rows, **kw):
    f = c.files.create(file=("in.jsonl", jsonl(rows)), purpose="batch")
    return c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", **kw)


def test_high_overtakes_low_and_a_deadline_overtakes_high(make_deployment):
    # A small running set, so the worker holds a chunk or two and the plan decides what runs next.
    d = make_deployment(BLENDSERVE_PLANNER="fcfs", BLENDSERVE_COMPLETION_WINDOWS="24h,90s",
                        BLENDSERVE_URGENT_HORIZON_S="120", BLENDSERVE_CPU_MAX_BATCH="4").start_all()
    c = d.client()
    low = _submit(c, chat_lines(160, TINY, max_tokens=128), completion_window="24h", metadata={"priority": "low"})
    wait_batch(c, low.id, until=lambda b: b.request_counts and b.request_counts.completed >= 1)
    high = _submit(c, chat_lines(8, TINY, max_tokens=16), completion_window="24h", metadata={"priority": "high"})
    high = wait_batch(c, high.id)
    assert high.status == "completed"
    assert c.batches.retrieve(low.id).status == "in_progress"       # FCFS alone would have run low first
    # A low batch whose window is nearly over goes ahead of high work submitted before it.
    big_high = _submit(c, chat_lines(160, TINY, max_tokens=128), completion_window="24h",
                       metadata={"priority": "high"})
    urgent_low = wait_batch(c, _submit(c, chat_lines(8, TINY, max_tokens=16), completion_window="90s",
                                       metadata={"priority": "low"}).id)
    assert urgent_low.status == "completed" and urgent_low.request_counts.completed == 8
    assert c.batches.retrieve(big_high.id).status == "in_progress"
