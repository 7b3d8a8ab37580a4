"""The engine steps in another thread than the one that loaded it, as in the worker."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_THREADS_PROBE = """
import os, sys, threading
from pathlib import Path
from blendserve.core.engine_settings import CpuEngineSettings
from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.cpu import CpuEngine
def threads() -> int:
    return len(os.listdir("/proc/self/task"))
before = threads()
engine = CpuEngine(Path(sys.argv[1]), "tiny", threads=2, block_size=4, kv_capacity_tokens=4096,
                   config=CpuEngineSettings())
after_load = threads()
out = []
t = threading.Thread(
        target=lambda: out.extend(engine.generate([GenRequest(1, [5, 6, 7], SamplingParams(max_tokens=4))])))
t.start(); t.join()
print(after_load - before, len(out))
"""


def test_loading_the_engine_starts_no_openmp_team_in_the_loading_thread(tiny_model, tmp_path) -> None:
    """The worker loads in its main thread and steps in a rank thread. A second OpenMP team
    (the loader's) makes libgomp stop spinning between ops, which cost the service 24% on 2 cores."""
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", _THREADS_PROBE, str(tiny_model)], capture_output=True, text=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
    assert run.returncode == 0, run.stderr
    new_threads, results = map(int, run.stdout.split()[-2:])
    assert results == 1
    assert new_threads == 0, f"loading the engine started {new_threads} thread(s) in the loading thread"
