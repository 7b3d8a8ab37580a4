"""The SGLang engine against a stand-in with SGLang's loop semantics (tests/sglang/fake_engine.py).

The real SGLang runs the same engine in test_sglang_engine.py and test_sglang_service.py (.venv-sglang);
these pin what must hold on any machine: every SGLang call on the one loop that reads SGLang's outputs,
per-request refusals that leave the stream running, cancel sweeps only when the epoch moves, the
arguments SGLang gets, and the step budget SGLang really runs."""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from blendserve.core.engine_settings import SglangSettings
from blendserve.worker.engines.base import GenRequest, GenResult, SamplingParams
from blendserve.worker.engines.sglang import SGLangEngine
from blendserve.worker.engines.speculative import SpecConfig
from tests.sglang.fake_engine import VOCAB, FakeEngine

GREEDY = SamplingParams(max_tokens=6, temperature=0.0)


def make(**options) -> SGLangEngine:
    """Built on the calling (main) thread, as `blendserve worker` builds it."""
    return SGLangEngine(Path("/models/x"), "x", options=SglangSettings(**options), factory=FakeEngine)


def in_thread(fn, timeout: float = 20.0):
    """Run fn in another thread, as the worker runs the engine's stream in its rank thread; fail on a hang."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:          # noqa: B036 - handed back to the test
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"no answer within {timeout} s: a request waits on a loop that never runs"
    if "error" in box:
        raise box["error"]
    return box["value"]


def run(engine: SGLangEngine, requests: list[GenRequest], **kw) -> dict[int, GenResult]:
    return in_thread(lambda: {r.key: r for r in engine.generate(requests, **kw)})


def expected(ids: list[int], n: int) -> list[int]:
    return [(sum(ids) + i) % VOCAB for i in range(n)]


def test_requests_finish_on_the_loop_that_reads_sglangs_outputs() -> None:
    root = logging.getLogger()
    handler = logging.StreamHandler()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    e = make(max_total_tokens=5000)
    assert handler in root.handlers and root.level == logging.INFO    # the worker's own log lines survive
    root.removeHandler(handler)
    try:
        out = run(e, [GenRequest(i, [i, 2, 3], GREEDY) for i in range(1, 5)])
        assert sorted(out) == [1, 2, 3, 4]
        assert all(r.output_ids == expected([k, 2, 3], 6) and r.error is None for k, r in out.items())
        tm = e.engine.tokenizer_manager
        assert tm.event_loop is e.loop                  # the output reader runs where the requests wait
        assert not tm.signal_handlers                   # the worker's SIGTERM handling stays its own
        assert e.kv_capacity_tokens() == 5000           # from scheduler_infos, without touching Engine.loop
        with pytest.raises(RuntimeError):               # a synchronous Engine call fails; it would hang
            in_thread(e.engine.get_server_info)
    finally:
        e.close()


def test_a_refused_request_fails_alone_and_the_stream_runs_on() -> None:
    e = make()
    try:
        reqs = [GenRequest(1, [1, 2], GREEDY),
                GenRequest(2, [1, 2], SamplingParams(max_tokens=6, logit_bias=((VOCAB + 5, 1.0),))),
                GenRequest(3, [1, 2], SamplingParams(max_tokens=6, top_p=0.0)),     # OpenAI: the top token only
                GenRequest(4, [1, 2], SamplingParams(max_tokens=6, temperature=-1.0)),   # SGLang's own check
                GenRequest(5, [1, VOCAB + 1], GREEDY),
                GenRequest(6, [4, 2], GREEDY)]
        out = run(e, reqs)
        assert sorted(out) == [1, 2, 3, 4, 5, 6]
        assert "outside the model's vocabulary" in out[2].error
        assert "temperature" in out[4].error and "SGLang refused" in out[4].error
        assert "vocabulary" in out[5].error
        for k in (1, 3, 6):
            assert out[k].error is None and out[k].completion_tokens == 6
    finally:
        e.close()


def test_cancel_sweeps_only_when_the_epoch_moves() -> None:
    e = make()
    calls: list[int] = []
    epoch = [0]
    requests = [GenRequest(i, [i], SamplingParams(max_tokens=20 if i < 8 else 5000)) for i in range(1, 9)]
    results: list[GenResult] = []

    def cancelled(key: int) -> bool:
        calls.append(key)
        return key == 8 and epoch[0] == 1

    def stream():
        for res in e.generate(requests, cancelled=cancelled, cancel_epoch=lambda: epoch[0]):
            results.append(res)
            if len(results) == 2:
                epoch[0] = 1                 # request 8's batch was cancelled
        return results

    try:
        in_thread(stream)
        assert sorted(r.key for r in results) == [1, 2, 3, 4, 5, 6, 7]
        # one sweep at the first epoch read, one when it moved: never a sweep per pass
        assert len(calls) <= 8 + 6, calls
        deadline = time.monotonic() + 5                      # the task's cancellation runs on SGLang's loop
        while not e.engine.tokenizer_manager.aborted and time.monotonic() < deadline:
            time.sleep(0.01)
        assert e.engine.tokenizer_manager.aborted            # SGLang was told to abort request 8
    finally:
        e.close()


def once(request: GenRequest):
    """An `urgent` callback that hands `request` over once: the driver asks before every step, also before
    the request's first token has come back, so one that hands it over until then can hand it over twice."""
    handed: list[GenRequest] = []

    def urgent() -> list[GenRequest]:
        if handed:
            return []
        handed.append(request)
        return [request]
    return urgent


