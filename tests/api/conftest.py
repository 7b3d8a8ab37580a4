"""An API server in this process (a real uvicorn on a real port), so a test can look at its engines' pools."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

from blendserve.api.app import create_app
from blendserve.core.config import Settings
from tests.live import free_port


class InProcessAPI:
    def __init__(self, settings: Settings) -> None:
        self.app = create_app(settings)
        self.state = self.app.state.blend
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning"))

    def http(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=kw.pop("timeout", 10), **kw)


@contextmanager
def in_process_api(data_dir: Path, models: str, **settings) -> Iterator[InProcessAPI]:
    api = InProcessAPI(Settings(data_dir=data_dir, models=models, **settings))
    t = threading.Thread(target=api.server.run, daemon=True)
    t.start()
    deadline = time.time() + 30
    while not api.server.started and time.time() < deadline:
        time.sleep(0.02)
    try:
        yield api
    finally:
        api.server.should_exit = True
        t.join(10)
