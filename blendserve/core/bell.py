"""Doorbells between roles: a file in the shared data dir whose change wakes an idle role at once.

The database stays the only channel for facts; a bell carries none. It only shortens an idle wait: the
API rings `batches` when a batch is created or cancelled, so the scheduler validates it now rather than
after its idle back-off (up to 0.8 s); the scheduler rings `chunks` when a round wrote chunks, so an idle
worker claims the first of them now rather than after its own back-off (up to 0.8 s). Roles share the data
dir wherever they share the file store (one host, or a shared volume); where a ring is missed (another
host whose file system caches attributes, a bell that cannot be written) the waiter polls as before.

Watching costs a stat() every WATCH_S while idle: microseconds, no database round trip, so idle roles
still make no queries beyond their back-off.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

WATCH_S = 0.02      # how often an idle waiter looks at its bell


class Bell:
    """One named bell under `data_dir/bells`."""

    def __init__(self, data_dir: Path, name: str) -> None:
        self.path = Path(data_dir) / "bells" / name
        self._create()
        self.seen = self._stamp()

    def _create(self) -> None:
        """Create the bell file if it is missing, empty and untouched if it is there: a ring is then one
        append to an existing file, one change a waiter sees (creating it in the ring would be two)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except OSError:            # there already, or cannot be made: a ring then costs the waiter a poll
            pass

    def _stamp(self) -> tuple[int, int]:
        try:
            st = os.stat(self.path)
        except OSError:
            return (0, 0)
        return (st.st_mtime_ns, st.st_size)

    def ring(self) -> None:
        """Wake whoever waits on this bell; never raises (a missed ring only costs the waiter a poll)."""
        try:
            # One append, not utime alone: the size changes too, so even a coarse-mtime file system shows
            # every ring. Kept short by a truncate now and then (a waiter may then wake once more: harmless).
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, b".")
                if os.fstat(fd).st_size > 4096:
                    os.ftruncate(fd, 0)
            finally:
                os.close(fd)
        except OSError:
            pass

    def rang(self) -> bool:
        """True once for each change of the bell since the last call (or since this object was made)."""
        stamp = self._stamp()
        if stamp != self.seen:
            self.seen = stamp
            return True
        return False

    def wait(self, seconds: float, stop: threading.Event | None = None,
             also: Callable[[], bool] | None = None) -> bool:
        """Wait up to `seconds`; True as soon as the bell rang (or `also()` holds), False on time out or stop."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.rang() or (also is not None and also()):
                return True
            if stop is not None:
                if stop.wait(min(WATCH_S, left)):
                    return False
            else:
                time.sleep(min(WATCH_S, left))
        return self.rang()


def ring(data_dir: Path, name: str) -> None:
    """Ring the bell `name` under `data_dir` (see Bell.ring)."""
    Bell(data_dir, name).ring()
