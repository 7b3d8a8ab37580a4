"""The system a GPU engine needs: Python, venv, compilers, libraries, the GPU and its driver (standard library
only: these run before anything is installed)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from blendserve.doctor.probes import (
    FAIL,
    FLASHINFER_JIT_BELOW,
    MIN_DRIVER,
    MIN_PYTHON,
    OK,
    PINNED_CUDA,
    SKIP,
    WARN,
    Check,
    Probes,
    Target,
)


def python_version(t: Target, p: Probes) -> Check:
    need = MIN_PYTHON.get(t.engine, (3, 10))
    code, out = p.run([t.python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
    want = ".".join(map(str, need))
    fix = (f"install Python {want}+ (Ubuntu 22.04: sudo apt-get install python3.11 python3.11-venv "
           f"python3.11-dev) and run with it (PYTHON=python3.11 scripts/gpu_check.sh)")
    if code != 0:
        return Check("python", FAIL, f"{t.python} does not run ({out[-200:]})", fix)
    got = tuple(int(x) for x in out.split()[-1].split(".")[:2])
    if got < need:
        return Check("python", FAIL, f"{t.python} is Python {out.split()[-1]}; {t.engine} needs {want}+", fix)
    return Check("python", OK, f"{t.python}: Python {out.split()[-1]}")


def venv_module(t: Target, p: Probes) -> Check:
    code, out = p.run([t.python, "-c", "import ensurepip, venv"])
    if code == 0:
        return Check("venv module", OK, f"{t.python} -m venv works")
    code, ver = p.run([t.python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
    pkg = f"python{ver.split()[-1]}-venv" if code == 0 and ver else "python3-venv"
    return Check("venv module", FAIL, f"{t.python} has no ensurepip/venv (Debian and Ubuntu ship it apart)",
                 f"sudo apt-get install {pkg}")


def c_compiler(t: Target, p: Probes) -> Check:
    for cc in ("cc", "gcc", "clang"):
        if path := p.which(cc):
            return Check("C compiler", OK, path)
    return Check("C compiler", FAIL, "no cc, gcc or clang on PATH (Triton builds its launcher at the first "
                 "prefill)", "sudo apt-get install gcc")


def libnuma(t: Target, p: Probes) -> Check:
    if t.engine != "sglang":
        return Check("libnuma", SKIP, f"{t.engine} does not load it")
    if "libnuma.so.1" in p.libraries():
        return Check("libnuma", OK, "libnuma.so.1")
    return Check("libnuma", FAIL, "libnuma.so.1 is not on the loader's path (sgl_kernel links it)",
                 "sudo apt-get install libnuma1")


def gpus(p: Probes) -> list[dict[str, str]] | None:
    """nvidia-smi's GPUs (name, memory MiB, driver, compute capability); None without nvidia-smi."""
    if not p.which("nvidia-smi"):
        return None
    code, out = p.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.free,driver_version,compute_cap",
                       "--format=csv,noheader,nounits"])
    if code != 0:
        return []
    rows = []
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 5:
            rows.append(dict(zip(("name", "total_mib", "free_mib", "driver", "cc"), parts)))
    return rows


def cuda_build(t: Target, p: Probes) -> int:
    """The CUDA major version the engine's torch was built for: torch's own, else the pinned wheels'."""
    if not t.before_install:
        code, out = p.run([t.python, "-c", "import torch; print(torch.version.cuda or '')"])
        if code == 0 and re.fullmatch(r"\d+(\.\d+)*", out.split()[-1] if out else ""):
            return int(out.split()[-1].split(".")[0])
    return PINNED_CUDA.get(t.engine, 13)


def driver(t: Target, p: Probes, found: list[dict[str, str]] | None) -> Check:
    if found is None:
        return Check("GPU and driver", FAIL, "no nvidia-smi: no NVIDIA driver, or no GPU mounted",
                     "install the NVIDIA driver (>= 580 for CUDA 13); in a container run with --gpus all "
                     "(compose: the service's device reservation)")
    if not found:
        return Check("GPU and driver", FAIL, "nvidia-smi finds no GPU", "check the driver: nvidia-smi")
    cuda = cuda_build(t, p)
    need = MIN_DRIVER.get(cuda, 580)
    have = int(found[0]["driver"].split(".")[0]) if found[0]["driver"].split(".")[0].isdigit() else 0
    gpu = f"{len(found)} x {found[0]['name']} (cc {found[0]['cc']}), driver {found[0]['driver']}, CUDA {cuda} build"
    if have < need:
        fix = f"upgrade the NVIDIA driver to >= {need}"
        if t.engine == "sglang" and cuda >= 13:
            fix += " (or build the worker image on CUDA 12: SGLANG_IMAGE=lmsysorg/sglang:v0.5.19-cu129)"
        return Check("GPU and driver", FAIL, f"{gpu}: driver {have} < {need}", fix)
    return Check("GPU and driver", OK, gpu)


def nvcc(t: Target, p: Probes, found: list[dict[str, str]] | None) -> Check:
    """flashinfer (SGLang's default attention below Hopper, and whenever chosen) compiles its kernels just in
    time with nvcc; a pip venv has none."""
    backend = t.attention_backend
    if t.engine != "sglang":
        return Check("nvcc", SKIP, f"{t.engine} ships its kernels built")
    caps = [tuple(int(x) for x in g["cc"].split(".")[:2]) for g in found or [] if re.fullmatch(r"\d+\.\d+", g["cc"])]
    needed = backend == "flashinfer" or (not backend and (not caps or min(caps) < FLASHINFER_JIT_BELOW))
    home = p.env.get("CUDA_HOME") or p.env.get("CUDA_PATH") or "/usr/local/cuda"
    path = p.which("nvcc") or (str(Path(home) / "bin" / "nvcc") if Path(home, "bin", "nvcc").exists() else None)
    if path:
        return Check("nvcc", OK, path)
    why = f"attention backend {backend or 'flashinfer (SGLang default below cc 9.0)'} compiles with nvcc"
    fix = ("install nvcc of the CUDA build (NVIDIA's CUDA apt repository: sudo apt-get install cuda-nvcc-13-0) "
           "and set CUDA_HOME, or BLENDSERVE_SGLANG_ATTENTION_BACKEND=triton")
    if not needed:
        return Check("nvcc", WARN, f"no nvcc; not needed for {backend or 'SGLang default on cc >= 9.0'}", fix)
    return Check("nvcc", FAIL, f"no nvcc on PATH or in $CUDA_HOME/bin: {why}", fix)
