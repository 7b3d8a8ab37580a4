"""When `serve` may say "ready": once a chat sent to it is answered, not when the API first listens.

The API answers /v1/models as soon as it binds, while a chat gets 503 until a
worker has loaded its model and registered (a few seconds more). So the
supervisor asks the way a user would: /ready (a scheduler leads and every
served model has a live worker), then one chat of a single token to the first
chat model, with the deployment's first API key when keys are set. A
deployment that serves embedding models only has /ready to go by.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import httpx

from blendserve.core.owners import TENANT

POLL_S = 0.5


def first_key(api_keys: list[str]) -> str | None:
    """The first key of BLENDSERVE_API_KEYS (an entry is `key` or `tenant:key`, as blendserve.core.owners reads it)."""
    for item in api_keys:
        tenant, sep, key = item.partition(":")
        return key.strip() if sep and TENANT.fullmatch(tenant) and key.strip() else item
    return None


def _quiet_httpx() -> None:
    """httpx logs every request at INFO: a probe each half second is not news."""
    logging.getLogger("httpx").setLevel(logging.WARNING)


def probe(base: str, model: str | None, key: str | None, timeout: float = 30.0) -> bool:
    """One try: True when the deployment at `base` (…/v1) is ready and answers a chat to `model` now."""
    root = base.removesuffix("/v1")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        if httpx.get(f"{root}/ready", timeout=5.0).status_code != 200:
            return False
        if model is None:
            return True
        r = httpx.post(f"{base}/chat/completions", headers=headers, timeout=timeout, json={
            "model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "ready?"}]})
    except httpx.HTTPError:
        return False
    return r.status_code == 200


def announce_when_ready(base: str, model: str | None, key: str | None, say: Callable[[str], None],
                        stop: threading.Event) -> threading.Thread:
    """Probe in a daemon thread until the deployment answers, then `say` once how long it took."""
    started = time.monotonic()
    _quiet_httpx()

    def run() -> None:
        while not stop.is_set():
            if probe(base, model, key):
                say(f"ready: {base} answers {'chats' if model else 'requests'} "
                    f"({time.monotonic() - started:.0f} s after start)")
                return
            stop.wait(POLL_S)

    t = threading.Thread(target=run, name="ready-probe", daemon=True)
    t.start()
    return t
