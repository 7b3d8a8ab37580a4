"""Priority classes of pending requests: which class a planning round orders first.

A batch's class comes from its `metadata.priority` ("high", "normal", "low";
OpenAI's metadata values are strings), else from its API key's default
(BLENDSERVE_KEY_PRIORITIES), else "normal". Deadlines rule over classes: a
request whose batch expires within the urgent horizon is planned in class 0,
ahead of "high", so a low batch near its window still finishes in it and no
class starves another for longer than the horizon. Within a class the policy
(BlendServe, DFS or FCFS) orders as usual, so the blend is kept.
"""
from __future__ import annotations

import numpy as np

from blendserve.core.config import PRIORITIES

URGENT = 0
CLASS = {name: i + 1 for i, name in enumerate(PRIORITIES)}       # high 1, normal 2, low 3


def key_classes(key_priorities: dict[str, str]) -> dict[str, int]:
    """Settings.key_priorities ({owner: "high", ...}, parsed with the keys' tenants) -> {owner: class}."""
    return {owner: CLASS[name] for owner, name in key_priorities.items()}


def classes(metadata: list[dict | None], owners: list[str], expires_at: np.ndarray, now: float,
            urgent_horizon_s: float, key_classes: dict[str, int]) -> np.ndarray:
    """One class per request (0 urgent, then high, normal, low); lower runs first."""
    out = np.array([CLASS.get((m or {}).get("priority"), key_classes.get(o, CLASS["normal"]))
                    for m, o in zip(metadata, owners)], dtype=np.int8)
    out[expires_at - now < urgent_horizon_s] = URGENT
    return out
