"""Engines behind blendserve.worker.engines.base.Engine. Each is imported only when chosen,
so a CPU machine never imports sglang or vllm."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from blendserve.worker.engines.base import Engine
from blendserve.worker.engines.speculative import SpecConfig

if TYPE_CHECKING:     # the CPU engine imports without pydantic (scripts/device_check.sh)
    from blendserve.core.config import Settings

ENGINES = ("cpu", "sglang", "vllm", "openai", "echo")   # openai: a running server (--url)


def load_engine(kind: str, model_path: Path, model_name: str, settings: Settings) -> Engine:
    if kind == "cpu":
        from blendserve.core.embedstore import is_embedding_checkpoint

        if is_embedding_checkpoint(model_path):     # all-MiniLM-L6-v2 beside SmolLM2: /v1/embeddings
            from blendserve.worker.engines.embed import EmbeddingEngine

            return EmbeddingEngine(model_path, model_name, threads=settings.cpu.threads or None)
        from blendserve.worker.engines.cpu import CpuEngine

        return CpuEngine(model_path, model_name, config=settings.cpu,
                         speculative=SpecConfig.from_settings(settings.spec, default="ngram"))
    if kind == "sglang":
        from blendserve.core.embedstore import is_embedding_checkpoint

        if is_embedding_checkpoint(model_path):     # SGLang's embedding mode: /v1/embeddings
            from blendserve.worker.engines.sglang_embed import SGLangEmbeddingEngine

            return SGLangEmbeddingEngine(model_path, model_name, tp=settings.tp, options=settings.sglang)
        from blendserve.worker.engines.sglang import SGLangEngine

        return SGLangEngine(model_path, model_name, tp=settings.tp, options=settings.sglang,
                            speculative=SpecConfig.from_settings(settings.spec))
    if kind == "vllm":
        from blendserve.core.embedstore import is_embedding_checkpoint
        from blendserve.worker.engines.vllm import VllmEngine, VllmOptions

        if is_embedding_checkpoint(model_path):     # vLLM's pooling runner: /v1/embeddings
            from blendserve.worker.engines.vllm_embed import VllmEmbeddingEngine

            return VllmEmbeddingEngine(model_path, model_name, VllmOptions.from_settings(settings.vllm))
        return VllmEngine(model_path, model_name, VllmOptions.from_settings(settings.vllm, settings.spec))
    if kind == "openai":
        from blendserve.worker.engines.server import ServerEngine

        return ServerEngine(model_name, settings.server_engine, model_path)
    if kind == "echo":
        from blendserve.worker.engines.echo import EchoEngine

        return EchoEngine(model_name, config=settings.echo)
    raise ValueError(f"engine {kind!r} is not available; choose one of {ENGINES}")
