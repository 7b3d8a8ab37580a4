"""`blendserve`: run the whole service, or one role of it, or the planner simulator.

`serve` is the embedded default: it prepares the database and the model once,
then runs the API, the scheduler and one CPU worker as three supervised child
processes sharing one data dir (a role that dies is restarted).
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time

from core.config import Settings, get_settings
from core.logs import configure as configure_logging

log = logging.getLogger("blendserve")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="data directory (SQLite database, files, converted models); "
                                      "default ./blendserve-data or $BLENDSERVE_DATA_DIR")
    p.add_argument("--database-url", help="SQLAlchemy URL; default SQLite in the data dir")


def _settings(args: argparse.Namespace) -> Settings:
    """CLI flags become BLENDSERVE_* variables, so child processes see the same settings."""
    if args.data_dir:
        os.environ["BLENDSERVE_DATA_DIR"] = os.path.abspath(args.data_dir)
    if args.database_url:
        os.environ["BLENDSERVE_DATABASE_URL"] = args.database_url
    get_settings.cache_clear()
    s = get_settings()
    s.data_dir.mkdir(parents=True, exist_ok=True)
    return s


def _host(settings: Settings, host: str) -> str:
    if not settings.api_key_list() and host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("no BLENDSERVE_API_KEYS set, so binding to 127.0.0.1 instead of %s", host)
        return "127.0.0.1"
    if not settings.api_key_list():
        log.warning("no BLENDSERVE_API_KEYS set: serving without auth on 127.0.0.1 only")
    return host


def cmd_api(args: argparse.Namespace) -> int:
    import uvicorn

    from server.app import create_app

    s = _settings(args)
    # In JSON mode uvicorn's own loggers go through the root handler (core/logs.py) too.
    own = {"log_config": None} if os.environ.get("BLENDSERVE_LOG_FORMAT", "").lower() == "json" else {}
    uvicorn.run(create_app(s), host=_host(s, args.host), port=args.port, log_level=args.log_level.lower(), **own)
    return 0


def _run_until_signal(run) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run(stop)
    return 0


def cmd_scheduler(args: argparse.Namespace) -> int:
    from scheduler.service import Scheduler

    s = _settings(args)
    if args.planner:
        s.planner = args.planner
    return _run_until_signal(Scheduler(s).run)


def cmd_worker(args: argparse.Namespace) -> int:
    from pathlib import Path

    from core.served import model_paths
    from worker.engines import load_engine
    from worker.service import WorkerService

    s = _settings(args)
    if args.tp:
        s.tp = args.tp
    paths = model_paths(s)
    name = args.model or next(iter(paths))
    path = paths.get(name) or Path(name)
    engine = load_engine(args.engine, path, name if name in paths else path.name, s)
    try:
        return _run_until_signal(WorkerService(s, engine, args.engine).run)
    finally:
        engine.close()


def cmd_serve(args: argparse.Namespace) -> int:
    from core.migrate import upgrade
    from core.served import model_paths

    s = _settings(args)
    host = _host(s, args.host)
    upgrade(s.db_url)
    print("blendserve: preparing models (the first start converts SmolLM2, about half a minute)...", file=sys.stderr)
    model_paths(s)
    base = [sys.executable, "-m", "blendserve", "--log-level", args.log_level]
    roles = {
        "api": base + ["api", "--host", host, "--port", str(args.port)],
        "scheduler": base + ["scheduler"] + (["--planner", args.planner] if args.planner else []),
        "worker": base + ["worker", "--engine", "cpu"],
    }
    procs = {name: subprocess.Popen(cmd) for name, cmd in roles.items()}
    print(f"blendserve: serving on http://{host}:{args.port}/v1 (data in {s.data_dir.resolve()})", file=sys.stderr)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    while not stopping.wait(1.0):
        for name, p in procs.items():
            if p.poll() is not None:
                print(f"blendserve: {name} exited with {p.returncode}; restarting it", file=sys.stderr)
                time.sleep(1.0)
                procs[name] = subprocess.Popen(roles[name])
    for p in procs.values():
        p.terminate()
    for p in procs.values():
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
    return 0


def cmd_simulate(argv: list[str]) -> int:
    from scheduler.simulator.cli import main as simulate

    return simulate(argv)


CLIENT_COMMANDS = ("submit", "status", "cancel")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["simulate"]:
        return cmd_simulate(argv[1:])
    if argv[:1] == ["estimate"]:
        from blendserve.estimate import main as estimate

        return estimate(argv[1:])
    if argv[:1] and argv[0] in CLIENT_COMMANDS:
        from blendserve.client import main as client

        return client(argv[0], argv[1:])
    parser = argparse.ArgumentParser(prog="blendserve", description=__doc__.split("\n")[0])
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name, fn, helptext in (("serve", cmd_serve, "API + scheduler + one CPU worker (embedded default)"),
                               ("api", cmd_api, "the HTTP API alone"),
                               ("scheduler", cmd_scheduler, "the scheduler alone"),
                               ("worker", cmd_worker, "one worker (one GPU or CPU engine)")):
        p = sub.add_parser(name, help=helptext)
        _common(p)
        p.set_defaults(fn=fn)
        if name in ("serve", "api"):
            p.add_argument("--host", default="127.0.0.1")
            p.add_argument("--port", type=int, default=8000)
        if name in ("serve", "scheduler"):
            p.add_argument("--planner", choices=("fcfs", "blendserve"), help="execution order policy")
        if name == "worker":
            p.add_argument("--engine", default="cpu", choices=("cpu", "sglang", "vllm"))
            p.add_argument("--model", help="served model name, or a checkpoint path (GPU engines)")
            p.add_argument("--tp", type=int, help="tensor-parallel GPUs for this worker (GPU engines)")
    sub.add_parser("simulate", help="the BlendServe planner simulator (see `blendserve simulate --help`)")
    for name, helptext in (("submit", "upload a JSONL file and create a batch (--wait: progress, then download)"),
                           ("status", "show one batch, or the most recent ones"),
                           ("cancel", "cancel a batch"),
                           ("estimate", "run time, tokens/s and GPU-hours of a batch file, before it runs")):
        sub.add_parser(name, help=f"{helptext}; see `blendserve {name} --help`")
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    return args.fn(args)
