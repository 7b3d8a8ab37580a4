"""The generator hits its targets, is seeded, and its request types look like the paper's."""
from __future__ import annotations

import numpy as np
import pytest

from blendserve.simulator import workloads as W
from blendserve.simulator.prefix import dfs_sharing_ratio
from tests.simulator.conftest import GPU, MODEL


@pytest.mark.parametrize("name", sorted(W.TRACES))
def test_traces_hit_target_density_and_sharing(name):
    rho, sharing = W.TRACES[name]
    w = W.generate(name, 20_000, seed=3)
    s = dfs_sharing_ratio(w)
    assert w.n == 20_000
    assert s == pytest.approx(sharing, abs=0.01)
    assert W.density(w, s, MODEL, GPU) == pytest.approx(rho, rel=0.04)


@pytest.mark.parametrize("name", ["grid-r0.80-s0.45", "grid-r1.40-s0.05", "grid-r1.10-s0.25"])
def test_grid_corners_hit_their_targets(name):
    rho, sharing = (float(x) for x in name[len("grid-r"):].split("-s"))
    w = W.generate(name, 20_000, seed=0)
    s = dfs_sharing_ratio(w)
    assert s == pytest.approx(sharing, abs=0.01)
    assert W.density(w, s, MODEL, GPU) == pytest.approx(rho, rel=0.04)


def test_grid_has_65_workloads_and_expands():
    names = W.grid_names()
    assert len(names) == 65 == len(set(names))
    assert names[0] == "grid-r0.80-s0.05" and names[-1] == "grid-r1.40-s0.45"
    assert W.expand("grid") == names and W.expand("trace1") == ["trace1"]


# Table 4 means (docs/design.md §3.12); output spreads are ours (see workloads.TYPES).
PAPER = {"burstgpt": (244, 27, 0.02), "mmlu": (804, 2, 0.86), "openvid": (121, 16000, 0.0),
         "wildchat": (496, 510, 0.19), "azure": (2508, 23, 0.01)}


@pytest.mark.parametrize("kind", sorted(PAPER))
def test_request_types_match_the_papers_means(kind):
    prompt, output, sharing = PAPER[kind]
    w = W.single(kind, 5_000 if prompt > 600 else 20_000, seed=1)   # long prompts: fewer, for speed
    assert w.prompt_lens().mean() == pytest.approx(prompt, rel=0.05)
    assert np.minimum(w.output_len, w.max_tokens).mean() == pytest.approx(output, rel=0.08)
    assert dfs_sharing_ratio(w) == pytest.approx(sharing, abs=0.015)


def test_generation_is_seeded():
    a, b, c = (W.generate("trace3", 3000, seed=s) for s in (7, 7, 8))
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.output_len, b.output_len)
    assert not np.array_equal(a.offsets, c.offsets) or not np.array_equal(a.tokens, c.tokens)


def test_mmlu_questions_sit_behind_few_shared_prefixes():
    w = W.single("mmlu", 2000, seed=0)
    first = w.tokens[w.offsets[:-1] + 20]          # a position inside every few-shot prefix
    assert len(np.unique(first)) <= W.TYPES["mmlu"].prefix_pool


def test_unknown_and_unreachable_workloads_are_clear_errors():
    with pytest.raises(ValueError, match="unknown workload"):
        W.generate("trace9", 10)
    with pytest.raises(ValueError, match="cannot be reached"):
        W.generate("grid-r0.80-s0.95", 1000)
    with pytest.raises(ValueError, match="bad grid"):
        W.generate("grid-rX-sY", 10)


def test_no_token_marks_a_dataset_by_default():
    """The paper's datasets share no marker: unshared prompts of one type do not open alike unless asked to."""
    for lead, alike in ((0, False), (1, True)):
        w = W.generate("openvid", 200, seed=3, lead=lead)
        first = w.tokens[w.offsets[:-1]]
        assert (len(np.unique(first)) == 1) is alike
    plain, marked = W.generate("trace1", 3000, seed=0), W.generate("trace1", 3000, seed=0, lead=1)
    assert dfs_sharing_ratio(marked) > dfs_sharing_ratio(plain)
