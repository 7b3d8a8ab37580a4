"""One tenant's request fails alone, wherever it fails (docs/design.md §12.1): a failure injected into one
request of a running stream (its admission, its sampling, its caller's token callback, its result's text)
gives that request an error result, while the stream's other requests finish with the outputs they have
running alone, on the echo engine, the CPU engine and the server adapter; a prompt id past the vocabulary
is refused before it reaches a step shared with others, on the real server with SmolLM2 on the CPU."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from blendserve.core.config import SMOLLM2
from blendserve.core.engine_settings import CpuEngineSettings, EchoSettings, ServerEngineSettings
from blendserve.worker.engines.base import GenRequest, GenResult, SamplingParams
from blendserve.worker.engines.cpu import CpuEngine
from blendserve.worker.engines.echo import FILLER, EchoEngine
from blendserve.worker.engines.server import ServerEngine
from tests.live import Deployment, jsonl, read_lines, wait_batch
from tests.reliability.inproc import planned_chunk, running_batch

GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


class Injected(RuntimeError):
    """The failure a test plants in one request's own work."""


def raising(*args, **kwargs):
    raise Injected("planted in this request alone")


def after(n: int, sink: list[int]):
    """A token callback that takes `n` tokens, then raises: the caller's side of a stream going wrong."""
    def on_tokens(ids: list[int], **kwargs) -> None:
        if len(sink) >= n:
            raise Injected("the caller's callback raised")
        sink.extend(ids)
    return on_tokens


def run(engine, requests: list[GenRequest], urgent: list[list[GenRequest]] = ()) -> dict[int, GenResult]:
    polls = iter(urgent)
    return {r.key: r for r in engine.generate(requests, urgent=lambda: next(polls, []))}


def prompt(i: int, n: int = 12) -> list[int]:
    return [(31 * i + 7 * j) % 400 + 5 for j in range(n)]


def test_echo_one_request_raising_at_admission_or_in_its_callback_fails_alone() -> None:
    e = EchoEngine("m", tokens_per_s=4000, max_running=3, config=EchoSettings())
    own = e._result
    e._result = lambda req: raising() if req.key == 3 else own(req)      # its admission raises
    batch = [GenRequest(i, [1, 2, 3, i], SamplingParams(max_tokens=8)) for i in range(1, 8)]
    partial: list[int] = []
    streamed: list[int] = []
    bad = GenRequest(-1, [5, 6], SamplingParams(max_tokens=4), on_tokens=after(0, partial))
    good = GenRequest(-2, [5, 6], SamplingParams(max_tokens=4), on_tokens=streamed.extend)
    out = run(e, batch, [[], [bad, good]])
    assert set(out) == {*range(1, 8), -1, -2}
    assert "planted in this request alone" in out[3].error and not out[3].refused
    assert "the caller's callback raised" in out[-1].error
    assert streamed == [FILLER] * 4 and out[-2].error is None
    assert all(out[k].error is None and out[k].output_ids == [FILLER] * 8 for k in (1, 2, 4, 5, 6, 7))


def cpu(tiny_model: Path, **kw) -> CpuEngine:
    args = dict(max_running=4, threads=1, block_size=4, kv_capacity_tokens=4096, dtype=torch.float32)
    return CpuEngine(tiny_model, "tiny", config=CpuEngineSettings(), **{**args, **kw})


def one_at_a_time(tiny_model: Path, requests: list[GenRequest]) -> dict[int, list[int]]:
    """Each request's output running alone (one running sequence at a time), callbacks left out."""
    plain = [GenRequest(r.key, r.input_ids, r.params) for r in requests]
    return {r.key: r.output_ids for r in cpu(tiny_model, max_running=1).generate(plain)}


