"""The in-process vLLM engine's device-dependent settings, without vLLM: the measured CPU values on a CPU,
vLLM's own choice on a GPU (nothing passed), what the operator set on either."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from blendserve.core.engine_settings import VLLM_CPU_DEFAULTS, VllmSettings
from blendserve.worker.engines.vllm import VllmOptions

DEVICE_ARGS = ("max_num_seqs", "max_num_batched_tokens", "enforce_eager")


@pytest.fixture(autouse=True)
def _no_vllm_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults alone: no BLENDSERVE_VLLM_* from the environment the tests run in."""
    for name in [n for n in os.environ if n.startswith("BLENDSERVE_VLLM_")]:
        monkeypatch.delenv(name)



def test_a_cpu_gets_the_measured_values() -> None:
    a = VllmOptions.from_settings(VllmSettings(), gpu=False).engine_args(Path("/m"), "m")
    assert {k: a[k] for k in DEVICE_ARGS} == VLLM_CPU_DEFAULTS == {"max_num_seqs": 64,
                                                                   "max_num_batched_tokens": 4096,
                                                                   "enforce_eager": True}


def test_a_gpu_leaves_them_to_vllm() -> None:
    """Not passed: vLLM sizes its running cap and step from the GPU and captures CUDA graphs."""
    a = VllmOptions(**{**vars(VllmOptions.from_settings(VllmSettings(), gpu=True)), "dtype": "bfloat16"}) \
        .engine_args(Path("/m"), "m")
    assert not set(DEVICE_ARGS) & set(a)
    assert a["scheduling_policy"] == "priority" and a["enable_prefix_caching"]


def test_what_the_operator_sets_wins_on_either_device(monkeypatch) -> None:
    monkeypatch.setenv("BLENDSERVE_VLLM_MAX_NUM_SEQS", "512")
    monkeypatch.setenv("BLENDSERVE_VLLM_ENFORCE_EAGER", "false")
    for gpu in (False, True):
        o = VllmOptions.from_settings(VllmSettings(), gpu=gpu)
        assert (o.max_num_seqs, o.enforce_eager) == (512, False)
        assert o.max_num_batched_tokens == (None if gpu else 4096)
