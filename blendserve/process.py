"""A role's process: its settings, parsed once (a settings file, else the BLENDSERVE_* variables), the settings
file `serve` hands its roles, how a role stops (signals, a clean exit without finalisation) and how `serve`
stops its children."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pydantic import ValidationError

from blendserve.core.config import Settings

STOP_GRACE_S = 8.0
SETTINGS_FILE = "serve-settings.json"   # in the data dir: what `serve` hands its roles (keys included: mode 0600)


def load_settings(file: Path | None = None, data_dir: str | None = None, database_url: str | None = None) -> Settings:
    """This process's settings, parsed once: a settings file, else the BLENDSERVE_* variables; the flags
    win over both. An invalid value ends the command with its name (never its value: it may be a key)."""
    flags: dict[str, object] = {}
    if data_dir:
        flags["data_dir"] = Path(os.path.abspath(data_dir))
    if database_url:
        flags["database_url"] = database_url
    try:
        if file is not None:
            return Settings.model_validate({**json.loads(file.read_text()), **flags})
        return Settings(**flags)
    except ValidationError as e:
        raise SystemExit(f"blendserve: invalid setting\n{e}") from None


def write_settings(settings: Settings) -> Path:
    """The settings file `serve` starts its roles with, readable by this user alone (it holds the keys)."""
    path = settings.data_dir / SETTINGS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(settings.model_dump_json())
    os.replace(tmp, path)
    return path


def stop_on_signal(stop: threading.Event) -> None:
    """SIGTERM/SIGINT set `stop`, once.

    A Python signal handler runs in the main thread between two bytecodes,
    possibly while that thread holds the Event's own (non-reentrant) lock inside
    Event.wait: calling stop.set() there can deadlock. So the handler sets it from
    a new thread. A second signal (Ctrl-C reaches the whole process group, and
    `serve` then sends SIGTERM too) finds it set, or about to be, and does nothing.
    """
    def handler(*_) -> None:
        if not stop.is_set():
            threading.Thread(target=stop.set, name="stop", daemon=True).start()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def run_until_signal(run) -> int:
    stop = threading.Event()
    stop_on_signal(stop)
    run(stop)
    return 0


def exit_now(code: int) -> None:
    """Exit without interpreter finalisation, once the role has stopped cleanly.

    Measured: after a clean stop, the scheduler and the CPU worker sometimes hung
    for good in native code while the interpreter finalised (garbage collection of
    tokenizer/torch objects), so `serve` had to kill them. Everything that matters
    is in the database by then; only the logs need flushing.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def stop_children(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every child, wait up to STOP_GRACE_S in all, then SIGKILL what is left."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.time() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            print(f"blendserve: pid {p.pid} did not stop in {STOP_GRACE_S:.0f}s; killing it", file=sys.stderr)
            p.kill()
            p.wait()
