"""Each engine's settings, a model of their own with their own BLENDSERVE_<ENGINE>_ prefix, nested in Settings.

Apart from blendserve/core/config.py so the service's settings and the engines' each read on one screen.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerEngineSettings(BaseSettings):
    """The `openai` engine (blendserve/worker/engines/server/): a worker in front of a running OpenAI-compatible server
    (`vllm serve`, SGLang's launch_server or router). What the server reports wins over these, except where
    a figure here is set: behind a router, the server reports one replica's cache, not the fleet's."""
    model_config = SettingsConfigDict(env_prefix="BLENDSERVE_SERVER_", extra="ignore")

    url: str = ""                             # the server's base URL, e.g. http://vllm:8000 (a trailing /v1 is fine)
    api_key: str = ""                         # sent as a Bearer token; "": none
    model: str = ""                           # the server's name for the model; "": its only one, or the worker's
    kv_tokens: int = 0                        # KV capacity in tokens; 0: what the server reports (else 65536)
    max_in_flight: int = 0                    # requests in flight at most; 0: twice the server's running cap (256)
    in_flight_kv: float = 2.0                 # prompt + max_tokens in flight, as a multiple of the KV capacity
    step_tokens: int = 0                      # tokens a step carries (the planner's blend); 0: the server's, else 2048
    hardware: str = ""                        # the planner's profile of the server's device (h100-sxm, cpu, ...)
    connect_timeout_s: float = 10.0           # to open a connection; a generation itself has no time limit
    health_interval_s: float = 5.0            # probe /health this often while requests are in flight
    retry_max_s: float = 10.0                 # longest wait between probes of a server that is down


class CpuEngineSettings(BaseSettings):
    """The embedded CPU engine (worker/engines/cpu). Defaults measured on 2-16 core machines (BENCHMARKS.md)."""
    model_config = SettingsConfigDict(env_prefix="BLENDSERVE_CPU_", extra="ignore", env_ignore_empty=True)

    threads: int = Field(0, ge=0)             # torch threads; 0: every CPU the process may run on
    # K/V pool in GiB, in the model's dtype (93K tokens of SmolLM2 in bfloat16); pages are mapped as blocks are
    # first used. Past 2 GiB a CPU's decode step is bound by reading the K/V anyway.
    kv_gb: float = Field(2.0, gt=0)
    block_size: int = Field(16, gt=0)         # vLLM's default: short shared prefixes still fill whole blocks
    max_batch: int = Field(256, gt=0)         # running sequences at most (the KV pool bounds them first)
    max_batched_tokens: int = Field(1024, gt=0)   # a step's tokens: every decode plus prefill chunks up to this
    rush_tokens: int = Field(256, ge=0)       # batch tokens a step carries while interactive requests are about
    cut_in: bool = True                       # interactive prompts run between two layers of the step in flight
    native: bool = True                       # C++ decode attention and grammar masks; False: torch's, xgrammar's
    # Batch-invariant steps: a token's logits do not depend on the other tokens of its step nor on what the
    # prefix cache held, so greedy and seeded outputs repeat exactly (needs `native`). Off by default: it
    # costs throughput (BENCHMARKS.md, CPU engine).
    exact: bool = False
    device: str = "cpu"                       # torch device of the weights and KV pool ("cuda", "cuda:1"); off CPU
    # attention runs on torch's SDPA (the C++ kernel is CPU-only)
    # "dummy": random weights of config.json's shapes, no weights file (vLLM's dummy load format); outputs run
    # to max_tokens (no end-of-sequence token)
    load_format: Literal["auto", "dummy"] = "auto"


class SpeculativeSettings(BaseSettings):
    """N-gram speculative decoding, one switch for every engine (blendserve/worker/engines/speculative.py)."""
    model_config = SettingsConfigDict(env_prefix="BLENDSERVE_SPEC_", extra="ignore", env_ignore_empty=True,
                                      populate_by_name=True)

    # BLENDSERVE_SPECULATIVE: ngram | off; unset: each engine's default (ngram on the CPU engine, off elsewhere).
    method: Literal["ngram", "off"] | None = Field(None, validation_alias="BLENDSERVE_SPECULATIVE")
    tokens: int = Field(8, ge=0)              # draft tokens a step at most
    ngram_min: int = Field(2, gt=0)           # a single matching token too often continues differently (chat)
    ngram_max: int = Field(3, gt=0)
    max_running: int = Field(4, ge=0)         # CPU engine: drafts only in steps of at most this many sequences

    @field_validator("method", mode="before")
    @classmethod
    def _method(cls, v: object) -> object:
        if isinstance(v, str):
            v = v.strip().lower()
            return "off" if v in ("0", "false", "no", "none") else (v or None)
        return v


# The in-process vLLM engine's settings whose right value depends on the device, as measured on CPU
# (BENCHMARKS.md): CUDA graphs / torch.compile take ~170 s to start on CPU instead of ~36 s eager. On a GPU
# each is left to vLLM, which sizes them from the GPU (max_num_seqs 1024 on GPUs of 70 GB or more in 0.32,
# CUDA graphs on, its own step tokens).
VLLM_CPU_DEFAULTS: dict[str, int | bool] = {"max_num_seqs": 64, "max_num_batched_tokens": 4096, "enforce_eager": True}


class VllmSettings(BaseSettings):
    """The in-process vLLM engine (blendserve/worker/engines/vllm.py); every other vLLM argument keeps vLLM's default.
    Unset device-dependent fields: vLLM's own choice on a GPU, VLLM_CPU_DEFAULTS on a CPU (`on_device`)."""
    model_config = SettingsConfigDict(env_prefix="BLENDSERVE_VLLM_", extra="ignore", env_ignore_empty=True)

    max_num_seqs: int | None = Field(None, gt=0)            # None: vLLM's on a GPU, 64 on CPU
    block_size: int = Field(32, gt=0)
    max_num_batched_tokens: int | None = Field(None, gt=0)  # None: vLLM's on a GPU, 4096 on CPU
    enforce_eager: bool | None = None         # None: CUDA graphs on a GPU (vLLM's default), eager on CPU
    dtype: str = ""                           # "": bfloat16 where the device computes it natively, else float32
    num_blocks: int | None = Field(None, gt=0)   # KV blocks instead of what the device's memory allows
    queued: int = Field(64, ge=0)             # requests waiting in vLLM beyond max_num_seqs, in plan order

    def on_device(self, gpu: bool) -> VllmSettings:
        """These settings with the device's defaults filled in: the CPU's measured values, or on a GPU None
        (not passed: vLLM decides) wherever nothing was set."""
        if gpu:
            return self
        return self.model_copy(update={k: v for k, v in VLLM_CPU_DEFAULTS.items() if getattr(self, k) is None})


class SglangSettings(BaseSettings):
    """The in-process SGLang engine (worker/engines/sglang.py); every other SGLang argument keeps SGLang's default."""
    model_config = SettingsConfigDict(env_prefix="BLENDSERVE_SGLANG_", extra="ignore", env_ignore_empty=True)

    mem_fraction_static: float | None = Field(None, gt=0, lt=1)   # GPU memory for weights + KV; None: SGLang's
    max_total_tokens: int | None = Field(None, gt=0)   # KV pool in tokens instead of what the memory allows
    chunked_prefill_size: int = Field(2048, gt=0)   # a mixed step's tokens: decodes + prefill chunk (the blend)
    max_running_requests: int | None = Field(None, gt=0)   # SGLang's running cap; None: SGLang's own
    in_flight_kv: float = Field(2.0, gt=0)    # prompt + max_tokens handed to SGLang, as a multiple of its KV pool
    deterministic: bool = False               # SGLang's deterministic inference: honours `seed`, costs throughput
    device: str = ""                          # "": SGLang's (cuda); "cpu": the CPU test bed (scripts/setup_sglang.sh)
    attention_backend: str = ""               # "": SGLang's choice; torch_native on the CPU test bed
    disable_cuda_graph: bool = False          # CUDA graphs capture decode steps (start-up cost, faster decode)
    dtype: str = ""                           # "": the checkpoint's (SGLang's "auto")


class EchoSettings(BaseSettings):
    """The echo engine (worker/engines/echo.py): no model, paced replies, for control-plane tests and benchmarks."""
    model_config = SettingsConfigDict(env_prefix="BLENDSERVE_ECHO_", extra="ignore", env_ignore_empty=True)

    tokens_per_s: float = Field(50.0, gt=0)   # decode tokens a second, per request
    prefill_tokens_per_s: float = Field(20000.0, gt=0)
    max_running: int = Field(256, gt=0)
    cache_tokens: int = Field(500_000, gt=0)  # the prefix cache it models, in tokens
