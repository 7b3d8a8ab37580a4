"""The embedding engine: a sentence-transformers checkpoint (all-MiniLM-L6-v2) run as BERT + pooling +
normalization, prefill only, behind the same Engine contract as the generation engines."""
from blendserve.worker.engines.embed.engine import EmbeddingEngine, EmbedResult

__all__ = ["EmbeddingEngine", "EmbedResult"]
