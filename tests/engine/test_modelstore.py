"""The model store: conversion, the tiny model, tokenizer and config helpers."""
from __future__ import annotations

import time
from pathlib import Path

from safetensors.torch import load_file

from blendserve.core.modelstore import (
    build_tiny_model,
    context_length,
    ensure_checkpoint,
    eos_token_ids,
    load_tokenizer,
    smollm2_gguf_path,
)


def test_tiny_model_is_deterministic(tiny_model: Path, tmp_path: Path) -> None:
    again = build_tiny_model(tmp_path / "again", seed=0)
    a, b = load_file(str(tiny_model / "model.safetensors")), load_file(str(again / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert load_tokenizer(tiny_model).get_vocab() == load_tokenizer(again).get_vocab()


def test_tiny_model_tokenizer_has_chatml(tiny_model: Path) -> None:
    tok = load_tokenizer(tiny_model)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert eos_token_ids(tiny_model) == [tok.convert_tokens_to_ids("<|im_end|>")]
    assert context_length(tiny_model) == 2048


def test_smollm2_checkpoint(smollm2_checkpoint: Path) -> None:
    assert smollm2_checkpoint.name == smollm2_gguf_path().stem
    start = time.monotonic()
    assert ensure_checkpoint(smollm2_gguf_path(), smollm2_checkpoint.parent) == smollm2_checkpoint
    assert time.monotonic() - start < 1.0
    # No temporary sibling left (storage.build_once's `.NAME.*`); the shared models dir may hold other models.
    assert not [p.name for p in smollm2_checkpoint.parent.iterdir() if p.name.startswith(".")]
    assert context_length(smollm2_checkpoint) == 8192
    tok = load_tokenizer(smollm2_checkpoint)
    assert eos_token_ids(smollm2_checkpoint) == [tok.convert_tokens_to_ids("<|im_end|>")]
    assert "<|im_start|>assistant" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
