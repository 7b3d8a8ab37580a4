"""The one command a new user runs: `blendserve serve` with the real SmolLM2 on the CPU."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from blendserve.core.config import SMOLLM2
from blendserve.core.embedstore import MINILM
from examples.run_batch import run_batch as run_readme_example
from tests.live import free_port, read_lines, run_batch


def test_serve_answers_with_smollm2(tmp_path, smollm2_models):
    data = tmp_path / "data"
    data.mkdir()
    (data / "models").symlink_to(smollm2_models)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLENDSERVE_")}
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "blendserve", "serve", "--port", str(port), "--data-dir",
                             str(data), "--host", "0.0.0.0"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        import openai

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list()] == [SMOLLM2, MINILM]    # the embedding model beside it
        rows = [{"custom_id": "paris", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": SMOLLM2, "temperature": 0, "max_tokens": 24,
                          "messages": [{"role": "user",
                                        "content": "Complete the sentence: The capital of France is"}]}}]
        b = run_batch(client, rows)
        assert b.status == "completed", b.errors
        answer = read_lines(client, b.output_file_id)[0]["response"]["body"]["choices"][0]["message"]["content"]
        assert "Paris" in answer
        b, output = run_readme_example(client, poll_s=0.2)     # README.md's sample file, through its snippet
        assert b.status == "completed" and b.request_counts.completed == len(output.splitlines()) >= 3, b.errors
        while True:     # the embedding worker answers once its row is read (within a second of its first beat)
            try:
                emb = client.embeddings.create(model=MINILM, input=["Paris", "France"])
                break
            except openai.APIStatusError as e:
                assert e.status_code == 503 and time.time() < deadline
                time.sleep(0.5)
        assert [len(d.embedding) for d in emb.data] == [384, 384]
        text = (tmp_path / "serve.log").read_text()
        assert "so on 127.0.0.1 only, not 0.0.0.0" in text          # no keys: loopback only, and it says so
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
