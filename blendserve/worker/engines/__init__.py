"""Engines behind blendserve.worker.engines.base.Engine, by kind: a factory for generation and, where the
kind has one, for an embedding checkpoint (all-MiniLM-L6-v2 beside SmolLM2: /v1/embeddings). Each engine
is imported only when chosen, so a CPU machine never imports sglang or vllm; each gets its settings from
the deployment's, passed in."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from blendserve.worker.engines.base import Engine
from blendserve.worker.engines.speculative import SpecConfig

if TYPE_CHECKING:     # the CPU engine imports without pydantic (scripts/device_check.sh)
    from blendserve.core.config import Settings

Factory = Callable[[Path, str, "Settings"], Engine]


def _cpu(path: Path, name: str, s: Settings) -> Engine:
    from blendserve.worker.engines.cpu import CpuEngine

    return CpuEngine(path, name, config=s.cpu, speculative=SpecConfig.from_settings(s.spec, default="ngram"),
                     grammar=s.grammar)


def _cpu_embedding(path: Path, name: str, s: Settings) -> Engine:
    from blendserve.worker.engines.embed import EmbeddingEngine

    return EmbeddingEngine(path, name, threads=s.cpu.threads or None)


def _sglang(path: Path, name: str, s: Settings) -> Engine:
    from blendserve.worker.engines.sglang import SGLangEngine

    return SGLangEngine(path, name, tp=s.tp, options=s.sglang, speculative=SpecConfig.from_settings(s.spec))


def _sglang_embedding(path: Path, name: str, s: Settings) -> Engine:
    from blendserve.worker.engines.sglang_embed import SGLangEmbeddingEngine

    return SGLangEmbeddingEngine(path, name, tp=s.tp, options=s.sglang)


def _vllm(path: Path, name: str, s: Settings) -> Engine:
    from blendserve.worker.engines.vllm import VllmEngine, VllmOptions

    return VllmEngine(path, name, VllmOptions.from_settings(s.vllm, s.spec))


def _vllm_embedding(path: Path, name: str, s: Settings) -> Engine:
    from blendserve.worker.engines.vllm import VllmOptions
    from blendserve.worker.engines.vllm_embed import VllmEmbeddingEngine

    return VllmEmbeddingEngine(path, name, VllmOptions.from_settings(s.vllm))


def _server(path: Path, name: str, s: Settings) -> Engine:
    from blendserve.worker.engines.server import ServerEngine

    return ServerEngine(name, s.server_engine, path)


def _echo(path: Path, name: str, s: Settings) -> Engine:
    from blendserve.worker.engines.echo import EchoEngine

    return EchoEngine(name, config=s.echo)


@dataclass(frozen=True)
class Kind:
    """How to start one engine kind: its generation engine, and its embedding engine where it has one."""
    generation: Factory
    embedding: Factory | None = None


REGISTRY: dict[str, Kind] = {
    "cpu": Kind(_cpu, _cpu_embedding),
    "sglang": Kind(_sglang, _sglang_embedding),
    "vllm": Kind(_vllm, _vllm_embedding),
    "openai": Kind(_server),        # a running server (--url)
    "echo": Kind(_echo),
}
ENGINES = tuple(REGISTRY)


def load_engine(kind: str, model_path: Path, model_name: str, settings: Settings) -> Engine:
    """The `kind` engine for the model at `model_path`: its embedding engine on an embedding checkpoint."""
    if kind not in REGISTRY:
        raise ValueError(f"engine {kind!r} is not available; choose one of {ENGINES}")
    engines = REGISTRY[kind]
    if engines.embedding is not None:
        from blendserve.core.embedstore import is_embedding_checkpoint

        if is_embedding_checkpoint(model_path):
            return engines.embedding(model_path, model_name, settings)
    return engines.generation(model_path, model_name, settings)
