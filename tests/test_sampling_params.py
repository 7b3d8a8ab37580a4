"""Request bodies to sampling parameters: OpenAI's explicit nulls mean the defaults."""
from blendserve.protocol.requests import sampling_params


def test_nulls_mean_defaults():
    p = sampling_params({"temperature": None, "top_p": None, "stop": None, "seed": None,
                         "presence_penalty": None, "frequency_penalty": None, "logit_bias": None}, 8)
    assert (p.temperature, p.top_p, p.stop, p.seed, p.max_tokens) == (1.0, 1.0, (), None, 8)
    assert (p.presence_penalty, p.frequency_penalty, p.logit_bias) == (0.0, 0.0, ())


def test_values_are_kept():
    p = sampling_params({"temperature": 0, "top_p": 0.5, "stop": "\n", "seed": 7, "presence_penalty": 1,
                         "frequency_penalty": -0.5, "logit_bias": {"50": -100, "7": 2.5}}, 4)
    assert (p.temperature, p.top_p, p.stop, p.seed) == (0.0, 0.5, ("\n",), 7)
    assert (p.presence_penalty, p.frequency_penalty) == (1.0, -0.5)
    assert p.logit_bias == ((7, 2.5), (50, -100.0))      # JSON's string keys become token ids
