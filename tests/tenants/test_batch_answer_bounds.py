"""One batch line's answer is bounded as an interactive call's is (protocol/answer_size.py): a line asking for
n * max_tokens tokens or top_logprobs * n * max_tokens logprob entries past BLENDSERVE_LIMIT_OUTPUT_TOKENS or
BLENDSERVE_LIMIT_LOGPROB_ENTRIES is that line's own error, naming the limit, and the lines that pass run on the
real SmolLM2 CPU engine at the pace they run alone. A line of `n: 128, max_tokens: 2000, top_logprobs: 20`
(256,000 tokens, 5.1 million logprob entries) used to pass and share every step with the others."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from blendserve.core.engine_settings import CpuEngineSettings
from blendserve.core.grammar_settings import GrammarSettings
from blendserve.core.limit_settings import LimitSettings
from blendserve.core.modelstore import load_tokenizer
from blendserve.protocol.bodies import model_info, tokenize
from blendserve.protocol.grammar_limits import with_grammar
from blendserve.protocol.requests import sampling_params
from blendserve.scheduler.validation import LineError, ValidRequest, validate
from blendserve.worker.engines.base import GenRequest
from blendserve.worker.engines.cpu import CpuEngine

NAME, CHAT = "SmolLM2-135M-Instruct", "/v1/chat/completions"
ASK = [{"role": "user", "content": "Say hi."}]
HOSTILE = {
    "many": {"n": 128, "max_tokens": 2000, "logprobs": True, "top_logprobs": 20},   # hostile_fuzz's kind 13
    "many_to_the_end": {"n": 128},                                                  # max_tokens: the context's
    "logprobs": {"n": 8, "max_tokens": 2000, "logprobs": True, "top_logprobs": 20},  # 16,000 tokens, 320,000 entries
}


def line(cid: str, **body) -> bytes:
    return json.dumps({"custom_id": cid, "method": "POST", "url": CHAT,
                       "body": {"model": NAME, "messages": ASK, **body}}).encode()


def others() -> list[bytes]:
    """The rest of the batch: four plain lines and one with a few choices and logprobs, within the bounds."""
    plain = [line(f"ok{i}", messages=[{"role": "user", "content": f"Count to {i + 3}."}], max_tokens=16,
                  temperature=0) for i in range(4)]
    return [*plain, line("few", n=4, max_tokens=16, logprobs=True, top_logprobs=5, seed=1)]


def run(engine: CpuEngine, info, valid: list[ValidRequest]) -> float:
    """CPU-seconds of the engine until every `ok` line has its result (one torch thread: the engine's own
    work, whatever else shares the machine); what is still running then is dropped."""
    ids = tokenize(CHAT, [r.body for r in valid], info)
    requests = [GenRequest(i, p, sampling_params(r.params(), r.max_tokens or info.context_length - len(p)))
                for i, (r, p) in enumerate(zip(valid, ids))]
    waiting = {i for i, r in enumerate(valid) if r.custom_id.startswith("ok")}
    t0, took = time.process_time(), None
    for result in engine.generate(requests, cancelled=lambda key: not waiting):    # the rest dropped then
        if result.key in waiting:
            assert result.error is None, result.error
            waiting.discard(result.key)
            took = took if waiting else time.process_time() - t0
    assert took is not None
    return took


@pytest.fixture(scope="module")
def info(smollm2_checkpoint: Path):
    return with_grammar(model_info(NAME, smollm2_checkpoint, load_tokenizer(smollm2_checkpoint)),
                        GrammarSettings(), LimitSettings())


def test_a_line_past_the_answer_bounds_fails_alone_and_the_others_keep_their_pace(smollm2_checkpoint: Path,
                                                                                    info) -> None:
    batch = others() + [line(cid, **body) for cid, body in HOSTILE.items()]
    out = list(validate(batch, CHAT, {NAME: info}, max_lines=100))
    valid = [r for r in out if isinstance(r, ValidRequest)]
    errors = {e.custom_id: e for e in out if isinstance(e, LineError)}
    engine = CpuEngine(smollm2_checkpoint, NAME, threads=1, config=CpuEngineSettings())
    mates = [r for r in valid if r.custom_id.startswith("ok")]
    run(engine, info, mates)                                     # warm: the first steps build the kernels
    alone = min(run(engine, info, mates) for _ in range(2))
    beside = run(engine, info, valid)
    assert beside < 2 * alone + 0.5, f"the plain lines took {beside:.2f} CPU-s beside the rest, {alone:.2f} alone"

    assert sorted(r.custom_id for r in valid) == sorted(["few", *(f"ok{i}" for i in range(4))])
    assert not any(e.fails_file for e in errors.values()), "each is its own line's error; the batch runs"
    for cid in ("many", "many_to_the_end"):
        assert errors[cid].code == "output_limit_exceeded"
        assert "BLENDSERVE_LIMIT_OUTPUT_TOKENS" in errors[cid].message and errors[cid].param == "n"
    assert "(128 * 8192)" in errors["many_to_the_end"].message, "no max_tokens counts the whole context"
    assert errors["logprobs"].code == "logprobs_limit_exceeded"
    assert "(20 * 8 * 2000)" in errors["logprobs"].message
    assert "BLENDSERVE_LIMIT_LOGPROB_ENTRIES" in errors["logprobs"].message


def test_the_bounds_are_the_deployments(info) -> None:
    """An operator who raises BLENDSERVE_LIMIT_OUTPUT_TOKENS raises it for batch lines too."""
    raised = with_grammar(info, GrammarSettings(), LimitSettings(output_tokens=10**6, logprob_entries=10**8))
    out = list(validate([line("many", **HOSTILE["many"])], CHAT, {NAME: raised}, max_lines=10))
    assert [type(r) for r in out] == [ValidRequest]
