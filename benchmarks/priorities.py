"""A high batch submitted behind a long low one: its completion time with and without the priority.

Same deployment shape both ways (API, scheduler, one CPU worker, SmolLM2,
the default planner): a --low-requests batch starts; once it has results, a
--high-requests batch arrives. "with": the first is `low`, the second `high`;
"without": both are `normal`. Reported: the second batch's create -> completed
time, and the first batch's, each way.

    PYTHONPATH=. .venv/bin/python benchmarks/priorities.py
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.served import smollm2_checkpoint
from tests.harness.deployment import Deployment, jsonl, wait_batch


def rows(n: int, tag: str, max_tokens: int) -> list[dict]:
    return [{"custom_id": f"{tag}{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": SMOLLM2, "max_tokens": max_tokens, "temperature": 0,
                      "messages": [{"role": "user", "content": f"Tell me a fact about the number {i}."}]}}
            for i in range(n)]


def once(path: Path, low_n: int, high_n: int, priorities: tuple[str, str]) -> dict:
    d = Deployment(Path(tempfile.mkdtemp(prefix="bs-prio-")), "", f"{SMOLLM2}={path}", BLENDSERVE_LEASE_SECONDS="30")
    d.start_all()
    try:
        c = d.client()

        def submit(r: list[dict], prio: str):
            f = c.files.create(file=("in.jsonl", jsonl(r)), purpose="batch")
            return c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                                    metadata={"priority": prio}), time.time()

        first, t_first = submit(rows(low_n, "low", 96), priorities[0])
        wait_batch(c, first.id, until=lambda b: b.request_counts.completed >= 1, timeout=600)
        second, t_second = submit(rows(high_n, "high", 32), priorities[1])
        second = wait_batch(c, second.id, timeout=3600)
        t_second_done = time.time()
        first = wait_batch(c, first.id, timeout=3600)
        return {"priorities": priorities, "second_s": round(t_second_done - t_second, 1),
                "first_s": round(time.time() - t_first, 1), "second_status": second.status,
                "first_status": first.status}
    finally:
        d.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--low-requests", type=int, default=400)
    ap.add_argument("--high-requests", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args()
    path = smollm2_checkpoint(Settings(data_dir=Path(tempfile.gettempdir()) / "bs-bench-models"))
    report = {"low_requests": args.low_requests, "high_requests": args.high_requests,
              "with": once(path, args.low_requests, args.high_requests, ("low", "high")),
              "without": once(path, args.low_requests, args.high_requests, ("normal", "normal"))}
    report["speedup_of_high"] = round(report["without"]["second_s"] / report["with"]["second_s"], 2)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"priorities-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
