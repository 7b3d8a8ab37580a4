"""The local file store: one file per object id under data_dir/files.

Writes go to a temporary name and are renamed into place, so a crash never
leaves a half-written file under a real id. A shared volume (NFS, a mounted
bucket) under the same path is the scale-out store.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class FileStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, file_id: str) -> Path:
        return self.root / file_id

    def open_writer(self, file_id: str) -> AtomicWriter:
        return AtomicWriter(self.path(file_id))

    def open(self, file_id: str) -> BinaryIO:
        return open(self.path(file_id), "rb")

    def delete(self, file_id: str) -> None:
        self.path(file_id).unlink(missing_ok=True)

    def sweep_temp(self, max_age_s: float = 3600.0) -> int:
        """Delete temporary files of writers that died (a crash mid-upload or mid-finalize); returns how many.

        Only files untouched for max_age_s: a live writer (in this process or another, on this host or
        another sharing the store) keeps its file's mtime fresh, and pids mean nothing across hosts.
        """
        cutoff, n = time.time() - max_age_s, 0
        for p in self.root.glob(".*.tmp"):
            try:
                if p.stat().st_mtime < cutoff:
                    p.unlink()
                    n += 1
            except FileNotFoundError:
                pass
        return n


class AtomicWriter:
    """A binary file that appears under its final name only on commit()."""

    def __init__(self, final: Path) -> None:
        self.final = final
        self.tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        self.f = open(self.tmp, "wb")
        self.size = 0

    def write(self, data: bytes) -> None:
        self.f.write(data)
        self.size += len(data)

    def commit(self) -> int:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.final)
        return self.size

    def abort(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(self, exc_type, *_) -> None:
        if not self.f.closed:
            self.abort()


def build_once(target: Path, marker: str, build: Callable[[Path], None]) -> Path:
    """Build a checkpoint directory in a temporary sibling of `target` and rename it into place: a process that
    starts while another builds sees no checkpoint (and builds too; the loser of the rename discards its copy,
    once `target/marker` exists) or a complete one, never half of one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the checkpoint is not
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / marker).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