def test_cpu_engine_fails_each_culprit_alone_and_the_others_match_running_alone(tiny_model: Path) -> None:
    """In one stream: a prompt id past the vocabulary (refused at admission, naming the id and the vocabulary),
    a sequence whose logit adjustment raises in a shared step, one whose draw raises in the middle of the
    step's batched sampling, one whose result's text raises, and an interactive
    request whose caller's callback raises mid-stream. Every other request's output equals running alone,
    and the engine serves the next stream."""
    e = cpu(tiny_model)
    vocab = int(e.model.embed.shape[0])
    good = [GenRequest(i, prompt(i), GREEDY) for i in range(6)]
    past_vocab = GenRequest(10, [3, 4, vocab + 7, 5], GREEDY)
    bad_sampling, bad_text = GenRequest(11, prompt(11), GREEDY), GenRequest(12, prompt(12), GREEDY)
    bad_draw = GenRequest(13, prompt(13), SamplingParams(max_tokens=12, temperature=1.0))
    own_sequence, own_result = e._sequence, e.results.of

    def sequence(request: GenRequest):
        seq = own_sequence(request)
        if request.key == bad_sampling.key:       # its sampling state raises inside the step
            seq.state[1].adjusts, seq.state[1].adjust = True, raising
        if request.key == bad_draw.key:           # its random draw raises after other rows drew theirs
            seq.state[1].generator = "not a generator"
        return seq

    e._sequence = sequence
    e.results.of = lambda seq: raising() if seq.key == bad_text.key else own_result(seq)
    partial: list[int] = []
    streamed: list[int] = []
    hot_bad = GenRequest(-1, prompt(40), GREEDY, on_tokens=after(2, partial))
    hot_good = GenRequest(-2, prompt(41), GREEDY, on_tokens=streamed.extend)
    out = run(e, [good[0], past_vocab, good[1], bad_sampling, good[2], bad_draw, bad_text, *good[3:]],
              [[], [hot_bad], [], [hot_good]])
    assert set(out) == {*range(6), 10, 11, 12, 13, -1, -2}
    assert out[10].refused and out[10].error == (f"Token id {vocab + 7} at prompt position 2 is outside the "
                                                 f"model's vocabulary of {vocab} tokens (ids 0 to {vocab - 1}).")
    assert "Injected: planted in this request alone" in out[11].error and not out[11].refused
    assert "Injected: planted in this request alone" in out[12].error
    assert "TypeError" in out[13].error and not out[13].refused
    assert "the caller's callback raised" in out[-1].error and len(partial) == 2
    solo = one_at_a_time(tiny_model, [*good, hot_good])
    for r in good:
        assert out[r.key].error is None and out[r.key].output_ids == solo[r.key]
    assert streamed == out[-2].output_ids == solo[-2]
    e._sequence, e.results.of = own_sequence, own_result
    assert next(e.generate([good[0]])).output_ids == out[0].output_ids


# -- the real server, SmolLM2 on the CPU -------------------------------------------------------------

@pytest.fixture(scope="module")
def smol(tmp_path_factory: pytest.TempPathFactory, smollm2_checkpoint: Path):
    d = Deployment(tmp_path_factory.mktemp("isolation"), "", f"{SMOLLM2}={smollm2_checkpoint}").start_all()
    yield d
    d.stop()


def chat(client: httpx.Client, base: str, text: str, stream: bool = False) -> httpx.Response:
    body = {"model": SMOLLM2, "messages": [{"role": "user", "content": text}], "max_tokens": 16,
            "temperature": 0, "stream": stream}
    return client.post(f"{base}/chat/completions", json=body, timeout=120)


def test_a_prompt_id_past_the_vocabulary_is_a_400_while_another_tenant_streams(smol: Deployment) -> None:
    """SmolLM2 has 49,152 tokens: [1, 60000] is refused with a 400 naming the id, while another tenant's
    stream in flight and its next chat both finish, and the worker never loses a stream."""
    base = smol.base_url
    with httpx.Client() as client:
        answers: dict[str, httpx.Response] = {}
        with client.stream("POST", f"{base}/chat/completions", timeout=120, json={
                "model": SMOLLM2, "messages": [{"role": "user", "content": "Count from one to twenty."}],
                "max_tokens": 48, "temperature": 0, "stream": True}) as streaming:
            assert streaming.status_code == 200
            lines = streaming.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            hostile = threading.Thread(target=lambda: answers.update(bad=client.post(
                f"{base}/completions", json={"model": SMOLLM2, "prompt": [1, 60000], "max_tokens": 8},
                timeout=120)))
            hostile.start()
            rest = [line for line in lines if line.startswith("data: ")]
            hostile.join()
        assert first and rest[-1] == "data: [DONE]" and not any('"error"' in line for line in rest)
        bad = answers["bad"]
        assert bad.status_code == 400, bad.text
        message = bad.json()["error"]["message"]
        assert "Token id 60000 at position 1" in message and "49152" in message
        after_it = chat(client, base, "Say hello.")
        assert after_it.status_code == 200 and after_it.json()["choices"][0]["message"]["content"]
    assert "engine stream failed" not in smol.log("worker", tail=None)


def test_a_batch_line_with_an_id_past_int32_fails_alone(smol: Deployment) -> None:
    c = smol.client()
    rows = [{"custom_id": f"c-{i}", "method": "POST", "url": "/v1/completions",
             "body": {"model": SMOLLM2, "prompt": p, "max_tokens": 4, "temperature": 0}}
            for i, p in enumerate(["The sky is", [1, 2**40], "Once upon a time", [1, 60000], [504, 3145]])]
    f = c.files.create(file=("ids.jsonl", jsonl(rows)), purpose="batch")
    b = wait_batch(c, c.batches.create(input_file_id=f.id, endpoint="/v1/completions",
                                       completion_window="24h").id, timeout=300)
    assert b.status == "completed", b
    out, err = read_lines(c, b.output_file_id), read_lines(c, b.error_file_id)
    assert sorted(o["custom_id"] for o in out) == ["c-0", "c-2", "c-4"]
    errors = {e["custom_id"]: (e["error"] or e["response"]["body"]["error"])["message"] for e in err}
    assert sorted(errors) == ["c-1", "c-3"]
    assert f"Token id {2**40} at position 1" in errors["c-1"] and "49152" in errors["c-1"]
    assert "Token id 60000 at position 1" in errors["c-3"]


