"""Logprobs: chat `logprobs` + `top_logprobs` (0-20) and completions `logprobs` (int), in OpenAI's shapes, in a batch
and interactively (plain and streamed); the log-probabilities are those of the distribution each token was drawn
from, after logit bias, penalties and temperature."""
from __future__ import annotations

import openai
import pytest
import torch

from blendserve.worker.engines.base import SamplingParams
from blendserve.worker.engines.cpu.sampler import SamplingState, sample
from tests.conftest import TINY
from tests.live import read_lines, run_batch

ASK = [{"role": "user", "content": "Tell me a story."}]


@pytest.fixture(scope="module")
def no_specials(tiny_engine) -> dict:
    """A bias that bans the special tokens, so the text is every token's bytes and outputs run to max_tokens."""
    tok = tiny_engine.tokenizer
    return {str(i): -100 for i in tok.all_special_ids}


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.6])
def test_logprobs_are_of_the_distribution_sampled_from(temperature) -> None:
    torch.manual_seed(0)
    logits = torch.randn(1, 50) * 3
    params = SamplingParams(max_tokens=4, temperature=temperature, seed=3, presence_penalty=1.5,
                            frequency_penalty=0.5, logit_bias=((7, 4.0), (9, -100.0)), logprobs=5)
    state = SamplingState(params)
    state.record(7)
    state.record(7)
    token = sample(logits.clone(), [state])[0]
    want = logits[0].clone()
    want[7] += 4.0 - (2 * 0.5 + 1.5)
    want[9] -= 100.0
    want = torch.log_softmax(want / (temperature or 1.0), dim=-1)
    chosen, lp, top = state.logprobs[-1]
    assert chosen == token and lp == pytest.approx(float(want[token]), abs=1e-5)
    values, ids = want.topk(5)
    assert [t for t, _ in top] == ids.tolist() and [v for _, v in top] == pytest.approx(values.tolist(), abs=1e-5)


def test_chat_logprobs_interactive_plain_and_streamed(served, no_specials) -> None:
    c = served.client()
    r = c.chat.completions.create(model=TINY, messages=ASK, max_tokens=8, temperature=0, logprobs=True,
                                  top_logprobs=3, logit_bias=no_specials)
    choice = r.choices[0]
    content = choice.logprobs.content
    assert len(content) == r.usage.completion_tokens == 8
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob)   # greedy: the likeliest (ties happen)
        assert [t.logprob for t in e.top_logprobs] == sorted((t.logprob for t in e.top_logprobs), reverse=True)
    assert bytes(b for e in content for b in e.bytes).decode(errors="replace") == choice.message.content
    chunks = list(c.chat.completions.create(model=TINY, messages=ASK, max_tokens=8, temperature=0, logprobs=True,
                                            top_logprobs=3, logit_bias=no_specials, stream=True))
    streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert len(streamed) == 8 and all(len(e.top_logprobs) == 3 for e in streamed)
    assert bytes(b for e in streamed for b in e.bytes).decode(errors="replace") == text
    none = c.chat.completions.create(model=TINY, messages=ASK, max_tokens=2, logprobs=False)
    assert none.choices[0].logprobs is None


def test_logprobs_out_of_range_are_400(served) -> None:
    c = served.client()
    for kw in ({"logprobs": True, "top_logprobs": 21}, {"top_logprobs": 2}):
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=TINY, messages=ASK, max_tokens=2, **kw)
        assert e.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=TINY, prompt="Once", max_tokens=2, logprobs=6)
    assert e.value.body["param"] == "logprobs"


def test_logprobs_in_a_batch_chat_and_completions(served, no_specials) -> None:
    c = served.client()
    chat = [{"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": TINY, "messages": ASK, "max_tokens": 5, "logprobs": True, "top_logprobs": 2,
                      "temperature": 1.0, "seed": i, "logit_bias": no_specials}} for i in range(3)]
    b = run_batch(c, chat)
    assert b.status == "completed", b
    for line in read_lines(c, b.output_file_id):
        body = line["response"]["body"]
        content = body["choices"][0]["logprobs"]["content"]
        assert len(content) == body["usage"]["completion_tokens"] == 5
        assert all(set(e) == {"token", "logprob", "bytes", "top_logprobs"} and len(e["top_logprobs"]) == 2
                   for e in content)
    plain = [{"custom_id": f"p{i}", "method": "POST", "url": "/v1/completions",
              "body": {"model": TINY, "prompt": f"Once upon a time {i}", "max_tokens": 4, "logprobs": 2,
                       "logit_bias": no_specials}} for i in range(2)]
    b = run_batch(c, plain, endpoint="/v1/completions")
    assert b.status == "completed", b
    for line in read_lines(c, b.output_file_id):
        choice = line["response"]["body"]["choices"][0]
        lp = choice["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 4
        assert all(tok in top and len(top) >= 2 for tok, top in zip(lp["tokens"], lp["top_logprobs"]))
        assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][0] == 0
