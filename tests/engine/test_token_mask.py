"""The C++ grammar-mask kernel against xgrammar's own apply: the same logits set to -inf, on rows of every kind
(all allowed, all banned, mixed words, a vocabulary that ends inside a word), only on the rows named."""
from __future__ import annotations

import pytest
import torch
import xgrammar as xgr

from blendserve.worker.engines.cpu.native import token_mask


@pytest.mark.parametrize("vocab", [49152, 1000])          # a whole last word; a last word cut at 8 tokens
def test_the_kernel_masks_what_xgrammar_masks(vocab: int) -> None:
    op = token_mask()
    assert op is not None, "the kernel must build where the tests run (g++ and ninja are in the image)"
    gen = torch.Generator().manual_seed(0)
    rows, words = 12, (vocab + 31) // 32
    bitmask = torch.randint(-2**31, 2**31 - 1, (rows, words), dtype=torch.int32, generator=gen)
    bitmask[0] = -1                                  # every token allowed
    bitmask[1] = 0                                   # none (a dead end the engine never samples from)
    bitmask[2, ::2] = -1                             # whole words allowed beside whole words banned
    bitmask[2, 1::2] = 0
    bitmask[3, -1] = 1 << 5                          # one token allowed in the last word
    logits = torch.randn(rows, vocab, generator=gen)
    chosen = [0, 1, 2, 3, 5, 8, 11]
    expect = logits.clone()
    xgr.apply_token_bitmask_inplace(expect, bitmask, vocab_size=vocab, indices=chosen)
    got = logits.clone()
    op(got, bitmask, torch.tensor(chosen), vocab)
    assert torch.equal(got, expect)
    assert torch.equal(got[4], logits[4])            # a row not named is untouched
    assert torch.isinf(got[1]).all() and not torch.isinf(got[0]).any()


def test_the_kernel_refuses_a_row_out_of_range() -> None:
    op = token_mask()
    with pytest.raises(RuntimeError, match="out of range"):
        op(torch.zeros(2, 64), torch.zeros(2, 2, dtype=torch.int32), torch.tensor([2]), 64)