def test_interactive_tokens_stream_to_the_worker_thread() -> None:
    e = make()
    got: list[tuple[list[int], str]] = []
    req = GenRequest(-1, [7, 7], SamplingParams(max_tokens=12),
                     on_tokens=lambda ids: got.append((ids, threading.current_thread().name)))
    try:
        out = in_thread(lambda: list(e.generate([], urgent=once(req))))
        assert [r.key for r in out] == [-1]
        assert len(got) > 1 and sum((ids for ids, _ in got), []) == out[0].output_ids == expected([7, 7], 12)
        assert {name for _, name in got} != {"sglang-loop"}    # called from the stream's own thread
    finally:
        e.close()


def in_flight(e: SGLangEngine, max_tokens: int, n: int = 200) -> list[int]:
    """Requests in flight as each of n one-token-prompt requests finishes."""
    seen: list[int] = []
    reqs = (GenRequest(i, [i], SamplingParams(max_tokens=max_tokens)) for i in range(1, n + 1))

    def count():
        for _ in e.generate(reqs):
            seen.append(len(e._flight))
        return seen

    in_thread(count, timeout=60)
    return seen


def test_speculation_reports_no_mixed_step_and_caps_in_flight() -> None:
    mixed = make(chunked_prefill_size=1024)
    spec = SGLangEngine(Path("/m"), "x", options=SglangSettings(max_total_tokens=10**7), factory=FakeEngine,
                        speculative=SpecConfig(method="ngram", tokens=4))
    try:
        assert mixed.step_token_budget() == 1024 and mixed.engine.kwargs["enable_mixed_chunk"] is True
        assert spec.step_token_budget() is None and "enable_mixed_chunk" not in spec.engine.kwargs
        assert spec.engine.kwargs["speculative_algorithm"] == "NGRAM"
        seen = in_flight(spec, max_tokens=3)
        assert len(seen) == 200 and max(seen) <= 96       # twice SGLang's running cap of 48
    finally:
        mixed.close()
        spec.close()


def test_requests_longer_than_a_poll() -> None:
    """The worker's thread wakes every URGENT_POLL_S with nothing finished, many times over, and goes on."""
    e = make()
    try:
        out = run(e, [GenRequest(1, [1], SamplingParams(max_tokens=150))], urgent=lambda: [])
        assert out[1].completion_tokens == 150
    finally:
        e.close()


def test_the_stop_token_is_not_part_of_the_output() -> None:
    """SGLang keeps the EOS that ended an output among output_ids; the result, batch or streamed, has none
    (as the server engine's, vLLM's and the CPU engine's)."""
    e = make()
    e.engine.eos_after = 4
    got: list[int] = []
    streamed = GenRequest(-1, [7, 7], SamplingParams(max_tokens=12), on_tokens=got.extend)
    try:
        out = run(e, [GenRequest(1, [1, 2], SamplingParams(max_tokens=12))],
                  urgent=once(streamed))
        assert out[1].output_ids == expected([1, 2], 3) and out[1].finish_reason == "stop"
        assert out[-1].output_ids == got == expected([7, 7], 3)
    finally:
        e.close()


def test_the_running_cap_is_the_schedulers_not_the_raw_argument() -> None:
    """Started with SGLang's defaults (no max_running_requests), the count cap is the scheduler's effective
    cap (the fake's: half its KV pool), read from its internal state, not the raw argument (None)."""
    e = make(max_total_tokens=64, in_flight_kv=4.0)      # the KV window would allow 128 of these
    try:
        assert "max_running_requests" not in e.engine.kwargs
        assert e._running_cap == 32 and e._priorities
        seen = in_flight(e, max_tokens=1)
        assert len(seen) == 200 and max(seen) <= 64
    finally:
        e.close()


def test_an_interactive_request_goes_ahead_of_queued_batch_work() -> None:
    """Batch work queued inside SGLang (past its running cap) waits for the chat: SGLang sorts by priority."""
    e = make(max_running_requests=2, max_total_tokens=10**6)
    chat: list[int] = []
    asked = threading.Event()

    def urgent() -> list[GenRequest]:
        if len(e.engine.admitted) >= 2 and not asked.is_set():
            asked.set()
            return [GenRequest(-1, [999], SamplingParams(max_tokens=2), on_tokens=chat.extend)]
        return []

    try:
        batch = [GenRequest(i, [i], SamplingParams(max_tokens=20)) for i in range(1, 41)]
        out = run(e, batch, urgent=urgent)
        assert len(out) == 41 and chat
        order = [ids[0] for ids in e.engine.admitted]
        # Admitted third or fourth (two slots were busy), ahead of the 30-odd batch requests still queued,
        # and the batch requests in plan order around it.
        assert order.index(999) <= 3, order
        assert [i for i in order if i != 999] == list(range(1, 41))
    finally:
        e.close()
