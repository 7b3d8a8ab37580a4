"""What the doctor checks for (Target), how it looks at the machine (Probes), and what it finds (Check)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from blendserve.core.config import Settings

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
GPU_ENGINES = ("sglang", "vllm")
MIN_PYTHON = {"sglang": (3, 11), "vllm": (3, 10)}     # sglang 0.5.23: cp311-cp313 wheels; vllm 0.32: 3.10+
# The oldest NVIDIA driver each CUDA major release runs on (NVIDIA's minor-version compatibility).
MIN_DRIVER = {13: 580, 12: 525}
PINNED_CUDA = {"sglang": 13, "vllm": 12}              # the CUDA build of the pinned wheels (sglang 0.5.23, vllm 0.32)
FLASHINFER_JIT_BELOW = (9, 0)    # SGLang's default attention is flashinfer below Hopper; its kernels build with nvcc


@dataclass
class Check:
    name: str
    status: str          # ok, warn, FAIL, skip
    found: str           # what the machine has
    fix: str = ""        # what to do (for warn and FAIL)


def _run(argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
    """(exit code, stdout + stderr) of a command; 127 when it is not there."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except (OSError, subprocess.TimeoutExpired) as e:
        return 126, str(e)
    return p.returncode, (p.stdout + p.stderr).strip()


def _ldconfig() -> str:
    return _run(["ldconfig", "-p"])[1] if shutil.which("ldconfig") or Path("/sbin/ldconfig").exists() else ""


@dataclass
class Probes:
    """How the doctor looks at the machine; a test replaces one to make its check fail."""
    which: Callable[[str], str | None] = shutil.which
    run: Callable[[list[str]], tuple[int, str]] = _run
    libraries: Callable[[], str] = _ldconfig           # `ldconfig -p`: the loader's libraries
    env: dict[str, str] = field(default_factory=dict)  # the environment (CUDA_HOME); `main` passes its own


@dataclass
class Target:
    """What is checked for: the engine, the interpreter that will run it, its model, device and server."""
    engine: str = "sglang"
    python: str = sys.executable
    model: str = ""
    url: str = ""
    device: str = ""               # "cpu": the engine's CPU path (no GPU checks)
    attention_backend: str = ""
    tp: int = 1
    before_install: bool = False   # only what the standard library can check: before pip installs anything
    # The deployment's settings (models, data dir, database), parsed by `blendserve doctor`'s entry point;
    # None before install, where nothing but the standard library may be imported.
    settings: Settings | None = None
