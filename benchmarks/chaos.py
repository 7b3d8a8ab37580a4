"""Chaos at full length: roles (or the engine's server) stopped at random while a batch runs; one JSON line.

tests/harness/chaos.py says what is stopped and what is checked; tests/reliability/test_chaos.py runs a
short version in CI.

    python -m benchmarks.chaos --backend sqlite --stops 20 --requests 500
    python -m benchmarks.chaos --backend postgresql --workers 2 --schedulers 2 --stops 20 --requests 500
    scripts/setup_vllm.sh .venv-vllm/bin/python -m benchmarks.chaos --engine-server vllm --server-kills 5 \\
        --requests 200 --max-tokens 32
"""
from __future__ import annotations

import argparse
import tempfile
from dataclasses import asdict
from pathlib import Path

from benchmarks.harness import emit
from tests.harness.chaos import run_chaos, run_server_kills


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--stops", type=int, default=20)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--schedulers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--gap", type=float, nargs=2, default=(2.0, 6.0), metavar=("MIN_S", "MAX_S"),
                    help="seconds between stops, drawn uniformly")
    ap.add_argument("--max-batch", type=int, help="BLENDSERVE_CPU_MAX_BATCH: a smaller batch makes a longer run")
    ap.add_argument("--engine-server", choices=("vllm",),
                    help="stop the engine server instead: a worker with --engine openai in front of it")
    ap.add_argument("--server-kills", type=int, default=5, help="with --engine-server: SIGKILLs of the server")
    ap.add_argument("--max-num-seqs", type=int, default=16, help="with --engine-server: the server's running cap")
    ap.add_argument("--models-dir", type=Path, help="with --engine-server: where SmolLM2's checkpoint is (made)")
    ap.add_argument("--out", type=Path, help="append the report as one JSON line")
    args = ap.parse_args()
    from blendserve.core.modelstore import build_tiny_model

    tmp = Path(tempfile.mkdtemp(prefix="bs-chaos-"))
    if args.engine_server:
        from blendserve.core.config import SMOLLM2
        from blendserve.core.modelstore import ensure_checkpoint, smollm2_gguf_path

        checkpoint = ensure_checkpoint(smollm2_gguf_path(), args.models_dir or tmp / "models")
        rep = run_server_kills(tmp / "data", SMOLLM2, checkpoint, args.backend, args.requests, args.server_kills,
                               args.seed, args.max_tokens, args.max_num_seqs)
        emit({**asdict(rep), "whole": rep.whole, "max_num_seqs": args.max_num_seqs}, args.out)
        return
    tiny = build_tiny_model(tmp / "tiny")
    rep = run_chaos(tmp / "data", f"tiny-llama={tiny}", args.backend, args.requests, args.stops, args.workers,
                    args.schedulers, args.seed, args.max_tokens, tuple(args.gap),
                    **({"BLENDSERVE_CPU_MAX_BATCH": str(args.max_batch)} if args.max_batch else {}))
    emit({**asdict(rep), "survived": rep.survived, "max_batch": args.max_batch, "gap_s": args.gap}, args.out)


if __name__ == "__main__":
    main()
