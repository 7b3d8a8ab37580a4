"""A tokenizer that needs no vocabulary: token ids in, ids out, each id's text its number.

For a random-weight model (``BLENDSERVE_CPU_LOAD_FORMAT=dummy``) whose directory holds only a
config.json: its outputs carry no text worth reading, and a throughput check that feeds token ids
runs where neither transformers nor a tokenizer file is at hand (an air-gapped GPU machine,
``scripts/device_check.sh``). It covers what the engine asks of a tokenizer: ``decode`` (results,
stop strings), ``convert_ids_to_tokens`` and ``all_special_ids`` (logprobs). JSON-schema output
needs a real vocabulary (xgrammar's) and is refused with it.
"""
from __future__ import annotations


class IdTokenizer:
    all_special_ids: list[int] = []
    chat_template = None

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def __len__(self) -> int:
        return self.vocab_size

    def convert_ids_to_tokens(self, token: int) -> str:
        return f"<{int(token)}>"

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(f"<{int(t)}>" for t in ids)
