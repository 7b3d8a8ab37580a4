"""The openai engine against vLLM's real OpenAI server (CPU build, SmolLM2): the engine alone, then a whole
deployment whose worker fronts the server: a batch, an interactive stream, a cancel, and the server killed
mid-batch (every custom_id exactly once, none failed, no attempt charged)."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from blendserve.core.config import SMOLLM2
from blendserve.core.engine_settings import ServerEngineSettings
from blendserve.core.modelstore import load_tokenizer
from blendserve.worker.engines.base import GenRequest, GenResult, SamplingParams
from blendserve.worker.engines.logprobs import TokenNames
from blendserve.worker.engines.server import ServerEngine
from tests.feeding import assert_fed
from tests.harness.vllm_server import VllmServer, small_server_flags
from tests.live import Deployment, chat_lines, jsonl, read_lines, wait_batch
from tests.vllm.test_vllm_engine import SYSTEM, chat_ids

pytest.importorskip("vllm", reason="vllm is not installed in this interpreter (scripts/setup_vllm.sh installs it)")

GREEDY = SamplingParams(max_tokens=24, temperature=0.0)
NO_EOS = ((0, -100.0), (2, -100.0))     # SmolLM2's <|endoftext|> and <|im_end|>: generate to max_tokens
# The in-process engine's test shape (tests/vllm/conftest.py): 4 running sequences, 512 blocks of 32 tokens.
BLOCK_SIZE, NUM_BLOCKS = 32, 512


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, smollm2_checkpoint: Path) -> Iterator[VllmServer]:
    """One `vllm serve` for the module (about half a minute to start); the last test kills and restarts it.
    Its running cap is vLLM's own (no --max-num-seqs), published with VLLM_SERVER_DEV_MODE=1, and it runs
    vLLM's priority policy, as docs/engine-servers.md says to start it."""
    s = VllmServer([*small_server_flags(smollm2_checkpoint, SMOLLM2, None, NUM_BLOCKS, BLOCK_SIZE),
                    "--scheduling-policy", "priority"], tmp_path_factory.mktemp("vllm-serve") / "server.log")
    s.env["VLLM_SERVER_DEV_MODE"] = "1"
    s.start(timeout=400)
    yield s
    s.kill()


@pytest.fixture(scope="module")
def server_engine(server: VllmServer, smollm2_checkpoint: Path) -> Iterator[ServerEngine]:
    e = ServerEngine(SMOLLM2, ServerEngineSettings(url=f"{server.url}/v1"), smollm2_checkpoint)
    yield e
    e.close()


def run(engine: ServerEngine, requests: list[GenRequest], **kw) -> dict[int, GenResult]:
    return {r.key: r for r in engine.generate(requests, **kw)}


def test_the_server_tells_its_model_and_capacity(server_engine: ServerEngine) -> None:
    """The KV capacity comes from vLLM's /metrics (cache_config_info), the served name from /v1/models."""
    assert (server_engine.info.kind, server_engine.info.model) == ("vllm", SMOLLM2)
    assert server_engine.kv_capacity_tokens() == NUM_BLOCKS * BLOCK_SIZE
    assert server_engine.step_token_budget() == 2048 and server_engine.hardware() is None
    # vLLM's own cap, from its /server_info (vLLM 0.32 on CPU: 128 per rank), and its priority policy.
    config = httpx.get(f"{server_engine.url}/server_info?config_format=json", timeout=10).json()["vllm_config"]
    assert server_engine.info.running_cap == config["scheduler_config"]["max_num_seqs"] == 128
    assert server_engine.max_in_flight() == 256 and server_engine.info.priorities


def test_a_server_with_its_defaults_is_fed_and_a_chat_streams_mid_batch(server_engine: ServerEngine,
                                                                      smollm2_checkpoint: Path) -> None:
    """A batch three windows long (at most 400 requests) to a server started with vLLM's own running cap: the
    worker reads it and keeps it in flight, or all the server's KV pool holds; a chat sent mid-batch streams
    its answer (its start is printed: tests/feeding.py)."""
    assert_fed(server_engine, chat_ids(smollm2_checkpoint, "Complete the sentence: The capital of France is"),
               chat_ids(smollm2_checkpoint, "Name a colour.", SYSTEM), "vLLM")


