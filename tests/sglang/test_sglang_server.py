"""The openai engine in front of SGLang's own server (`sglang.launch_server`, its CPU path, SmolLM2) and of
SGLang's router in front of that server: what each tells of itself, a batch in plan order with cached tokens,
an interactive stream, a cancel that SGLang sees, and a whole deployment whose worker fronts the router with
the server killed and started again mid-batch (every custom_id exactly once, none failed, none charged)."""
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
from tests.harness.sglang_server import SglangRouter, SglangServer, cpu_flags
from tests.live import Deployment, chat_lines, jsonl, read_lines, wait_batch

pytest.importorskip("sglang", reason="sglang is not installed in this interpreter (scripts/setup_sglang.sh)")
pytest.importorskip("sglang_router", reason="sglang-router is not installed here (scripts/setup_sglang.sh)")

KV_TOKENS = 4096
# The server runs with SGLang's own running cap (no --max-running-requests, as the compose sglang-server) and
# with priority scheduling on, as docs/engine-servers.md says to start it. Prefill chunks of 512 tokens keep each
# CPU step well inside the 20 s SGLang's /health waits for an output, on a loaded machine too.
FLAGS = [*cpu_flags(KV_TOKENS), "--enable-priority-scheduling", "--chunked-prefill-size", "512"]
SYSTEM = "You are a patient tutor. Answer in one sentence and never ask questions back. " * 5
NO_EOS = {"0": -100.0, "2": -100.0}        # SmolLM2's <|endoftext|> and <|im_end|>: generate to max_tokens


def chat_ids(path: Path, question: str, system: str = "You are a helpful assistant.") -> list[int]:
    tok = load_tokenizer(path)
    text = tok.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": question}],
                                   add_generation_prompt=True, tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


def running(server: SglangServer) -> float:
    """Requests SGLang runs: its num_running_reqs total (with priority scheduling on, SGLang publishes the
    total under priority="" and a line per priority beside it)."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sglang:num_running_reqs{") and ('priority="' not in line or 'priority=""' in line))


def greedy(max_tokens: int, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, **kw)


def run(engine: ServerEngine, requests: list[GenRequest], **kw) -> dict[int, GenResult]:
    return {r.key: r for r in engine.generate(requests, **kw)}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, smollm2_checkpoint: Path) -> Iterator[SglangServer]:
    """One SGLang server for the module; the last test kills it and starts it again on the same port."""
    s = SglangServer(smollm2_checkpoint, SMOLLM2, FLAGS,
                     tmp_path_factory.mktemp("sglang-serve") / "server.log")
    s.start(timeout=600)
    yield s
    s.kill()


@pytest.fixture(scope="module")
def router(server: SglangServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SglangRouter]:
    r = SglangRouter([server.url], tmp_path_factory.mktemp("sglang-router") / "router.log")
    r.start(timeout=120)
    yield r
    r.kill()


@pytest.fixture(scope="module")
def engine(server: SglangServer, smollm2_checkpoint: Path) -> Iterator[ServerEngine]:
    e = ServerEngine(SMOLLM2, ServerEngineSettings(url=f"{server.url}/v1"), smollm2_checkpoint)
    yield e
    e.close()


def test_the_server_and_its_router_tell_their_figures(engine: ServerEngine, server: SglangServer,
                                                      router: SglangRouter, smollm2_checkpoint: Path) -> None:
    """KV capacity, running cap and step size come from SGLang's server info, the served name from
    /v1/models; the router answers with its worker's."""
    info = httpx.get(f"{server.url}/server_info", timeout=10).json()
    assert (engine.info.kind, engine.info.model) == ("sglang", SMOLLM2)
    assert engine.kv_capacity_tokens() == info["max_total_num_tokens"] and 0 < info["max_total_num_tokens"] <= KV_TOKENS
    # The launch argument is None; the cap is what the scheduler runs with (SGLang's default, from its pool).
    assert info["max_running_requests"] is None
    effective = sum(s["effective_max_running_requests_per_dp"] for s in info["internal_states"])
    assert engine.info.running_cap == effective > 0 and engine.max_in_flight() == 2 * effective
    assert engine.info.priorities is True
    assert engine.step_token_budget() == info["chunked_prefill_size"]
    behind = ServerEngine(SMOLLM2, ServerEngineSettings(url=router.url), smollm2_checkpoint)
    try:
        assert behind.info == engine.info
    finally:
        behind.close()


