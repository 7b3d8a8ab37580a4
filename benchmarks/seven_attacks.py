"""The seven attacks of a hostile tenant, each beside another tenant's steady work, on the embedded CPU engine.

Two tenants (`mallory`, `alice`) on one deployment (API, scheduler, one CPU worker with SmolLM2; SQLite; a 5 MB
stored-bytes quota). Alice's work in every round: a short chat every `--chat-every` seconds and one batch of
`--batch-lines` chats. A round alone gives her baseline; then one round per attack, Mallory attacking from the
moment Alice's batch is created until it ends:

1. `vocab`: prompts of token ids past the vocabulary (`[1, 60000]`) and past int32, interactive and as batch lines.
2. `patterns`: patterns Python accepts and xgrammar refuses (`(a)\\1`, `\\bx\\b`), interactive and as batch lines.
3. `grammars`: compile bombs, each schema made new per request so no cache helps: an enum of 60,000 strings,
   128 tools of 150 parameters with `tool_choice: "required"`, an `anyOf` of 1,000 branches, 20,000 properties,
   `[\\s\\S]{0,20000}`.
4. `long_prompts`: three concurrent chats of ~7,000 distinct prompt tokens with `max_tokens: 1`, repeated.
5. `abandoned`: waves of 110 non-streaming chats of `max_tokens: 2000` whose callers hang up after 3 s.
6. `headers`: unauthenticated request heads of one 150-200 MB header line, two at a time, on raw sockets.
7. `quota`: waves of 10 concurrent 4.4 MB uploads whose heads all arrive before any body ends.

The rate of each is the attack as a tenant would run it, not a flood (a flood's own CPU, on the machine the
service runs on, is not a tenant's to measure): 1-3 from four callers one request a second each (and 40 lines,
5 for 3, as one batch file), 4 back to back, 5 a wave every 5 s, 6 a pair every 0.5 s, 7 a wave every 5 s.
Mallory runs in a process of her own, started before the round, so her imports and bodies cost Alice nothing.

Reported per attack (one JSON line, also appended to benchmarks/results/seven_attacks.jsonl): Alice's chat p99 and
batch time against her baseline (goals: <= 2x and <= 1.25x), anything that failed for her, and Mallory's answers by
status (each hostile request its own 4xx or error line), with the API's RSS growth and answer time for `headers`
and the most stored at once for `quota`.

    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.seven_attacks
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from benchmarks.attacks import ATTACKS, KEYS, Target, attack_process
from benchmarks.hostile_fuzz import alice_chats
from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.served import smollm2_checkpoint
from tests.harness.deployment import Deployment, chat_lines, jsonl, wait_batch

COMMIT = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def cpu_s(d: Deployment) -> dict[str, float]:
    """CPU-seconds each role's process has used so far."""
    out = {}
    for name, p in d.procs.items():
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out[name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def alice_round(d: Deployment, args: argparse.Namespace, attack: str | None) -> dict:
    """Alice's chats and her batch; Mallory's `attack`, in a process of its own, from the batch's create until
    its end."""
    chats: list = []
    stop = threading.Event()
    spawn = multiprocessing.get_context("spawn")
    go, halt, out = spawn.Event(), spawn.Event(), spawn.Queue()
    m = spawn.Process(target=attack_process, args=(attack, Target(d.base_url, d.port, d.procs["api"].pid),
                                                   go, halt, out)) if attack else None
    if m:
        m.start()
        assert out.get(timeout=120) == "ready"           # its start-up is not part of the round
    cpu0 = cpu_s(d)
    t = threading.Thread(target=alice_chats, args=(d.base_url, stop, args.chat_every, chats), daemon=True)
    t.start()
    c = d.client(KEYS["alice"])
    rows = chat_lines(args.batch_lines, SMOLLM2, max_tokens=args.batch_tokens, prefix=f"{time.time_ns()} ")
    f = c.files.create(file=("alice.jsonl", jsonl(rows)), purpose="batch")
    t0 = time.perf_counter()
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    go.set()
    b = wait_batch(c, b.id, timeout=3600, every=0.25)
    batch_s = time.perf_counter() - t0
    stop.set()
    halt.set()
    t.join()
    mallory = out.get(timeout=600) if m else {}
    if m:
        m.join(60)
    cpu = {k: round(v - cpu0.get(k, 0), 1) for k, v in cpu_s(d).items()}
    lat = sorted(s for code, s in chats if code == 200)
    return {"chats": len(chats), "chat_failed": dict(Counter(code for code, _ in chats if code != 200)),
            "chat_p50_s": round(statistics.median(lat), 3) if lat else None,
            "chat_p99_s": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 3) if lat else None,
            "batch_status": b.status, "batch_completed": b.request_counts.completed,
            "batch_failed": b.request_counts.failed, "batch_s": round(batch_s, 2), "cpu_s": cpu, "mallory": mallory}


