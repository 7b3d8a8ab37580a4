"""Run a batch file through BlendServe with the OpenAI SDK: upload, create the batch, poll it, download.

    .venv/bin/python examples/run_batch.py [FILE]     # FILE: examples/batch.jsonl unless given

The server is http://127.0.0.1:8000/v1 (`scripts/serve.sh`) unless OPENAI_BASE_URL names another; a key
is needed only where the server sets BLENDSERVE_API_KEYS (OPENAI_API_KEY). The same code runs on OpenAI.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from openai import OpenAI
from openai.types import Batch

SAMPLE = Path(__file__).with_name("batch.jsonl")
DONE = ("completed", "failed", "expired", "cancelled")


def run_batch(client: OpenAI, path: Path = SAMPLE, poll_s: float = 2.0) -> tuple[Batch, str]:
    """Submit `path` as a chat-completions batch, wait for it to end, and return it with its output file."""
    with path.open("rb") as f:
        upload = client.files.create(file=f, purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    while batch.status not in DONE:
        time.sleep(poll_s)
        batch = client.batches.retrieve(batch.id)
    output = client.files.content(batch.output_file_id).text if batch.output_file_id else ""
    return batch, output


def main() -> None:
    client = OpenAI(base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
                    api_key=os.environ.get("OPENAI_API_KEY", "unused"))
    batch, output = run_batch(client, Path(sys.argv[1]) if len(sys.argv) > 1 else SAMPLE)
    print(f"{batch.id}: {batch.status}, {batch.request_counts.completed} completed, "
          f"{batch.request_counts.failed} failed", file=sys.stderr)
    print(output, end="")


if __name__ == "__main__":
    main()