def test_server_adapter_fails_a_request_whose_callback_raises_alone(smol: Deployment,
                                                                    smollm2_checkpoint: Path) -> None:
    """The server adapter in front of that deployment's OpenAI endpoint: a streamed request whose caller's
    callback raises fails alone at once (not as the server's fault); the rest finish, and the engine
    serves the next stream."""
    e = ServerEngine(SMOLLM2, ServerEngineSettings(url=smol.base_url), smollm2_checkpoint)
    try:
        params = SamplingParams(max_tokens=6, temperature=0.0)
        batch = [GenRequest(i, [504, 3145, 314 + i], params) for i in range(1, 4)]
        partial: list[int] = []
        streamed: list[int] = []
        hot_bad = GenRequest(-1, [504, 3145], params, on_tokens=after(1, partial))
        hot_good = GenRequest(-2, [504, 3145], params, on_tokens=streamed.extend)
        out = run(e, batch, [[hot_bad, hot_good]])
        assert set(out) == {1, 2, 3, -1, -2}
        assert "the caller's callback raised" in out[-1].error and not out[-1].refused
        assert all(out[k].error is None and out[k].output_ids for k in (1, 2, 3, -2))
        assert streamed == out[-2].output_ids
        assert run(e, batch[:1])[1].output_ids == out[1].output_ids
    finally:
        e.close()


# -- a shared step no request can be blamed for: the worker's poison path ------------------------------

CULPRIT = 477       # a prompt id the engine below fails on, in whatever stream it is, alone or not


class FailsOnCulprit(EchoEngine):
    """The echo engine, but a stream in which CULPRIT's request arrives raises at that moment, outside any
    request's own work: the stream fails as a whole, as a shared forward step would."""

    def generate(self, requests, cancelled=None, urgent=None, cancel_epoch=None):
        def check(got: list[GenRequest]) -> list[GenRequest]:
            if any(r is not None and CULPRIT in r.input_ids for r in got):
                raise RuntimeError("the shared step failed")
            return got

        fed = (check([r])[0] for r in requests)
        polled = (lambda: check(urgent())) if urgent is not None else None
        yield from super().generate(fed, cancelled, polled, cancel_epoch)


def test_a_failed_shared_step_reruns_the_other_calls_alone_and_the_culprit_gets_a_500(tmp_path: Path,
                                                                                       tiny_model: Path) -> None:
    """A stream fails with batch work and another tenant's call in it: that call is answered (run again
    alone), not a 503; the culprit's call gets a 500 of its own (the API carries only a 503 on to the next
    worker); the batch requests run alone and complete; the worker serves on."""
    from sqlalchemy import func, select

    from blendserve.core.config import Settings
    from blendserve.core.db import make_engine, make_sessionmaker
    from blendserve.core.models import Request
    from blendserve.migrations.upgrade import upgrade
    from blendserve.worker.service import WorkerService

    st = Settings(data_dir=tmp_path, database_url="", lease_seconds=3, poll_interval_s=0.05, worker_port=0)
    upgrade(st.db_url)
    db = make_engine(st.db_url)
    sessions = make_sessionmaker(db)
    running_batch(sessions, total=8)
    planned_chunk(sessions, seq=0, size=8, max_tokens=200)
    echo = FailsOnCulprit("m", tokens_per_s=200, prefill_tokens_per_s=1e9, config=EchoSettings())
    svc = WorkerService(st, echo, "echo", tiny_model)
    stop = threading.Event()
    thread = threading.Thread(target=svc.run, args=(stop,), daemon=True)
    thread.start()
    try:
        _until(lambda: echo.stats().running_sequences == 8)
        url = f"http://127.0.0.1:{svc.interactive.port}/v1/completions"
        replies: dict[str, httpx.Response] = {}

        def call(name: str, prompt: list[int]) -> None:
            replies[name] = httpx.post(url, json={"model": "m", "prompt": prompt, "max_tokens": 40}, timeout=60)

        other = threading.Thread(target=call, args=("other", [5, 6, 7]))
        other.start()
        _until(lambda: echo.stats().running_sequences == 9)       # the other tenant's call runs
        call("culprit", [5, CULPRIT])
        other.join(60)
        assert replies["culprit"].status_code == 500, replies["culprit"].text
        assert "the shared step failed" in replies["culprit"].json()["error"]["message"]
        assert replies["other"].status_code == 200, replies["other"].text
        assert replies["other"].json()["choices"][0]["text"] == "x" * 40

        def done() -> bool:
            with sessions() as s:
                return dict(s.execute(select(Request.status, func.count()).group_by(Request.status)).all()) \
                    == {"completed": 8}
        _until(done, 60)
        call("after", [5, 6])
        assert replies["after"].status_code == 200 and thread.is_alive()
    finally:
        stop.set()
        thread.join(10)
        db.dispose()


def _until(cond, timeout: float = 30.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.02)
