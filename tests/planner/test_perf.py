"""The performance model against the worked test vectors of docs/design.md §3.12 (Llama-3-8B, A100)."""
import pytest

from blendserve.planner import perf

M = perf.ModelProfile("llama-3-8b", 8.03e9, 32, 8 * 128)
A100 = perf.HardwareProfile("a100", 312e12, 2.039e12, 80e9)


def test_wildchat_like_vector():
    comp, mem = perf.comp_time(496, 510, M, A100), perf.mem_time(496, 510, M, A100)
    assert comp == pytest.approx(0.0518, abs=5e-4)
    assert mem == pytest.approx(0.0246, abs=5e-4)
    assert float(perf.density(comp, mem)) == pytest.approx(2.10, abs=0.01)


def test_mmlu_like_vector_with_sharing():
    comp, mem = perf.comp_time(804, 2, M, A100), perf.mem_time(804, 2, M, A100)
    assert float(perf.density(comp, mem)) == pytest.approx(400.9, rel=2e-3)
    assert float(perf.density(comp, mem, 0.8646)) == pytest.approx(54.3, abs=0.1)


def test_openvid_like_vector():
    rho = perf.density(perf.comp_time(121, 16000, M, A100), perf.mem_time(121, 16000, M, A100))
    assert float(rho) == pytest.approx(0.099, abs=0.001)


def test_memory_split_figure6():
    m_l, m_r = perf.memory_split(60e9, 1.27, 3.73, 0.096)
    assert m_l / 1e9 == pytest.approx(19.4, abs=0.05)
    assert m_r / 1e9 == pytest.approx(40.6, abs=0.05)


@pytest.mark.parametrize("rho_l, rho_r, expect_left", [(5.0, 2.0, 0.0), (0.5, 0.1, 1.0)])
def test_memory_split_clamps_when_both_cursors_on_one_side(rho_l, rho_r, expect_left):
    m_l, m_r = perf.memory_split(10.0, 1.0, rho_l, rho_r)
    assert m_l == pytest.approx(10.0 * expect_left) and m_l + m_r == pytest.approx(10.0)


def test_idle_step_tokens_is_the_compute_that_hides_under_a_steps_fixed_cost():
    llama, a100, cpu = perf.MODELS["llama-3.1-8b"], perf.HARDWARE["a100-80gb"], perf.HARDWARE["cpu"]
    assert perf.idle_step_tokens(llama, a100) == pytest.approx(a100.flops / a100.bandwidth)     # ~153 tokens
    # Whatever the engine, those tokens compute in exactly the weight read plus the step overhead.
    floor = cpu.step_overhead          # the CPU profile folds the weight read into it (weight_bandwidth inf)
    assert float(perf.comp_time(0, perf.idle_step_tokens(llama, cpu), llama, cpu)) == pytest.approx(floor)
