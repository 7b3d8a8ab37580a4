"""Incremental stop strings agree with decoding the whole output, including across multi-byte characters."""
from __future__ import annotations

from pathlib import Path

from blendserve.core.modelstore import load_tokenizer
from blendserve.worker.engines.cpu.stops import StopChecker


def test_incremental_text_equals_full_decode(smollm2_checkpoint: Path) -> None:
    tok = load_tokenizer(smollm2_checkpoint)
    text = "Grüße aus Köln! 東京は晴れ。 The end -> stop here, not there."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    checker = StopChecker(tok, ("NEVER",))
    for t in ids:
        assert checker.add(t) is None
    assert checker.text == tok.decode(ids, skip_special_tokens=True)
    for stop in ("晴れ", "stop", "Köln!", " -> "):
        checker = StopChecker(tok, ("zzz", stop))
        cut = next(c for c in map(checker.add, ids) if c is not None)
        assert cut == text[: text.index(stop)]
