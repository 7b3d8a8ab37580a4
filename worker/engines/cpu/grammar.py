"""JSON-schema grammars for the CPU engine (xgrammar): compiled once per schema, off the step path.

xgrammar is the grammar library vLLM and SGLang use: a schema compiles to a
grammar over the tokenizer's vocabulary, and a per-sequence matcher yields,
before each token, the bitmask of tokens that keep the output a prefix of a
document the schema accepts. Here:

* ``Grammars.get`` hands out a future of the compiled grammar, keyed by the
  schema's hash: a thread of its own compiles it (once per schema and process), so the
  engine's step never waits for a compile unless the first token of a request
  is due before its grammar is ready (a prompt's prefill runs meanwhile).
* ``GrammarState`` is one sequence's matcher. ``Grammars.prepare`` fills the
  next token's bitmask of a step's constrained sequences in one background job
  while the model's forward pass runs (as vLLM and SGLang overlap it);
  ``mask`` waits for it and applies it to the
  row of logits the sampler draws from; ``accept`` advances by the chosen token.
* Whitespace between JSON tokens is not free: a small model given the choice
  can emit blank lines until max_tokens, so outputs are compact JSON
  (``any_whitespace=False``: one space after ':' and ',').
"""
from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import torch


class Grammars:
    """Compiled grammars of one tokenizer, cached by schema hash; compiles run in one background thread."""

    def __init__(self, tokenizer, vocab_size: int, stop_ids: list[int]) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        self.vocab_size = vocab_size
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_ids)
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1)
        # Two threads: a long compile must never hold up the masks a step is waiting for.
        self.compiles = ThreadPoolExecutor(1, thread_name_prefix="grammar-compile")
        self.masks = ThreadPoolExecutor(1, thread_name_prefix="grammar-mask")
        self.cache: dict[str, Future] = {}
        self.lock = threading.Lock()

    @staticmethod
    def key(schema: str, strict: bool) -> str:
        return hashlib.sha256(f"{int(strict)}:{schema}".encode()).hexdigest()

    def get(self, schema: str, strict: bool) -> Future:
        """A future of the compiled grammar (cached: the same schema compiles once per process)."""
        key = self.key(schema, strict)
        with self.lock:
            fut = self.cache.get(key)
            if fut is None:
                fut = self.cache[key] = self.compiles.submit(self.compiler.compile_json_schema, schema,
                                                             any_whitespace=False, strict_mode=strict)
        return fut

    def state(self, schema: str, strict: bool) -> GrammarState:
        return GrammarState(self, self.get(schema, strict))

    def prepare(self, states: list[GrammarState]) -> None:
        """Fill the next token's bitmask of every state whose grammar is compiled, in one background job
        (each matcher's state is final until its next ``accept``); called just before the forward pass that
        yields their logits, so the masks are ready when it ends."""
        ready = [s for s in states if s.pending is None and s.compiled.done()]
        if ready:
            job = self.masks.submit(_fill_all, ready)
            for s in ready:
                s.pending = job


def _fill_all(states: list[GrammarState]) -> None:
    for s in states:
        s._fill()


class GrammarState:
    """One sequence's position in its grammar; its next-token bitmask."""

    def __init__(self, grammars: Grammars, compiled: Future) -> None:
        self.grammars, self.compiled = grammars, compiled
        self.matcher = None
        self.bitmask = grammars.xgr.allocate_token_bitmask(1, grammars.vocab_size)
        self.pending: Future | None = None

    def _matcher(self):
        if self.matcher is None:
            self.matcher = self.grammars.xgr.GrammarMatcher(self.compiled.result())
        return self.matcher

    def _fill(self) -> None:
        self._matcher().fill_next_token_bitmask(self.bitmask, 0)

    def mask(self, logits: torch.Tensor) -> None:
        """Disallowed tokens of one row of logits to -inf, in place."""
        if self.pending is not None:
            self.pending.result()
        else:
            self._fill()
        self.pending = None
        row = logits.view(1, -1)
        bitmask = self.bitmask.to(row.device, non_blocking=True)    # xgrammar masks on the logits' device
        self.grammars.xgr.apply_token_bitmask_inplace(row, bitmask, vocab_size=self.grammars.vocab_size)

    def accept(self, token: int) -> None:
        """Advance by the token chosen (always one the mask allowed); a stop token ends the matcher."""
        matcher = self._matcher()
        if not matcher.is_terminated():
            matcher.accept_token(token)
