"""The prefix-heavy mix the service benchmarks share: MMLU-style exams, long generations, chat.

- Exams: MMLU's 57 subjects (or the first ``subjects`` of them), each with its
  own 5-shot prefix as in MMLU's standard prompt (~890 tokens with SmolLM2's
  tokenizer; the paper's MMLU requests average 804 prompt tokens), and
  questions behind it answered in 1-2 tokens. Compute-dense, highly shared.
- Long generations: a short prompt, ``long_tokens`` output tokens. Memory-dense.
- Chat: behind a few shared system prompts, ``chat_tokens`` output tokens.

Rows are drawn at random, so kinds and subjects are interleaved in file order
as in a file merged from several jobs; that file order is what FCFS runs (and
what vLLM's run_batch runs). The prefix working set (subjects x prefix) is
meant to exceed the engine's prefix cache, as a real batch exceeds a GPU's:
then order decides what hits.
"""
from __future__ import annotations

import random

from blendserve.core.config import SMOLLM2

MMLU_SUBJECTS = [
    "abstract algebra", "anatomy", "astronomy", "business ethics", "clinical knowledge", "college biology",
    "college chemistry", "college computer science", "college mathematics", "college medicine", "college physics",
    "computer security", "conceptual physics", "econometrics", "electrical engineering", "elementary mathematics",
    "formal logic", "global facts", "high school biology", "high school chemistry", "high school computer science",
    "high school european history", "high school geography", "high school government and politics",
    "high school macroeconomics", "high school mathematics", "high school microeconomics", "high school physics",
    "high school psychology", "high school statistics", "high school us history", "high school world history",
    "human aging", "human sexuality", "international law", "jurisprudence", "logical fallacies", "machine learning",
    "management", "marketing", "medical genetics", "miscellaneous", "moral disputes", "moral scenarios", "nutrition",
    "philosophy", "prehistory", "professional accounting", "professional law", "professional medicine",
    "professional psychology", "public relations", "security studies", "sociology", "us foreign policy", "virology",
    "world religions",
]
SYSTEMS = [
    "You are a friendly travel agent for a small agency in Lisbon. You know the city's neighbourhoods, "
    "transport, food and museums well, and you always suggest one concrete next step. Keep answers short.",
    "You are a strict but kind grammar teacher. The user writes a sentence; you correct it, explain each "
    "change in plain words, and give one more example of the same rule.",
    "You are a support agent for a cloud storage product. Users ask about sync, sharing, quotas and "
    "billing. Answer step by step and never ask for passwords.",
]
TOPICS = ["a lighthouse keeper", "a lost robot", "two rival bakers", "a dragon who collects maps",
          "a city under the sea", "a clockmaker's apprentice", "a journey across a desert", "a haunted library"]


def few_shot(subject: str, shots: int = 5) -> str:
    """A subject's few-shot prefix, the same for every question on it (MMLU's prompt format)."""
    rng = random.Random(subject)
    parts = [f"The following are multiple choice questions (with answers) about {subject}.\n\n"]
    for _ in range(shots):
        answer = rng.randrange(4)
        parts.append(
            f"In {subject}, consider case {rng.randint(100, 999)}: a practitioner observes effect "
            f"{rng.randint(10, 99)} under condition {rng.randint(10, 99)} while measuring quantity "
            f"{rng.randint(10, 99)}. Which of the following statements about this case is correct, given the "
            f"standard textbook definitions and the usual exam conventions?\n"
            + "".join(f"{'ABCD'[j]}. The {'first second third fourth'.split()[j]} account, which holds that "
                      f"factor {rng.randint(1, 99)} dominates when level {rng.randint(1, 99)} is reached, "
                      f"{'and is' if j == answer else 'but is not'} supported by the evidence\n" for j in range(4))
            + f"Answer: {'ABCD'[answer]}\n\n")
    return "".join(parts)


def workload(n: int, seed: int = 0, *, subjects: int = 57, exams: float = 0.7, long: float = 0.15,
             long_tokens: int = 96, chat_tokens: int = 32, model: str = SMOLLM2) -> list[dict]:
    """``n`` chat-completions batch lines: ``exams`` of them exam questions, ``long`` long
    generations, the rest chat; kinds and subjects interleaved at random (seeded)."""
    rng = random.Random(seed)
    prefixes = [few_shot(s) for s in MMLU_SUBJECTS[:subjects]]
    rows = []
    for i in range(n):
        kind = rng.random()
        if kind < exams:
            s = rng.randrange(len(prefixes))
            q = (f"In {MMLU_SUBJECTS[s]}, which option best describes finding number {i}?\n"
                 + "".join(f"{'ABCD'[j]}. option {rng.randint(1, 999)}\n" for j in range(4)) + "Answer:")
            body = {"messages": [{"role": "user", "content": prefixes[s] + q}], "max_tokens": rng.choice([1, 2])}
        elif kind < exams + long:
            body = {"messages": [{"role": "user", "content": f"Write a long, detailed story about "
                                                             f"{rng.choice(TOPICS)} (story number {i})."}],
                    "max_tokens": long_tokens}
        else:
            body = {"messages": [{"role": "system", "content": rng.choice(SYSTEMS)},
                                 {"role": "user",
                                  "content": f"Request {i}: help me with case {rng.randint(1, 10**6)}."}],
                    "max_tokens": chat_tokens}
        rows.append({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                     "body": {"model": model, "temperature": 0, **body}})
    return rows
