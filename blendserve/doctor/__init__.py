"""`blendserve doctor`: what a worker's first run on an engine needs, checked before it runs, in one table.

A first GPU run otherwise fails one prerequisite at a time, each deep in an install or a model load: an
Ubuntu 22.04 box has Python 3.10 (sglang 0.5.23 ships wheels for 3.11-3.13 only), no venv module, no nvcc
(flashinfer compiles its attention kernels just in time), and a driver that may predate the CUDA build.
The doctor names every missing prerequisite of the configured engine in one run, each with its fix, and
exits non-zero if any check failed (a warning does not fail it).

`--before-install` runs only the system checks, with the standard library alone, so that
scripts/gpu_check.sh can run it with any python3 (3.10 included) before anything is installed:
`python3 -m blendserve.doctor --engine sglang --before-install --python python3.11`. The worker image runs
the whole doctor at container start, before `blendserve worker`, with the GPU mounted.

Every probe of the machine goes through `Probes`, so each check is tested by making it fail on a CPU box.
"""
from __future__ import annotations

from blendserve.doctor.command import checks, main, on_gpu, parser, table, target_from
from blendserve.doctor.probes import FAIL, OK, SKIP, WARN, Check, Probes, Target
from blendserve.doctor.service import database, engine_import, gpu_memory, model, model_dir, server, weights_bytes
from blendserve.doctor.system import (
    c_compiler,
    cuda_build,
    driver,
    gpus,
    libnuma,
    nvcc,
    python_version,
    venv_module,
)

__all__ = ["FAIL", "OK", "SKIP", "WARN", "Check", "Probes", "Target", "c_compiler", "checks", "cuda_build", "database",
           "driver", "engine_import", "gpu_memory", "gpus", "libnuma", "main", "model", "model_dir", "nvcc", "on_gpu",
           "parser", "python_version", "server", "table", "target_from", "venv_module", "weights_bytes"]
