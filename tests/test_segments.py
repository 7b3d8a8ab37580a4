"""The segment-cached chat encoder gives the ids of encoding each whole text, or turns itself off."""
from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

from blendserve.core.modelstore import load_tokenizer
from blendserve.core.segments import SegmentEncoder
from blendserve.protocol.bodies import model_info

TEXTS = ["plain words here", "日本語のテキストと中文", "emoji 🤖🎉👩‍👩‍👧", "e\u0301\u0301 combining",
         "   \t\n\n  spaces",
         "<|im_start|>user\nfake<|im_end|>", "<|im_end|><|im_start|>", "\u2028\u0085\x00 odd", "x" * 900, ""]


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def path(request, tiny_model):
    return tiny_model if request.param == "tiny" else request.getfixturevalue("smollm2_checkpoint")


@lru_cache
def tokenizer(path):
    return load_tokenizer(path)


def whole(path, texts: list[str]) -> list[list[int]]:
    """What transformers' own call gives (the ids every role used before the cache)."""
    return tokenizer(path)(texts, add_special_tokens=False)["input_ids"]


def chats(info, systems: list[str], users: list[str]) -> list[str]:
    return [info.render_chat(([{"role": "system", "content": s}] if s else []) + [{"role": "user", "content": u}])
            for s, u in zip(systems, users)]


def test_chat_prompts_match_whole_encoding_cold_and_cached(path):
    info = model_info("m", path)
    systems = [TEXTS[k % 4] * 3 if k % 3 else "" for k in range(60)]
    users = [f"{TEXTS[k % len(TEXTS)]} {k}" for k in range(60)]
    texts = chats(info, systems, users)
    for _ in range(3):                  # cold, then every system segment from the cache
        assert info.encode(texts) == whole(path, texts)
    assert info.encode([]) == []
    assert info.encode(TEXTS) == whole(path, TEXTS)     # bare texts, added tokens inside, empty ones


def test_completion_prompts_keep_the_tokenizers_special_tokens(path):
    info = model_info("m", path)
    assert info.encode_prompt(TEXTS) == tokenizer(path)(TEXTS)["input_ids"]


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=60), min_size=1, max_size=6), st.lists(st.text(max_size=30), min_size=1, max_size=6))
def test_any_text_matches_whole_encoding(smollm2_checkpoint, systems, users):
    info = model_info("m", smollm2_checkpoint, tokenizer(smollm2_checkpoint))   # one cache for every example
    n = min(len(systems), len(users))
    texts = chats(info, systems[:n], users[:n]) * 2     # the repeats come from the cache
    assert info.encode(texts) == whole(smollm2_checkpoint, texts)


def test_the_cache_holds_repeated_segments_once(smollm2_checkpoint):
    info = model_info("m", smollm2_checkpoint)
    encoder = info.encode.__self__
    texts = chats(info, ["You are terse. " * 30] * 200, [f"question {k}" for k in range(200)])
    assert info.encode(texts) == whole(smollm2_checkpoint, texts)
    assert encoder.on and "system\n" + "You are terse. " * 30 in encoder.cache


def metaspace_first() -> Tokenizer:
    """SentencePiece style: the word-start mark goes before the first split only, so splits depend on
    each other and segment-wise ids differ from whole-text ones."""
    vocab = {"[UNK]": 0, "▁a": 1, "a": 2, "<s>": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tok.add_special_tokens([AddedToken("<s>", normalized=False)])
    return tok


def test_a_tokenizer_with_dependent_splits_turns_the_cache_off():
    tok = metaspace_first()
    encoder = SegmentEncoder(tok)
    texts = ["a<s>a", "a<s>a<s>"] * 3
    assert encoder.encode(texts) == [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    assert not encoder.on


def test_stripping_added_tokens_never_use_the_cache():
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken("<s>", lstrip=True, normalized=False)])
    encoder = SegmentEncoder(tok)
    assert not encoder.on
    assert encoder.encode(["a <s> a"]) == [tok.encode("a <s> a", add_special_tokens=False).ids]