def test_batch_greedy_output_finish_reasons_and_cached_tokens(server_engine: ServerEngine,
                                                               smollm2_checkpoint: Path) -> None:
    paris = chat_ids(smollm2_checkpoint, "Complete the sentence: The capital of France is")
    out = run(server_engine, [GenRequest(1, paris, SamplingParams(max_tokens=64, temperature=0.0)),
                       GenRequest(2, paris, SamplingParams(max_tokens=3, temperature=0.0)),
                       GenRequest(3, paris, SamplingParams(max_tokens=64, temperature=0.0, stop=("Paris",)))])
    assert "Paris" in out[1].text and out[1].finish_reason == "stop"
    assert out[2].finish_reason == "length" and out[2].completion_tokens == 3
    assert out[2].output_ids == out[1].output_ids[:3]
    assert out[3].finish_reason == "stop" and out[3].text == out[1].text[: out[1].text.index("Paris")]
    assert all(r.prompt_tokens == len(paris) for r in out.values())
    # A shared system prompt: vLLM's prefix cache serves it, and usage.prompt_tokens_details says so.
    questions = ["Why is the sky blue?", "What do bees make?", "What is ice?"]
    first = run(server_engine, [GenRequest(10, chat_ids(smollm2_checkpoint, questions[0], SYSTEM), GREEDY)])[10]
    rest = run(server_engine, [GenRequest(11 + i, chat_ids(smollm2_checkpoint, q, SYSTEM), GREEDY)
                        for i, q in enumerate(questions[1:])])
    prefix = len(chat_ids(smollm2_checkpoint, "", SYSTEM)) - 8
    assert first.cached_tokens < prefix
    for r in rest.values():
        assert r.cached_tokens % BLOCK_SIZE == 0 and prefix - BLOCK_SIZE <= r.cached_tokens <= r.prompt_tokens


def test_requests_are_sent_in_plan_order_within_the_window(server: VllmServer, smollm2_checkpoint: Path) -> None:
    """With room for 2 in flight, the engine never takes a request from the plan's stream while 2 wait for
    an answer (one more may be held, taken but not sent)."""
    small = ServerEngine(SMOLLM2, ServerEngineSettings(url=server.url, max_in_flight=2), smollm2_checkpoint)
    ids = chat_ids(smollm2_checkpoint, "Name a colour.")
    taken: list[int] = []
    gaps: list[int] = []

    def plan() -> Iterator[GenRequest]:
        for i in range(8):
            taken.append(i)
            yield GenRequest(i, ids, SamplingParams(max_tokens=6, temperature=0.0))

    try:
        done = []
        for r in small.generate(plan()):
            done.append(r.key)
            gaps.append(len(taken) - len(done))
    finally:
        small.close()
    assert sorted(done) == list(range(8))
    assert max(gaps) <= 2 and taken == list(range(8))


def test_interactive_request_is_streamed(server_engine: ServerEngine, smollm2_checkpoint: Path) -> None:
    """An urgent request goes out at once and its tokens reach on_tokens chunk by chunk, adding up to the
    result, which is the same greedy completion a batch request gets."""
    ids = chat_ids(smollm2_checkpoint, "Complete the sentence: The capital of France is")
    chunks: list[list[int]] = []
    pending = [GenRequest(-1, ids, SamplingParams(max_tokens=12, temperature=0.0), on_tokens=chunks.append)]
    out = run(server_engine, [], urgent=lambda: [pending.pop()] if pending else [])
    batch = run(server_engine, [GenRequest(1, ids, SamplingParams(max_tokens=12, temperature=0.0))])[1]
    assert len(chunks) > 2 and sum(chunks, []) == out[-1].output_ids == batch.output_ids
    assert out[-1].text == batch.text


