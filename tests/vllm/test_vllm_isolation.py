"""One request fails alone on the vLLM engine (docs/design.md §12.1): a prompt id past SmolLM2's vocabulary
refused when it is added, a request whose result raises as it is read, and an interactive request whose
caller's callback raises mid-stream, each get an error result, while the other requests of the same
stream finish with their greedy outputs."""
from __future__ import annotations

from pathlib import Path

import pytest

from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.vllm import VllmEngine
from tests.vllm.test_vllm_engine import chat_ids, run

pytest.importorskip("vllm", reason="vllm is not installed in this interpreter (scripts/setup_vllm.sh installs it)")

GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


def test_a_bad_prompt_and_a_raising_callback_fail_alone(engine: VllmEngine, smollm2_checkpoint: Path) -> None:
    good = [GenRequest(i, chat_ids(smollm2_checkpoint, f"Count to {i + 5}."), GREEDY) for i in range(1, 4)]
    clean = run(engine, good)
    unreadable = GenRequest(8, chat_ids(smollm2_checkpoint, "Count to 3."), GREEDY)
    own_result = engine._result

    def result(request: GenRequest, out):
        if request.key == unreadable.key:
            raise RuntimeError("its result could not be read")
        return own_result(request, out)

    partial: list[int] = []

    def raising(ids: list[int], **kwargs) -> None:
        if partial:
            raise RuntimeError("the caller's callback raised")
        partial.extend(ids)

    hot = GenRequest(-1, chat_ids(smollm2_checkpoint, "Name a colour."), GREEDY, on_tokens=raising)
    past_vocab = GenRequest(9, [1, 60000], GREEDY)
    polls = iter([[], [hot]])
    engine._result = result
    try:
        out = {r.key: r for r in engine.generate([good[0], past_vocab, unreadable, *good[1:]],
                                                 urgent=lambda: next(polls, []))}
    finally:
        engine._result = own_result
    assert set(out) == {1, 2, 3, 8, 9, -1}
    assert out[9].error and not out[9].refused
    assert "its result could not be read" in out[8].error
    assert "the caller's callback raised" in out[-1].error and partial
    assert all(out[r.key].error is None and out[r.key].output_ids == clean[r.key].output_ids for r in good)
    assert run(engine, good[:1])[1].output_ids == clean[1].output_ids
