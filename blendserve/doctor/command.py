"""`blendserve doctor`'s command: the target from the flags, the checks in the order a first run meets them,
and one table."""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from blendserve.core.config import Settings

from blendserve.doctor.probes import FAIL, GPU_ENGINES, WARN, Check, Probes, Target
from blendserve.doctor.service import database, engine_import, gpu_memory, model, server
from blendserve.doctor.system import c_compiler, driver, gpus, libnuma, nvcc, python_version, venv_module


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
    p = argparse.ArgumentParser(prog="blendserve doctor", description="What a worker's first run on an engine needs, "
                                "checked before it runs, in one table.")
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
