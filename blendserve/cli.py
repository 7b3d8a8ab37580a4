"""`blendserve`: run the whole service, or one role of it, or the planner simulator.

`serve` is the embedded default: it prepares the database and the models once,
then runs the API, the scheduler and a CPU worker per served model (SmolLM2, and
all-MiniLM-L6-v2 for /v1/embeddings) as supervised child processes sharing one
data dir (a role that dies is restarted).

Settings are parsed once, here, and handed down: `serve` writes what it parsed
to a settings file in the data dir and starts each role with `--settings FILE`,
so a role (and a role restarted) runs with the settings `serve` started with.

SIGTERM or SIGINT stops every role cleanly (the worker hands its unfinished
work back, the scheduler releases its lease); a role still running after
STOP_GRACE_S is killed, which loses nothing either (every role is crash-safe),
so `serve` always returns within about ten seconds.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from blendserve.core.config import PLANNERS, Settings
from blendserve.core.heap import freeze_startup_heap
from blendserve.core.logs import configure as configure_logging
from blendserve.process import (
    SETTINGS_FILE,
    exit_now,
    load_settings,
    run_until_signal,
    stop_children,
    stop_on_signal,
    write_settings,
)

log = logging.getLogger("blendserve")

# Set for `serve` and its roles (and a worker started alone) unless already set: the progress bars and load
# reports of the model libraries, which a role's one start line replaces.
QUIET_START = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}
# Set for a worker unless already set: it loads checkpoints from local directories, so the engines (vLLM's
# loader looks a path's files up on the hub otherwise) never ask the network.
WORKER_LIBRARIES = {**QUIET_START, "HF_HUB_OFFLINE": "1"}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="data directory (SQLite database, files, converted models); "
                                      "default ./blendserve-data or $BLENDSERVE_DATA_DIR")
    p.add_argument("--database-url", help="SQLAlchemy URL; default SQLite in the data dir")
    p.add_argument("--settings", type=Path, help="a settings file (JSON, as `serve` writes for its roles) in "
                                                 "place of the BLENDSERVE_* variables")


def _host(settings: Settings, host: str) -> str:
    """The address to bind: loopback only without API keys (the API role's start line says so)."""
    if not settings.api_keys and host not in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    return host


def cmd_api(args: argparse.Namespace, s: Settings) -> int:
    import uvicorn

    from blendserve.api import doors
    from blendserve.api.app import create_app

    host = _host(s, args.host)
    # In JSON mode uvicorn's own loggers go through the root handler (blendserve/core/logs.py) too. Its four start-up
    # lines say less than the role's one line below; a failure to bind is still logged (an error).
    own = {"log_config": None} if s.log_format == "json" else {}
    app = create_app(s)
    freeze_startup_heap()
    logging.getLogger("httpx").setLevel(logging.WARNING)     # one INFO line per chat passed to a worker
    if s.api_keys:
        log.info("api listening on http://%s:%d/v1", host, args.port)
    else:
        log.warning("api listening on http://%s:%d/v1 without auth: no BLENDSERVE_API_KEYS set, so on %s only%s",
                    host, args.port, host, f", not {args.host}" if host != args.host else "")
    # httptools with bounds on a request's head (blendserve/api/doors.py): httptools alone has none.
    config = uvicorn.Config(app, host=host, port=args.port, log_level=args.log_level.lower(),
                            timeout_graceful_shutdown=5, http=doors.protocol(s.limit), **own)
    if logging.getLogger().level > logging.DEBUG:       # --log-level DEBUG keeps uvicorn's start-up lines
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    uvicorn.Server(config).run()
    return 0


def cmd_scheduler(args: argparse.Namespace, s: Settings) -> int:
    from blendserve.scheduler.service import Scheduler

    if args.planner:
        s.planner = args.planner
    code = 1
    try:
        scheduler = Scheduler(s)
        freeze_startup_heap()
        code = run_until_signal(scheduler.run)
    except BaseException:
        log.exception("the scheduler failed")
    finally:
        exit_now(code)
    return code


def cmd_worker(args: argparse.Namespace, s: Settings) -> int:
    for var, value in WORKER_LIBRARIES.items():     # a worker started alone says one line too (before the
        os.environ.setdefault(var, value)           # imports: transformers reads its variables when imported)
    from blendserve.core.embedstore import is_embedding_checkpoint
    from blendserve.core.served import model_paths
    from blendserve.worker.engines import load_engine
    from blendserve.worker.engines.sglang_embed import MODEL_PACKAGE
    from blendserve.worker.service import WorkerService

    if args.tp:
        s.tp = args.tp
    if args.url:
        s.server_engine.url = args.url
    paths = model_paths(s)
    name = args.model or next(iter(paths))
    path = paths.get(name) or Path(name)
    if args.engine == "sglang" and is_embedding_checkpoint(path):
        # SGLang's spawned scheduler reads its model classes' package from the environment alone: ours holds
        # the BertModel with sentence-transformers' pooling (worker/engines/sglang_embed.py).
        os.environ.setdefault("SGLANG_EXTERNAL_MODEL_PACKAGE", MODEL_PACKAGE)
    if args.ranks > 1 and args.engine != "echo":
        raise SystemExit("blendserve worker: --ranks > 1 is for the echo engine (load tests); "
                         "run one process per GPU otherwise")
    engines = [load_engine(args.engine, path, name if name in paths else path.name, s) for _ in range(args.ranks)]
    try:
        services = [WorkerService(s, e, args.engine, model_path=path if path.is_dir() else None, rank=i)
                    for i, e in enumerate(engines)]

        def run_all(stop: threading.Event) -> None:
            threads = [threading.Thread(target=w.run, args=(stop,), name=f"rank{i}") for i, w in enumerate(services)]
            for t in threads:
                t.start()
            # Joined with a timeout: Python runs signal handlers only in the main thread, and a signal
            # the kernel delivered to another thread never wakes a main thread blocked in a plain join().
            for t in threads:
                while t.is_alive():
                    t.join(0.2)

        code = 1
        freeze_startup_heap()
        code = run_until_signal(run_all)
    except BaseException:
        log.exception("the worker failed")
    finally:
        try:
            for e in engines:
                e.close()
        finally:
            exit_now(code)     # also after an error: finalisation can hang (see exit_now)
    return code


def cmd_serve(args: argparse.Namespace, s: Settings) -> int:
    # The conversion's progress bars and transformers' load reports (here and in the roles, which inherit
    # them): the first-start line says what happens.
    for var, value in QUIET_START.items():
        os.environ.setdefault(var, value)
    from blendserve.core.embedstore import is_embedding_checkpoint
    from blendserve.core.served import first_start_work, model_paths
    from blendserve.migrations.upgrade import upgrade
    from blendserve.readiness import announce_when_ready, first_key

    if args.planner:
        s.planner = args.planner
    host = _host(s, args.host)
    upgrade(s.db_url, s)
    work = first_start_work(s)
    if work:
        print(f"blendserve: first start in {s.data_dir.resolve()}: {' and '.join(work)} (about half a minute)",
              file=sys.stderr)
    paths = model_paths(s)
    served = list(paths)
    base = [sys.executable, "-m", "blendserve", "--log-level", args.log_level]
    given = ["--settings", str(write_settings(s))]       # every role runs with what was parsed here
    roles = {
        "api": base + ["api", *given, "--host", args.host, "--port", str(args.port)],     # it says where it binds
        "scheduler": base + ["scheduler", *given],
        "worker": base + ["worker", *given, "--engine", "cpu"],
    }
    for name in served[1:]:     # one CPU worker per served model (the default: all-MiniLM-L6-v2 beside SmolLM2)
        roles[f"worker {name}"] = base + ["worker", *given, "--engine", "cpu", "--model", name]
    stopping = threading.Event()
    stop_on_signal(stopping)       # before the children exist: a stop now must not orphan them
    procs = {name: subprocess.Popen(cmd) for name, cmd in roles.items()}
    print(f"blendserve: starting {', '.join(roles)} (data in {s.data_dir.resolve()})", file=sys.stderr)
    chat = next((n for n, p in paths.items() if not is_embedding_checkpoint(p)), None)
    announce_when_ready(f"http://{host}:{args.port}/v1", chat, first_key(s.api_keys),
                        lambda line: print(f"blendserve: {line}", file=sys.stderr), stopping)
    while not stopping.wait(1.0):
        for name, p in procs.items():
            if p.poll() is not None and not stopping.is_set():
                print(f"blendserve: {name} exited with {p.returncode}; restarting it", file=sys.stderr)
                if not stopping.wait(1.0):
                    procs[name] = subprocess.Popen(roles[name])
    stop_children(list(procs.values()))
    (s.data_dir / SETTINGS_FILE).unlink(missing_ok=True)      # the keys it holds stay in the environment only
    return 0


def cmd_simulate(argv: list[str]) -> int:
    from blendserve.simulator.cli import main as simulate

    return simulate(argv)


CLIENT_COMMANDS = ("submit", "status", "cancel")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for sig in (signal.SIGTERM, signal.SIGINT):     # a parent may have set SIG_IGN (a shell's background job)
        signal.signal(sig, signal.SIG_DFL if sig == signal.SIGTERM else signal.default_int_handler)
    if argv[:1] == ["simulate"]:
        return cmd_simulate(argv[1:])
    if argv[:1] == ["doctor"]:
        from blendserve.doctor import main as doctor

        return doctor(argv[1:], load_settings())
    if argv[:1] == ["estimate"]:
        from blendserve.estimate import main as estimate

        return estimate(argv[1:], load_settings())
    if argv[:1] and argv[0] in CLIENT_COMMANDS:
        from blendserve.client import main as client

        return client(argv[0], argv[1:], os.environ)
    args = parser().parse_args(argv)
    settings = load_settings(args.settings, args.data_dir, args.database_url)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    configure_logging(args.log_level, settings.log_format)
    return args.fn(args, settings)


def parser() -> argparse.ArgumentParser:
    """The roles' flags (simulate, estimate, doctor and the client commands parse their own)."""
    parser = argparse.ArgumentParser(prog="blendserve", description=__doc__.split("\n")[0])
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name, fn, helptext in (("serve", cmd_serve, "API + scheduler + a CPU worker per model (embedded default)"),
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
            p.add_argument("--planner", choices=PLANNERS, help="execution order policy (dfs and fcfs: baselines)")
        if name == "worker":
            p.add_argument("--engine", default="cpu", choices=("cpu", "sglang", "vllm", "openai", "echo"),
                           help="openai: a running vLLM/SGLang server (--url); "
                                "echo: a stand-in with an engine's timing and no model, for load tests")
            p.add_argument("--url", help="the server the openai engine sends to, e.g. http://vllm:8000 "
                                         "(or $BLENDSERVE_SERVER_URL)")
            p.add_argument("--ranks", type=int, default=1, help="data-parallel ranks in this process (echo only)")
            p.add_argument("--model", help="served model name, or a checkpoint path (GPU engines)")
            p.add_argument("--tp", type=int, help="tensor-parallel GPUs for this worker (GPU engines)")
    sub.add_parser("simulate", help="the BlendServe planner simulator (see `blendserve simulate --help`)")
    for name, helptext in (("submit", "upload a JSONL file and create a batch (--wait: progress, then download; "
                                      "--follow: the finished lines as they come)"),
                           ("status", "show one batch, or the most recent ones"),
                           ("cancel", "cancel a batch"),
                           ("estimate", "run time, tokens/s and GPU-hours of a batch file, before it runs"),
                           ("doctor", "check what an engine's first run needs (Python, driver, nvcc, model, "
                                      "database, server), with the fix for each failure")):
        sub.add_parser(name, help=f"{helptext}; see `blendserve {name} --help`")
    return parser
