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

import argparse
import os
import re
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


# -- the system: Python, venv, compilers, libraries, the GPU ----------------------------------------------

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


# -- the installed engine, the model, the GPU's memory, the database, the server ----------------------------

def engine_import(t: Target, p: Probes) -> Check:
    """The engine's own packages load, sgl_kernel's CUDA ops included (they need libcuda.so.1: a driver)."""
    mod = {"sglang": "import sglang, sgl_kernel", "vllm": "import vllm"}[t.engine]
    code, out = p.run([t.python, "-c", mod])
    if code == 0:
        return Check(f"{t.engine} loads", OK, mod)
    last = out.strip().splitlines()[-1] if out.strip() else f"exit {code}"
    fix = (f"pip install '.[{t.engine}]' with Python {'.'.join(map(str, MIN_PYTHON[t.engine]))}+"
           if "No module named" in out else "see the error; a missing libcuda.so.1 means no driver is mounted")
    return Check(f"{t.engine} loads", FAIL, last[:300], fix)


def model_dir(t: Target) -> tuple[str, Path | None]:
    """(name, checkpoint dir) the worker would load; dir None for the default model not yet converted."""
    from blendserve.core.config import SMOLLM2

    configured = t.settings.models if t.settings else {}
    if t.model:
        return t.model, configured.get(t.model, Path(t.model))
    if configured:
        name = next(iter(configured))
        return name, configured[name]
    if t.settings is None:
        return SMOLLM2, None
    from blendserve.core.modelstore import smollm2_gguf_path

    path = t.settings.models_dir / smollm2_gguf_path().stem
    return SMOLLM2, path if (path / "config.json").is_file() else None


def model(t: Target) -> Check:
    try:
        name, path = model_dir(t)
    except Exception as e:            # noqa: BLE001 - no default model's package is this check's failure
        return Check("model", FAIL, str(e)[:300], "BLENDSERVE_MODELS=name=/path/to/checkpoint,...")
    if path is None:
        return Check("model", OK, f"{name}: converted from its package at the worker's first start")
    fix = "point --model or BLENDSERVE_MODELS at a Hugging Face checkpoint directory (config.json, weights, tokenizer)"
    if not (path / "config.json").is_file():
        return Check("model", FAIL, f"{name}: {path} has no config.json", fix)
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return Check("model", FAIL, f"{name}: {path} has no tokenizer (tokenizer.json / tokenizer.model)", fix)
    try:
        from blendserve.core.modelstore import load_tokenizer

        load_tokenizer(path)
    except Exception as e:            # noqa: BLE001 - any failure to load is the finding
        return Check("model", FAIL, f"{name}: its tokenizer does not load: {e}"[:300], fix)
    return Check("model", OK, f"{name}: {path}, tokenizer loads")


def weights_bytes(path: Path) -> int:
    return sum(f.stat().st_size for pattern in ("*.safetensors", "*.bin", "*.pt", "*.gguf") for f in path.glob(pattern))


def gpu_memory(t: Target, found: list[dict[str, str]] | None) -> Check:
    """The weights (split over tp GPUs) and a KV pool must fit in what SGLang/vLLM may take of one GPU."""
    if not found:
        return Check("GPU memory", SKIP, "no GPU found")
    try:
        _, path = model_dir(t)
    except Exception:                 # noqa: BLE001 - the model check reports it
        path = None
    if path is None or not path.is_dir():
        return Check("GPU memory", SKIP, "no checkpoint to size")
    configured = t.settings.sglang.mem_fraction_static if t.settings else None
    fraction = configured or 0.85 if t.engine == "sglang" else 0.9
    free = min(int(g["free_mib"]) for g in found) * 2**20
    usable = fraction * min(int(g["total_mib"]) for g in found) * 2**20
    weights = weights_bytes(path) / max(1, t.tp)
    kv_floor = 2 * 2**30          # room for a KV pool worth running: a couple of GiB at least
    found_s = f"weights {weights / 2**30:.1f} GiB per GPU; {fraction:.2f} of {usable / fraction / 2**30:.0f} GiB " \
              f"usable, {free / 2**30:.0f} GiB free"
    if weights + kv_floor > min(usable, free):
        return Check("GPU memory", FAIL, found_s, "a GPU with more memory, --tp N over more GPUs, a smaller (or "
                     "quantized) model, or free the GPU of other processes")
    return Check("GPU memory", OK, f"{found_s}; KV pool ~{(min(usable, free) - weights) / 2**30:.0f} GiB")


def database(t: Target) -> Check:
    settings = t.settings
    if settings is None:
        return Check("database", SKIP, "no settings to find it by")
    try:
        import sqlalchemy as sa

        if not settings.database_url:
            settings.data_dir.mkdir(parents=True, exist_ok=True)     # every role creates it at start too
        engine = sa.create_engine(settings.db_url)
        with engine.connect() as c:
            c.execute(sa.text("SELECT 1"))
        engine.dispose()
    except Exception as e:            # noqa: BLE001 - any failure to connect is the finding
        return Check("database", FAIL, str(e).splitlines()[0][:300],
                     "check BLENDSERVE_DATABASE_URL (host, credentials) and that the database is up")
    return Check("database", OK, engine.url.render_as_string(hide_password=True))


