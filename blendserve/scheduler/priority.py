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

from blendserve.core.config import get_settings
from blendserve.core.owners import PREFIX, TENANT, owner_of_key

PRIORITIES = ("high", "normal", "low")
URGENT = 0
CLASS = {name: i + 1 for i, name in enumerate(PRIORITIES)}       # high 1, normal 2, low 3


def parse_key_priorities(spec: str) -> dict[str, int]:
    """"key1=high,acme=low" -> {owner: class}: a key's own tenant (blendserve/core/owners.py), or a tenant by name;
    a bad entry is a configuration error."""
    ring, out = get_settings().keyring(), {}
    for i, item in enumerate(filter(None, (x.strip() for x in spec.split(","))), start=1):
        key, _, name = item.rpartition("=")
        if not key or name not in CLASS:       # the entry holds a key: say which entry, never what it says
            raise ValueError(f"BLENDSERVE_KEY_PRIORITIES: entry {i} is not KEY=high|normal|low")
        out[ring.owner_of(key) or owner_of_key(key)] = CLASS[name]
        if TENANT.fullmatch(key):
            out[PREFIX + key] = CLASS[name]
    return out


def classes(metadata: list[dict | None], owners: list[str], expires_at: np.ndarray, now: float,
            urgent_horizon_s: float, key_classes: dict[str, int]) -> np.ndarray:
    """One class per request (0 urgent, then high, normal, low); lower runs first."""
    out = np.array([CLASS.get((m or {}).get("priority"), key_classes.get(o, CLASS["normal"]))
                    for m, o in zip(metadata, owners)], dtype=np.int8)
    out[expires_at - now < urgent_horizon_s] = URGENT
    return out
