"""What `blendserve serve` says when it starts: one line per role, the models' preparation only when it
happens, and "ready" only once a chat is answered."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import httpx

from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.embedstore import MINILM, ensure_minilm
from blendserve.core.modelstore import smollm2_gguf_path
from blendserve.core.served import first_start_work
from tests.live import free_port

KEY = "first-start-key-5d21"


def _models_dir(tmp_path, smollm2_models):
    """A data dir whose models are in place: SmolLM2 from the session's conversion, MiniLM extracted."""
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    stem = smollm2_gguf_path().stem
    (data / "models" / stem).symlink_to(smollm2_models / stem)
    ensure_minilm(data / "models")
    return data


def test_first_start_work_names_only_what_is_missing(tmp_path, smollm2_models):
    empty = Settings(data_dir=tmp_path / "empty")
    assert first_start_work(empty) == [f"converting {SMOLLM2} from its GGUF", f"extracting {MINILM}"]
    assert first_start_work(Settings(data_dir=_models_dir(tmp_path, smollm2_models))) == []
    assert first_start_work(Settings(data_dir=tmp_path / "empty", models=f"m={tmp_path}")) == []   # named: none


def _chat(port: int) -> int:
    r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                   json={"model": SMOLLM2, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]},
                   timeout=30)
    return r.status_code


def test_serve_says_one_line_per_role_and_ready_once_a_chat_is_answered(tmp_path, smollm2_models):
    data = _models_dir(tmp_path, smollm2_models)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLENDSERVE_")}
    env["BLENDSERVE_API_KEYS"] = f"tenant-a:{KEY}"          # the probe uses the first key, as a user would
    proc = subprocess.Popen([sys.executable, "-m", "blendserve", "serve", "--port", str(port), "--data-dir",
                             str(data)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    access: list[str] = []          # stdout: uvicorn's access log
    threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in proc.stderr], daemon=True).start()
    threading.Thread(target=lambda: [access.append(line) for line in proc.stdout], daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.time() + 120
        while not any("blendserve: ready" in line for line in seen):
            assert time.time() < deadline and proc.poll() is None, "\n".join(seen)
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                continue
        assert _chat(port) == 200            # "ready" means a chat is answered now, not in a few seconds
        end = time.time() + 3                # the embedding worker may say its line just after
        while time.time() < end:
            try:
                seen.append(lines.get(timeout=0.2))
            except queue.Empty:
                pass
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    text = "\n".join(seen)
    assert "alembic" not in text and "Converting" not in text and "LOAD REPORT" not in text, text
    assert "first start" not in text, text           # nothing to convert, so nothing said about converting
    role_lines = {
        "starting": [s for s in seen if s.startswith("blendserve: starting api, scheduler, worker")],
        "api": [s for s in seen if "api listening on" in s],
        "scheduler": [s for s in seen if "scheduler" in s and " leads (planner=" in s],
        "worker": [s for s in seen if f"serving {SMOLLM2}" in s],
        "embedding worker": [s for s in seen if f"serving {MINILM}" in s],
        "ready": [s for s in seen if s.startswith("blendserve: ready: ")],
    }
    assert {k: len(v) for k, v in role_lines.items()} == dict.fromkeys(role_lines, 1), text
    assert len(seen) == len(role_lines), text        # and nothing else
    assert "without auth" not in text
    # The readiness probe polls /ready: no access-log line for it (nor for /health), the chats it sends are.
    assert access and not [a for a in access if "/ready" in a or "/health" in a], access