def server(t: Target) -> Check:
    """The engine server answers, and what it says of its running cap, KV pool and priorities."""
    import asyncio

    import httpx

    from blendserve.worker.engines.server.discovery import discover
    from blendserve.worker.engines.server.engine import base_url

    if not t.url:
        return Check("engine server", FAIL, "no server URL", "--url http://server:port or BLENDSERVE_SERVER_URL")

    async def ask():
        async with httpx.AsyncClient(base_url=base_url(t.url), timeout=10.0) as client:
            return await discover(client, "", t.model)

    try:
        info = asyncio.run(ask())
    except Exception as e:            # noqa: BLE001 - unreachable, refused, no such model: the finding
        return Check("engine server", FAIL, f"{t.url}: {type(e).__name__}: {e}"[:300],
                     "start the server (README: SGLang and vLLM servers) or fix --url")
    found = (f"{info.kind} at {t.url}: {info.model}, running cap {info.running_cap or 'unpublished'}, "
             f"KV {info.kv_tokens or 'unpublished'} tokens, priorities {'on' if info.priorities else 'off'}")
    if info.kind == "sglang" and not info.priorities:
        return Check("engine server", WARN, found, "start sglang.launch_server with --enable-priority-scheduling "
                     "so interactive requests go ahead of queued batch work")
    if info.kind == "vllm" and not info.running_cap:
        return Check("engine server", WARN, found, "VLLM_SERVER_DEV_MODE=1 publishes vLLM's max_num_seqs "
                     "(/server_info); without it the worker's window is bounded by the KV capacity")
    return Check("engine server", OK, found)


def on_gpu(t: Target) -> bool:
    return t.engine in GPU_ENGINES and t.device != "cpu"


def checks(t: Target, p: Probes | None = None) -> list[Check]:
    """Every check for the target's engine, in the order a first run meets them."""
    p = p or Probes()
    out: list[Check] = []
    if t.engine in GPU_ENGINES:
        out.append(python_version(t, p))
        if t.before_install:
            out.append(venv_module(t, p))
    found = gpus(p) if on_gpu(t) else None
    if on_gpu(t):
        out += [driver(t, p, found), c_compiler(t, p), nvcc(t, p, found), libnuma(t, p)]
    if t.before_install:
        return out
    if t.engine in GPU_ENGINES:
        out.append(engine_import(t, p))
    if t.engine != "openai":
        out.append(model(t))
    if on_gpu(t):
        out.append(gpu_memory(t, found))
    out.append(database(t))
    if t.engine == "openai":
        out.append(server(t))
    return out


def table(rows: list[Check]) -> str:
    """One line per check: status, name, what was found, and the fix where one is needed."""
    width = max(len(r.name) for r in rows)
    lines = []
    for r in rows:
        lines.append(f"{r.status:<4}  {r.name:<{width}}  {r.found}")
        if r.fix and r.status in (FAIL, WARN):
            lines.append(f"{'':<4}  {'':<{width}}  fix: {r.fix}")
    return "\n".join(lines)


def target_from(args: argparse.Namespace, settings: Settings | None = None) -> Target:
    """The target: the flags, the worker's own flags (--worker-args: `worker --engine ... --model ...`, as the
    worker image's entry point passes them), then the BLENDSERVE_* settings (all but before install)."""
    engine, model, url, tp = args.engine, args.model, args.url, args.tp
    if args.worker_args:
        w = argparse.ArgumentParser(add_help=False)
        for flag in ("--engine", "--model", "--url", "--tp"):
            w.add_argument(flag)
        known, _ = w.parse_known_args([a for a in args.worker_args if a != "worker"])
        engine, model, url = engine or known.engine, model or known.model, url or known.url
        tp = tp or (int(known.tp) if known.tp else None)
    t = Target(engine=engine or "cpu", python=args.python or sys.executable, model=model or "", url=url or "",
               tp=tp or 1, before_install=args.before_install)
    if not t.before_install:
        if settings is None:
            raise SystemExit("blendserve doctor: the checks past --before-install need the deployment's settings; "
                             "run `blendserve doctor`")
        s = t.settings = settings
        if t.engine == "sglang":
            t.device, t.attention_backend = s.sglang.device, s.sglang.attention_backend
        t.url = t.url or s.server_engine.url
        t.tp = tp or s.tp
    return t


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="blendserve doctor", description=__doc__.split("\n")[0])
    p.add_argument("--engine", choices=("cpu", "sglang", "vllm", "openai", "echo"),
                   help="the worker's engine (default: --worker-args', else cpu)")
    p.add_argument("--model", help="served model name or checkpoint path")
    p.add_argument("--url", help="the engine server (openai engine)")
    p.add_argument("--tp", type=int, help="tensor-parallel GPUs")
    p.add_argument("--python", help="the interpreter the engine runs in (default: this one)")
    p.add_argument("--before-install", action="store_true",
                   help="only the system checks, with the standard library (before pip installs anything)")
    p.add_argument("--worker-args", nargs=argparse.REMAINDER, default=[],
                   help="a worker's command line (`worker --engine sglang --model M`): check for it")
    return p


def main(argv: list[str], settings: Settings | None = None, probes: Probes | None = None) -> int:
    """`blendserve doctor`: ``settings`` are the deployment's, parsed by blendserve/cli.py (None: before install
    alone)."""
    args = parser().parse_args(argv)
    t = target_from(args, settings)
    rows = checks(t, probes or Probes(env=dict(os.environ)))
    print(f"blendserve doctor: engine {t.engine}" + (" (before install)" if t.before_install else ""))
    print(table(rows))
    failed = [r.name for r in rows if r.status == FAIL]
    print(f"{len(failed)} check(s) failed: {', '.join(failed)}" if failed else "every check passed")
    return 1 if failed else 0


if __name__ == "__main__":
    # `python3 -m blendserve.doctor --before-install` runs with the standard library alone; past that, the
    # settings are parsed by the `blendserve` entry point.
    if "--before-install" in sys.argv[1:]:
        raise SystemExit(main(sys.argv[1:]))
    from blendserve.cli import main as blendserve

    raise SystemExit(blendserve(["doctor", *sys.argv[1:]]))
