import numpy as np
import pytest

from blendserve.planner.workload import Workload


def test_from_lists_round_trips_prompts_and_lengths():
    w = Workload.from_lists([[5, 6, 7], [], [5]], max_tokens=[10, 20, 30], output_len=[1, 2, 3])
    assert w.n == 3
    assert w.prompt_lens().tolist() == [3, 0, 1]
    assert w.tokens.dtype == np.int32 and w.offsets.dtype == np.int64
    assert w.tokens[w.offsets[0]:w.offsets[1]].tolist() == [5, 6, 7]
    assert w.max_tokens.tolist() == [10, 20, 30] and w.output_len.tolist() == [1.0, 2.0, 3.0]


def test_scalar_max_tokens_broadcasts_and_output_len_may_be_unknown():
    w = Workload.from_lists([[1], [2]], max_tokens=64)
    assert w.max_tokens.tolist() == [64, 64] and w.output_len is None


@pytest.mark.parametrize("kwargs", [
    dict(tokens=[1, 2], offsets=[0, 1], max_tokens=[1]),          # offsets do not end at len(tokens)
    dict(tokens=[1, 2], offsets=[0, 2, 1, 2], max_tokens=[1, 1, 1]),  # decreasing
    dict(tokens=[1, 2], offsets=[0, 2], max_tokens=[1, 1]),       # wrong max_tokens length
    dict(tokens=[1, 2], offsets=[0, 2], max_tokens=[1], output_len=[1, 2]),
    dict(tokens=[1, 2], offsets=[0, 2], max_tokens=[1], bound=[1, 1]),
])
def test_inconsistent_arrays_are_rejected(kwargs):
    with pytest.raises(ValueError):
        Workload(**{k: np.asarray(v) for k, v in kwargs.items()})
