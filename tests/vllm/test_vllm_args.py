"""vLLM's sampling fields on both paths, without vLLM: `top_p: 0` (OpenAI's likeliest token only) is top_k 1."""
from __future__ import annotations

from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.server.calls import body
from blendserve.worker.engines.vllm_args import nucleus


def test_top_p_zero_is_the_likeliest_token() -> None:
    assert nucleus(SamplingParams(8, top_p=0.0)) == {"top_p": 1.0, "top_k": 1}
    assert nucleus(SamplingParams(8, top_p=0.5)) == {"top_p": 0.5}


def test_the_server_body_never_sends_vllm_a_top_p_of_zero() -> None:
    req = GenRequest(1, [5, 6], SamplingParams(max_tokens=4, temperature=0.7, top_p=0.0))
    sent = body(req, "m", "vllm", False, True)
    assert (sent["top_p"], sent["top_k"], sent["temperature"]) == (1.0, 1, 0.7)
    assert body(req, "m", "openai", False, True)["top_p"] == 0.0      # OpenAI's own API takes it as is


def test_vllms_running_cap_is_read_where_it_publishes_one() -> None:
    """`/server_info?config_format=json` (VLLM_SERVER_DEV_MODE=1): max_num_seqs per data-parallel engine."""
    from blendserve.worker.engines.server.discovery import vllm_running_cap

    config = {"scheduler_config": {"max_num_seqs": 1024}, "parallel_config": {"data_parallel_size": 2}}
    assert vllm_running_cap(config) == 2048
    assert vllm_running_cap({"scheduler_config": {"max_num_seqs": 128}}) == 128
    assert vllm_running_cap({}) is None


def test_the_window_without_a_published_cap() -> None:
    """Twice the cap the server reports; with only its KV capacity, the KV window bounds it (ceiling 2048);
    with neither, 256."""
    from types import SimpleNamespace

    from blendserve.core.engine_settings import ServerEngineSettings
    from blendserve.worker.engines.server.discovery import ServerInfo
    from blendserve.worker.engines.server.engine import ServerEngine

    def window(info: ServerInfo, **settings) -> int:
        return ServerEngine.max_in_flight(SimpleNamespace(settings=ServerEngineSettings(**settings), info=info))

    assert window(ServerInfo("m", "vllm", kv_tokens=10**6, running_cap=1024)) == 2048
    assert window(ServerInfo("m", "vllm", kv_tokens=10**6)) == 2048
    assert window(ServerInfo("m", "openai")) == 256
    assert window(ServerInfo("m", "vllm", kv_tokens=10**6, running_cap=1024), max_in_flight=8) == 8