def test_cancel_closes_the_request_on_the_server(server_engine: ServerEngine, server: VllmServer,
                                                 smollm2_checkpoint: Path) -> None:
    """A cancelled request's connection is closed and vLLM aborts it: its running count falls to 0 long
    before 4000 tokens could have been generated."""
    ids = chat_ids(smollm2_checkpoint, "Tell me a very long story.")
    stop = threading.Event()
    results: list[GenResult] = []
    long = GenRequest(1, ids, SamplingParams(max_tokens=4000, temperature=0.0, logit_bias=NO_EOS))
    t = threading.Thread(target=lambda: results.extend(server_engine.generate([long],
                                                                              cancelled=lambda k: stop.is_set())))
    t.start()
    deadline = time.time() + 60
    while server.metric("vllm:num_requests_running") < 1 and time.time() < deadline:
        time.sleep(0.2)
    assert server.metric("vllm:num_requests_running") == 1
    generated = server.metric("vllm:generation_tokens_total")
    stop.set()
    t.join(10)
    assert not t.is_alive() and results == []
    deadline = time.time() + 10
    while server.metric("vllm:num_requests_running") > 0 and time.time() < deadline:
        time.sleep(0.2)
    assert server.metric("vllm:num_requests_running") == 0
    assert server.metric("vllm:generation_tokens_total") - generated < 3000


def test_a_request_the_server_refuses_is_its_own_error_line(server_engine: ServerEngine,
                                                            smollm2_checkpoint: Path) -> None:
    """A 400 (prompt + max_tokens past the model's 8192-token context) fails that request alone, with the
    server's message; its neighbours run on."""
    ids = chat_ids(smollm2_checkpoint, "Name a colour.")
    out = run(server_engine, [GenRequest(1, ids, SamplingParams(max_tokens=6, temperature=0.0)),
                              GenRequest(2, ids, SamplingParams(max_tokens=9000, temperature=0.0)),
                              GenRequest(3, ids, SamplingParams(max_tokens=6, temperature=0.0))])
    assert out[2].error is not None and "400" in out[2].error and out[2].completion_tokens == 0
    assert out[1].error is None and out[3].error is None and out[1].output_ids == out[3].output_ids


def test_outputs_keep_the_schemas_key_order(server_engine: ServerEngine, smollm2_checkpoint: Path) -> None:
    from tests.vllm.test_vllm_features import assert_schema_order, ordered_requests

    ids = chat_ids(smollm2_checkpoint, "Fill in the form.")
    assert_schema_order(list(run(server_engine, ordered_requests(ids)).values()))


def _computed(server: VllmServer) -> float:
    """The server's own count of prompt tokens it prefilled (not served from its prefix cache), from /metrics."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:prompt_tokens_by_source_total{") and 'source="local_compute"' in line)


def test_n_choices_prefill_a_2000_token_prompt_once(server: VllmServer, server_engine: ServerEngine) -> None:
    """n = 8 on a 2,000-token prompt reaches the server as one request with n: 8, and its counters show about
    2,000 prompt tokens computed, not 16,000."""
    import random

    ids = [random.Random(9).randrange(100, 40000) for _ in range(2000)]    # shares no block with other tests
    before = _computed(server)
    out = run(server_engine, [GenRequest(9, ids, SamplingParams(max_tokens=4, temperature=1.0, seed=3, n=8))])
    computed = _computed(server) - before
    assert out[9].error is None and len(out[9].choices) == 7
    assert 2000 <= computed <= 2000 + 7 * BLOCK_SIZE, computed


def test_choices_logprobs_and_a_json_schema_reach_the_server(server_engine: ServerEngine,
                                                             smollm2_checkpoint: Path) -> None:
    """n choices come back as the result's choices, logprobs named by token id as the other engines name
    them (the k likeliest each), and a JSON schema constrains the output (vLLM's structured outputs)."""
    ids = chat_ids(smollm2_checkpoint, "Describe a cat in a few words.")
    schema = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                         "additionalProperties": False}, sort_keys=True, separators=(",", ":"))
    out = run(server_engine, [GenRequest(1, ids, SamplingParams(max_tokens=8, seed=1, n=3, logprobs=2,
                                                                logit_bias=NO_EOS)),
                              GenRequest(2, ids, SamplingParams(max_tokens=16, temperature=0.0, json_schema=schema,
                                                                strict_schema=True))])
    names = TokenNames(load_tokenizer(smollm2_checkpoint))
    first = out[1]
    every = [first, *first.choices]
    assert len(every) == 3 and first.completion_tokens == 24
    for c in every:
        assert len(c.output_ids) == 8 and c.logprobs is not None
        assert [e.token for e in c.logprobs] == [names.name(t)[0] for t in c.output_ids]
        assert all(len(e.top) == 2 and 0 >= e.top[0].logprob >= e.top[1].logprob and e.logprob <= 0
                   for e in c.logprobs)
    # Unconstrained, the model describes a cat; under the schema it starts the object the schema asks for.
    assert "".join(out[2].text.split()).startswith('{"ok":')