def deployment(tmp: Path) -> Deployment:
    keys = ",".join(f"{t}:{k}" for t, k in KEYS.items())
    return Deployment(tmp, "", f"{SMOLLM2}={smollm2_checkpoint(Settings())}", BLENDSERVE_API_KEYS=keys,
                      BLENDSERVE_QUOTA_STORED_BYTES="5000000", BLENDSERVE_POLL_INTERVAL_S="0.2",
                      BLENDSERVE_PLAN_MAX_WAIT_S="1.0", BLENDSERVE_LEASE_SECONDS="30",
                      BLENDSERVE_CHUNK_REQUESTS="32")


def verdict(alone: dict, rounds: list[dict]) -> dict:
    """The medians of Alice's chat p99 and batch time against her baseline's, and all that failed for her."""
    p99 = statistics.median(r["chat_p99_s"] or 0 for r in rounds)
    chat = p99 / alone["chat_p99_s"] if alone["chat_p99_s"] and p99 else None
    batch = statistics.median(r["batch_s"] for r in rounds) / alone["batch_s"]
    failed = sum(sum(r["chat_failed"].values()) + r["batch_failed"] + (r["batch_status"] != "completed")
                 for r in rounds)
    return {"chat_p99_ratio": round(chat, 2) if chat else None, "batch_ratio": round(batch, 2),
            "alice_failed": failed, "met": bool(chat and chat <= 2.0 and batch <= 1.25 and not failed)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attacks", default=",".join(ATTACKS), help="comma-separated, of: " + ", ".join(ATTACKS))
    ap.add_argument("--repeats", type=int, default=1, help="rounds of each; the medians are reported")
    ap.add_argument("--batch-lines", type=int, default=128)
    ap.add_argument("--batch-tokens", type=int, default=64)
    ap.add_argument("--chat-every", type=float, default=0.5)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/seven_attacks.jsonl"))
    args = ap.parse_args()
    d = deployment(Path(tempfile.mkdtemp(prefix="bs-attacks-")))
    d.start_all()
    try:
        alice_round(d, args, None)                            # the engine warm, the model's pages in memory
        alone = [alice_round(d, args, None) for _ in range(args.repeats)]
        base = {"chat_p99_s": statistics.median(r["chat_p99_s"] for r in alone),
                "batch_s": statistics.median(r["batch_s"] for r in alone)}
        print(json.dumps({"alone": alone}), flush=True)
        for name in args.attacks.split(","):
            rounds = [alice_round(d, args, name) for _ in range(args.repeats)]
            row = {"attack": name, "commit": COMMIT, "alone": base, "rounds": rounds, **verdict(base, rounds),
                   "worker_alive": d.procs["worker"].poll() is None,
                   "engine_streams_failed": d.log("worker", tail=None).count("engine stream failed")}
            print(json.dumps(row), flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    finally:
        d.stop()


if __name__ == "__main__":
    main()
