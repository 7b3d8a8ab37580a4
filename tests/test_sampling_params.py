"""Request bodies to sampling parameters: OpenAI's explicit nulls mean the defaults."""
from worker.responses import sampling_params


def test_nulls_mean_defaults():
    p = sampling_params({"temperature": None, "top_p": None, "stop": None, "seed": None,
                         "presence_penalty": None, "frequency_penalty": None}, 8)
    assert (p.temperature, p.top_p, p.stop, p.seed, p.max_tokens) == (1.0, 1.0, (), None, 8)


def test_values_are_kept():
    p = sampling_params({"temperature": 0, "top_p": 0.5, "stop": "\n", "seed": 7}, 4)
    assert (p.temperature, p.top_p, p.stop, p.seed) == (0.0, 0.5, ("\n",), 7)