def test_top_p_zero_is_greedy_on_the_server(server_engine: ServerEngine, smollm2_checkpoint: Path) -> None:
    """`vllm serve` answers a top_p of 0 with a 400; the worker sends OpenAI's meaning as top_k 1."""
    paris = chat_ids(smollm2_checkpoint, "Complete the sentence: The capital of France is", SYSTEM)
    out = run(server_engine, [GenRequest(1, paris, SamplingParams(max_tokens=12, temperature=0.0)),
                              GenRequest(2, paris, SamplingParams(max_tokens=12, temperature=1.0, top_p=0.0))])
    assert out[2].error is None and out[2].output_ids == out[1].output_ids


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, smollm2_checkpoint: Path, server: VllmServer):
    # 4 in flight: the kill below lands mid-batch, as it would with a 4-sequence server.
    d = Deployment(tmp_path_factory.mktemp("bs-openai"), "", f"{SMOLLM2}={smollm2_checkpoint}",
                   BLENDSERVE_SERVER_HEALTH_INTERVAL_S="1", BLENDSERVE_SERVER_RETRY_MAX_S="1",
                   BLENDSERVE_SERVER_MAX_IN_FLIGHT="4")
    for role in ("api", "scheduler"):
        d.start(role)
    d.start("worker", None, "--engine", "openai", "--url", server.url)
    try:
        d.wait_ready(timeout=180)
        yield d
    finally:
        d.stop()


def test_interactive_chat_streams_through_the_service(deployment: Deployment) -> None:
    client = deployment.client()
    messages = [{"role": "user", "content": "Complete the sentence: The capital of France is"}]
    whole = client.chat.completions.create(model=SMOLLM2, messages=messages, max_tokens=12, temperature=0)
    deltas = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=SMOLLM2, messages=messages, max_tokens=12, temperature=0, stream=True) if c.choices]
    assert sum(bool(d) for d in deltas) > 2
    assert "".join(deltas) == whole.choices[0].message.content and "Paris" in whole.choices[0].message.content


def test_server_killed_mid_batch_loses_nothing(deployment: Deployment, server: VllmServer) -> None:
    """SIGKILL the server while the batch runs and start it again: the worker holds the requests it lost,
    sends them again once the server answers, and every custom_id comes out once, none failed, and no
    request was charged an attempt (a lost connection is the server's fault, not the request's)."""
    client = deployment.client()
    rows = chat_lines(24, SMOLLM2, max_tokens=96, prefix=SYSTEM, temperature=0,
                      logit_bias={str(t): b for t, b in NO_EOS})
    for row in rows[:4]:       # these finish first, while the rest are far from done when the server dies
        row["body"]["max_tokens"] = 8
    f = client.files.create(file=("input.jsonl", jsonl(rows)), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    mid = wait_batch(client, b.id, timeout=300, until=lambda x: x.request_counts.completed >= 2 or
                     x.status in ("completed", "failed"))
    server.kill()
    assert mid.status == "in_progress" and mid.request_counts.completed < 24, mid.request_counts
    time.sleep(2)
    server.start()
    done = wait_batch(client, b.id, timeout=400)
    log = deployment.log("worker", tail=None)
    assert done.status == "completed", log[-4000:]
    assert (done.request_counts.completed, done.request_counts.failed) == (24, 0)
    ids = [line["custom_id"] for line in read_lines(client, done.output_file_id)]
    assert sorted(ids) == sorted(r["custom_id"] for r in rows) and len(set(ids)) == 24
    assert read_lines(client, done.error_file_id) == []
    assert "lost the server" in log and "answers again" in log
    db = sa.create_engine(f"sqlite:///{deployment.data_dir / 'blendserve.db'}")
    with db.connect() as c:
        assert c.execute(sa.text("SELECT max(attempts) FROM requests")).scalar() == 0
    db.dispose()
    httpx.get(f"{server.url}/health", timeout=5).raise_for_status()

