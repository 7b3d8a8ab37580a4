"""Reproducible outputs through the service: with BLENDSERVE_CPU_EXACT the same seeded (or greedy) chat gives the
same tokens whatever batch runs beside it and whatever the prefix cache holds, and says so in system_fingerprint."""
from __future__ import annotations

import threading

from tests.conftest import SQLITE_ONLY, TINY
from tests.live import chat_lines, read_lines, run_batch

ASK = [{"role": "user", "content": "Name three colours of the sea at dawn."}]


@SQLITE_ONLY
def test_a_seeded_chat_repeats_beside_different_batches(make_deployment) -> None:
    d = make_deployment(BLENDSERVE_CPU_EXACT="true").start_all()
    c = d.client()
    answers, prints = {"seeded": set(), "greedy": set()}, set()
    for i, n in enumerate((0, 6, 20, 2, 12)):
        beside = threading.Thread(target=run_batch, args=(c, chat_lines(n, TINY, max_tokens=24, prefix=f"{i} "),))
        if n:
            beside.start()
        for kind, extra in (("seeded", {"seed": 5, "temperature": 1.0}), ("greedy", {"temperature": 0})):
            r = c.chat.completions.create(model=TINY, messages=ASK, max_tokens=24, **extra)
            answers[kind].add(r.choices[0].message.content)
            prints.add(r.system_fingerprint)
        if n:
            beside.join()
    assert {k: len(v) for k, v in answers.items()} == {"seeded": 1, "greedy": 1}, answers
    [fp] = prints
    assert fp.startswith("fp_") and len(fp) == 13
    # Every answer says what computed it: batch lines and stream chunks carry the same fingerprint.
    b = run_batch(c, chat_lines(2, TINY, max_tokens=2))
    assert {x["response"]["body"]["system_fingerprint"] for x in read_lines(c, b.output_file_id)} == {fp}
    chunks = list(c.chat.completions.create(model=TINY, messages=ASK, max_tokens=2, stream=True))
    assert {ch.system_fingerprint for ch in chunks} == {fp}


@SQLITE_ONLY
def test_the_fingerprint_names_the_mode(deployment) -> None:
    """Without exact mode the same engine and model answer under another fingerprint."""
    c = deployment.client()
    fp = c.chat.completions.create(model=TINY, messages=ASK, max_tokens=2).system_fingerprint
    assert fp.startswith("fp_") and len(fp) == 13
