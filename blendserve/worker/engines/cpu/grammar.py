"""JSON-schema grammars for the CPU engine (xgrammar): compiled once per schema, off the step path.

xgrammar is the grammar library vLLM and SGLang use: a schema compiles to a
grammar over the tokenizer's vocabulary, and a per-sequence matcher yields,
before each token, the bitmask of tokens that keep the output a prefix of a
document the schema accepts. Here:

* ``Grammars.get`` hands out a future of the compiled grammar, keyed by the
  schema's hash: a thread of its own compiles it (once per schema and process), so the
  engine's step never waits for a compile unless the first token of a request
  is due before its grammar is ready (a prompt's prefill runs meanwhile).
* ``GrammarState`` is one sequence's matcher; ``accept`` advances it by the
  chosen token.
* ``Grammars.prepare`` starts one background job that fills the next token's
  bitmask of every constrained row of a step into one shared buffer, while the
  model's forward pass runs (as vLLM and SGLang overlap it); ``StepMasks.apply``
  waits for it and sets the disallowed logits of those rows to -inf in one call
  (the C++ kernel of ``native.py``, else xgrammar's).
* Whitespace between JSON tokens is not free: a small model given the choice
  can emit blank lines until max_tokens, so outputs are compact JSON
  (``any_whitespace=False``: one space after ':' and ',').
"""
from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from blendserve.worker.engines.cpu.native import token_mask


class Grammars:
    """Compiled grammars of one tokenizer, cached by schema hash; compiles run in one background thread."""

    def __init__(self, tokenizer, vocab_size: int, stop_ids: list[int], native: bool = True) -> None:
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
        self.buffer = xgr.allocate_token_bitmask(1, vocab_size)
        self.kernel = token_mask() if native else None

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

    def prepare(self, states: list[GrammarState | None]) -> StepMasks | None:
        """Start filling the next token's bitmask of a step's rows (``None``: an unconstrained row) in one
        background job; called just before the forward pass that yields their logits, so the masks are ready
        when it ends. None when no row is constrained."""
        if all(s is None for s in states):
            return None
        if self.buffer.shape[0] < len(states):      # one buffer, grown to the largest step: no per-step alloc
            self.buffer = self.xgr.allocate_token_bitmask(len(states), self.vocab_size)
        return StepMasks(self, states, self.buffer)

    def apply(self, logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
        if self.kernel is not None and logits.device.type == "cpu" and logits.dtype == torch.float32 \
                and logits.is_contiguous():
            self.kernel(logits, bitmask, torch.tensor(rows, dtype=torch.long), self.vocab_size)
        else:       # xgrammar masks on the logits' device
            self.xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device, non_blocking=True),
                                                 vocab_size=self.vocab_size, indices=rows)


class StepMasks:
    """The next token's bitmasks of one step's constrained rows: filled in the background, applied at once."""

    def __init__(self, grammars: Grammars, states: list[GrammarState | None], bitmask: torch.Tensor) -> None:
        self.grammars, self.bitmask = grammars, bitmask
        self.rows = [i for i, s in enumerate(states) if s is not None]
        self.states = [states[i] for i in self.rows]
        self.job = grammars.masks.submit(self._fill)

    def _fill(self) -> None:
        # Each matcher's state is final until its next accept, which comes after apply.
        for row, state in zip(self.rows, self.states):
            state.fill(self.bitmask, row)

    def apply(self, logits: torch.Tensor) -> None:
        """Disallowed tokens of the constrained rows of ``logits`` ([S, vocab], the step's rows) to -inf."""
        self.job.result()
        self.grammars.apply(logits, self.bitmask, self.rows)


class GrammarState:
    """One sequence's position in its grammar."""

    def __init__(self, grammars: Grammars, compiled: Future) -> None:
        self.grammars, self.compiled = grammars, compiled
        self.matcher = None

    def _matcher(self):
        if self.matcher is None:
            self.matcher = self.grammars.xgr.GrammarMatcher(self.compiled.result())
        return self.matcher

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        """The next token's bitmask into ``bitmask[row]`` (waits for the grammar's compile, on first use)."""
        self._matcher().fill_next_token_bitmask(bitmask, row)

    def accept(self, token: int) -> None:
        """Advance by the token chosen (always one the mask allowed); a stop token ends the matcher."""
        matcher = self._matcher()
        if not matcher.is_terminated():
            matcher.accept_token(token)