def test_batch_greedy_output_finish_reasons_and_cached_tokens(engine: ServerEngine,
                                                               smollm2_checkpoint: Path) -> None:
    paris = chat_ids(smollm2_checkpoint, "Complete the sentence: The capital of France is")
    out = run(engine, [GenRequest(1, paris, greedy(64)), GenRequest(2, paris, greedy(3)),
                       GenRequest(3, paris, greedy(64, stop=("Paris",))), GenRequest(4, paris, greedy(3, top_p=0.0))])
    assert "Paris" in out[1].text and out[1].finish_reason == "stop"
    assert out[2].finish_reason == "length" and out[2].completion_tokens == 3 and len(out[2].output_ids) == 3
    assert out[1].text.startswith(out[2].text) and out[2].output_ids == out[1].output_ids[:3]
    assert out[3].finish_reason == "stop" and out[3].text == out[1].text[: out[1].text.index("Paris")]
    assert out[4].error is None and out[4].text == out[2].text        # top_p 0: the likeliest token, as greedy
    assert all(r.prompt_tokens == len(paris) for r in out.values())
    # A shared system prompt: SGLang's radix cache serves it, and usage.prompt_tokens_details says so.
    questions = ["Why is the sky blue?", "What do bees make?", "What is ice?"]
    first = run(engine, [GenRequest(10, chat_ids(smollm2_checkpoint, questions[0], SYSTEM), greedy(8))])[10]
    rest = run(engine, [GenRequest(11 + i, chat_ids(smollm2_checkpoint, q, SYSTEM), greedy(8))
                        for i, q in enumerate(questions[1:])])
    prefix = len(chat_ids(smollm2_checkpoint, "", SYSTEM)) - 8
    assert first.cached_tokens < prefix
    assert all(prefix <= r.cached_tokens < r.prompt_tokens for r in rest.values())


def test_requests_are_sent_in_plan_order_within_the_window(server: SglangServer, smollm2_checkpoint: Path) -> None:
    """With a window of 6, the engine never takes a request from the plan's stream while 6 wait for an
    answer (one more may be held, taken but not sent)."""
    small = ServerEngine(SMOLLM2, ServerEngineSettings(url=server.url, max_in_flight=6), smollm2_checkpoint)
    ids = chat_ids(smollm2_checkpoint, "Name a colour.")
    taken: list[int] = []
    gaps: list[int] = []

    def plan() -> Iterator[GenRequest]:
        for i in range(30):
            taken.append(i)
            yield GenRequest(i, ids, greedy(4))

    try:
        done = []
        for r in small.generate(plan()):
            done.append(r.key)
            gaps.append(len(taken) - len(done))
    finally:
        small.close()
    assert sorted(done) == list(range(30)) and taken == list(range(30))
    assert max(gaps) <= 6


def test_interactive_request_is_streamed(engine: ServerEngine, smollm2_checkpoint: Path) -> None:
    """An urgent request goes out at once and its tokens reach on_tokens chunk by chunk; they add up to the
    same greedy completion a batch request gets."""
    ids = chat_ids(smollm2_checkpoint, "Complete the sentence: The capital of France is")
    chunks: list[list[int]] = []
    pending = [GenRequest(-1, ids, greedy(12), on_tokens=chunks.append)]
    out = run(engine, [], urgent=lambda: [pending.pop()] if pending else [])
    batch = run(engine, [GenRequest(1, ids, greedy(12))])[1]
    assert len(chunks) > 2 and out[-1].text == batch.text and "Paris" in batch.text
    assert load_tokenizer(smollm2_checkpoint).decode(sum(chunks, [])) == batch.text


def test_cancel_closes_the_request_on_the_server(engine: ServerEngine, server: SglangServer,
                                                 smollm2_checkpoint: Path) -> None:
    """A cancelled request's connection is closed and SGLang aborts it: its running count falls to 0 at
    once, not after the 3,000 tokens it was asked for."""
    ids = chat_ids(smollm2_checkpoint, "Tell me a very long story.")
    stop = threading.Event()
    results: list[GenResult] = []
    long = GenRequest(1, ids, greedy(3000, logit_bias=tuple((int(t), b) for t, b in NO_EOS.items())))
    t = threading.Thread(target=lambda: results.extend(engine.generate([long], cancelled=lambda k: stop.is_set())))
    t.start()
    deadline = time.time() + 60
    while running(server) < 1 and time.time() < deadline:
        time.sleep(0.2)
    assert running(server) == 1
    stop.set()
    t.join(10)
    assert not t.is_alive() and results == []
    cancelled_at = time.time()
    while running(server) > 0 and time.time() < cancelled_at + 10:
        time.sleep(0.2)
    assert running(server) == 0


