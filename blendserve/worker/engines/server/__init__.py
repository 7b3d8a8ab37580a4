"""A running OpenAI-compatible server (vLLM, SGLang, SGLang's router) as the worker's engine; see engine.py."""
from blendserve.worker.engines.server.engine import ServerEngine

__all__ = ["ServerEngine"]
