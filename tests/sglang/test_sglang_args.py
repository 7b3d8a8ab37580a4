"""What SGLang is handed: engine arguments and per-request sampling params (worker/engines/sglang_args.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from blendserve.core.engine_settings import SglangSettings
from blendserve.worker.engines.base import SamplingParams
from blendserve.worker.engines.sglang_args import (
    INTERACTIVE_PRIORITY,
    Refused,
    engine_args,
    priority,
    sampling_params,
    sglang_running_cap,
)
from blendserve.worker.engines.speculative import SpecConfig


def test_top_p_zero_is_the_top_token() -> None:
    p = sampling_params(SamplingParams(max_tokens=4, top_p=0.0), 100)
    assert p["top_p"] == 1.0 and p["top_k"] == 1
    assert "top_k" not in sampling_params(SamplingParams(max_tokens=4, top_p=0.5), 100)


def test_logit_bias_outside_the_vocabulary_is_refused() -> None:
    ok = sampling_params(SamplingParams(max_tokens=4, logit_bias=((99, -100.0),)), 100)
    assert ok["logit_bias"] == {"99": -100.0}
    with pytest.raises(Refused, match="100"):
        sampling_params(SamplingParams(max_tokens=4, logit_bias=((100, 1.0),)), 100)


def test_seed_goes_in_only_under_deterministic_inference() -> None:
    p = SamplingParams(max_tokens=4, seed=7)
    assert "sampling_seed" not in sampling_params(p, 100)
    assert sampling_params(p, 100, deterministic=True)["sampling_seed"] == 7
    assert engine_args(Path("m"), SglangSettings(deterministic=True))["enable_deterministic_inference"] is True
    assert "enable_deterministic_inference" not in engine_args(Path("m"), SglangSettings())


def test_engine_args() -> None:
    args = engine_args(Path("/m"), SglangSettings(device="cpu", attention_backend="torch_native",
                                                  max_total_tokens=4096, disable_cuda_graph=True), tp=2)
    assert args == dict(model_path="/m", tp_size=2, schedule_policy="fcfs", chunked_prefill_size=2048,
                        enable_priority_scheduling=True, constrained_json_disable_any_whitespace=True,
                        log_level="warning", enable_mixed_chunk=True,
                        max_total_tokens=4096, device="cpu",
                        attention_backend="torch_native", disable_cuda_graph=True)
    spec = engine_args(Path("/m"), SglangSettings(), spec=SpecConfig(method="ngram", tokens=4))
    assert "enable_mixed_chunk" not in spec and spec["speculative_num_draft_tokens"] == 4


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from blendserve.core.config import Settings

    monkeypatch.setenv("BLENDSERVE_SGLANG_MAX_TOTAL_TOKENS", "4096")
    monkeypatch.setenv("BLENDSERVE_SGLANG_DEVICE", "cpu")
    s = Settings().sglang
    assert (s.max_total_tokens, s.device, s.chunked_prefill_size) == (4096, "cpu", 2048)


def test_priorities_put_interactive_first_and_batch_in_plan_order() -> None:
    """SGLang runs higher priorities first, then arrivals: a chat before any batch request, and a batch
    request retracted and queued again sorts back to its place in the plan."""
    assert priority(-1) == INTERACTIVE_PRIORITY > priority(0) > priority(1) > priority(500)
    # SGLang's router refuses a priority past 32 bits (a 422), measured against sglang-router 0.3.2.
    assert -(2**31) < priority(10**12) and INTERACTIVE_PRIORITY < 2**31


def test_the_running_cap_is_what_sglangs_schedulers_run() -> None:
    """0.5.23's max_running_requests is the launch argument (None by default); the cap is each rank's
    effective_max_running_requests_per_dp."""
    default = {"max_running_requests": None, "dp_size": 1,
               "internal_states": [{"effective_max_running_requests_per_dp": 3072}]}
    assert sglang_running_cap(default) == 3072
    assert sglang_running_cap({**default, "dp_size": 2}) == 6144                 # one rank reported
    two = {**default, "dp_size": 2, "internal_states": [{"effective_max_running_requests_per_dp": 100}] * 2}
    assert sglang_running_cap(two) == 200
    assert sglang_running_cap({"max_running_requests": 64, "internal_states": [{}]}) == 64   # older servers
    assert sglang_running_cap({"internal_states": [{}]}) is None