def test_choices_logprobs_and_a_json_schema_reach_the_server(engine: ServerEngine,
                                                             smollm2_checkpoint: Path) -> None:
    """n choices come back as the result's choices, logprobs named by token id as the other engines name
    them (the k likeliest each), and a JSON schema constrains the output (SGLang's grammar backend)."""
    ids = chat_ids(smollm2_checkpoint, "Describe a cat in a few words.")
    schema = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                         "additionalProperties": False}, sort_keys=True, separators=(",", ":"))
    bias = tuple((int(t), b) for t, b in NO_EOS.items())
    out = run(engine, [GenRequest(1, ids, SamplingParams(max_tokens=8, seed=1, n=3, logprobs=2, logit_bias=bias)),
                       GenRequest(2, ids, greedy(16, json_schema=schema, strict_schema=True))])
    names = TokenNames(load_tokenizer(smollm2_checkpoint))
    every = [out[1], *out[1].choices]
    assert len(every) == 3 and out[1].completion_tokens == 24
    for c in every:
        assert len(c.output_ids) == 8 and c.logprobs is not None
        assert [e.token for e in c.logprobs] == [names.name(t)[0] for t in c.output_ids]
        assert all(len(e.top) == 2 and 0 >= e.top[0].logprob >= e.top[1].logprob and e.logprob <= 0
                   for e in c.logprobs)
    # Unconstrained, the model describes a cat; under the schema it writes the object the schema asks for
    # (SGLang's grammar allows whitespace between tokens, so 16 tokens may end before the closing brace).
    compact = "".join(out[2].text.split())
    assert compact.startswith('{"ok":true') or compact.startswith('{"ok":false')


def test_a_server_with_its_defaults_is_fed_and_a_chat_streams_mid_batch(engine: ServerEngine,
                                                                      smollm2_checkpoint: Path) -> None:
    """A batch three windows long (at most 400 requests) to a server started with SGLang's own running cap: the
    worker reads that cap (not the launch argument) and keeps it in flight, or all the server's KV pool holds
    (requests of prompt + max_tokens tokens); a chat sent mid-batch streams its answer (its start is printed:
    tests/feeding.py)."""
    assert_fed(engine, chat_ids(smollm2_checkpoint, "Complete the sentence: The capital of France is"),
               chat_ids(smollm2_checkpoint, "Name a colour.", SYSTEM), "SGLang")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, smollm2_checkpoint: Path, router: SglangRouter):
    # 4 in flight: the kill below lands mid-batch, with SGLang's own running cap (thousands) on the server.
    d = Deployment(tmp_path_factory.mktemp("bs-sglang-router"), "", f"{SMOLLM2}={smollm2_checkpoint}",
                   BLENDSERVE_SERVER_HEALTH_INTERVAL_S="1", BLENDSERVE_SERVER_RETRY_MAX_S="2",
                   BLENDSERVE_SERVER_MAX_IN_FLIGHT="4")
    for role in ("api", "scheduler"):
        d.start(role)
    d.start("worker", None, "--engine", "openai", "--url", router.url)
    try:
        d.wait_ready(timeout=180)
        yield d
    finally:
        d.stop()


def test_interactive_chat_through_the_router(deployment: Deployment) -> None:
    client = deployment.client()
    messages = [{"role": "user", "content": "Complete the sentence: The capital of France is"}]
    whole = client.chat.completions.create(model=SMOLLM2, messages=messages, max_tokens=12, temperature=0)
    deltas = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=SMOLLM2, messages=messages, max_tokens=12, temperature=0, stream=True) if c.choices]
    assert sum(bool(d) for d in deltas) > 2
    assert "".join(deltas) == whole.choices[0].message.content and "Paris" in whole.choices[0].message.content


def test_server_killed_behind_the_router_loses_nothing(deployment: Deployment, server: SglangServer,
                                                       router: SglangRouter) -> None:
    """SIGKILL the SGLang server behind the router while a batch runs, and start it again on the same port:
    the worker holds what it lost while the router has no server to give it, sends it again once one
    answers, and every custom_id comes out once, none failed, none charged an attempt."""
    client = deployment.client()
    rows = chat_lines(16, SMOLLM2, max_tokens=40, prefix=SYSTEM, temperature=0, logit_bias=NO_EOS)
    f = client.files.create(file=("input.jsonl", jsonl(rows)), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    mid = wait_batch(client, b.id, timeout=300, until=lambda x: x.request_counts.completed >= 2 or
                     x.status in ("completed", "failed"))
    server.kill()
    assert mid.status == "in_progress" and mid.request_counts.completed < 16, mid.request_counts
    time.sleep(3)
    server.start(timeout=600)
    done = wait_batch(client, b.id, timeout=600)
    log = deployment.log("worker", tail=None)
    assert done.status == "completed", log[-4000:]
    assert (done.request_counts.completed, done.request_counts.failed) == (16, 0)
    ids = [line["custom_id"] for line in read_lines(client, done.output_file_id)]
    assert sorted(ids) == sorted(r["custom_id"] for r in rows) and len(set(ids)) == 16
    assert read_lines(client, done.error_file_id) == []
    assert "lost the server" in log and "answers again" in log
    db = sa.create_engine(f"sqlite:///{deployment.data_dir / 'blendserve.db'}")
    with db.connect() as c:
        assert c.execute(sa.text("SELECT max(attempts) FROM requests")).scalar() == 0
    db.dispose()
