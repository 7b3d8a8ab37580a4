"""JSON-schema grammars for the CPU engine (xgrammar): compiled once per schema, off the step path.

xgrammar is the grammar library vLLM and SGLang use: a schema compiles to a
grammar over the tokenizer's vocabulary, and a per-sequence matcher yields,
before each token, the bitmask of tokens that keep the output a prefix of a
document the schema accepts. Here:

* ``Grammars.get`` hands out a future of the compiled grammar, keyed by the
  schema's hash: a pool of compile threads (BLENDSERVE_GRAMMAR_COMPILE_THREADS)
  compiles it, once per schema and process, so a slow compile holds one thread
  and the others go on. A constrained sequence waits in ``Held``, outside every
  step, until its grammar is ready (core.py's admission): the engine's step never
  waits for a compile. A compile that fails, or runs past its time budget
  (BLENDSERVE_GRAMMAR_COMPILE_TIMEOUT_S), fails that request alone with an error
  naming the limit. The validation that runs before a request reaches an
  engine (protocol/grammar_limits.py) already keeps compiles within a second or two;
  the budget bounds what gets past it.
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
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import torch

from blendserve.protocol.grammar_limits import reason
from blendserve.worker.engines.cpu.id_tokenizer import IdTokenizer
from blendserve.worker.engines.cpu.native import token_mask
from blendserve.worker.engines.driver import Refused, failure

CACHED = 256        # compiled grammars kept per engine; a sequence holds its own grammar while it runs


class Grammars:
    """Compiled grammars of one tokenizer, cached by schema hash; compiles run in a pool of threads."""

    def __init__(self, tokenizer, vocab_size: int, stop_ids: list[int], native: bool = True,
                 threads: int = 2, timeout_s: float = 10.0) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        self.vocab_size = vocab_size
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_ids)
        # Our own cache (below) keeps grammars by schema; xgrammar's would keep every one ever compiled.
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        # Apart from the mask thread: a long compile must never hold up the masks a step is waiting for.
        self.compiles = ThreadPoolExecutor(threads, thread_name_prefix="grammar-compile")
        self.timeout_s = timeout_s
        self.started: dict[Future, float] = {}       # a compile's future -> when it was submitted
        self.masks = ThreadPoolExecutor(1, thread_name_prefix="grammar-mask")
        self.cache: dict[str, Future] = {}
        self.lock = threading.Lock()
        self.buffer = xgr.allocate_token_bitmask(1, vocab_size)
        self.kernel = token_mask() if native else None

    @classmethod
    def of_engine(cls, engine: Any, key: int) -> Grammars:
        """The grammars of a CPU engine (engine.py's CpuEngine), with the compile threads and time budget of its
        GrammarSettings (None: the defaults). A model without its tokenizer has no vocabulary to compile to."""
        if isinstance(engine.tokenizer, IdTokenizer):
            raise ValueError(f"request {key}: JSON-schema output needs the model's tokenizer")
        budget = {} if engine.grammar is None else {"threads": engine.grammar.compile_threads,
                                                    "timeout_s": engine.grammar.compile_timeout_s}
        return cls(engine.tokenizer, int(engine.model.lm_head.shape[0]), sorted(engine.eos),
                   native=engine.decode_kernel is not None, **budget)

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
                self.started[fut] = time.monotonic()
                if len(self.cache) > CACHED:           # many distinct schemas: the oldest compiled ones go
                    old = next((k for k, f in self.cache.items() if f.done()), None)
                    if old is not None:
                        self.started.pop(self.cache.pop(old), None)
            else:                                      # most recently used last
                self.cache[key] = self.cache.pop(key)
        return fut

    def failed(self, fut: Future) -> str | None:
        """Why a grammar cannot be used: its compile failed or is past its time budget; None: ready or within
        its budget."""
        if fut.done():
            error = fut.exception()
            return None if error is None else f"the grammar engine could not compile the schema: {reason(error)}"
        if time.monotonic() - self.started.get(fut, time.monotonic()) > self.timeout_s:
            return (f"the schema's grammar did not compile within {self.timeout_s:g} s (the limit "
                    "BLENDSERVE_GRAMMAR_COMPILE_TIMEOUT_S)")
        return None

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


class Held:
    """Constrained sequences whose grammar still compiles: kept out of every step until it is ready, so a slow
    compile delays its own request and no other."""

    def __init__(self) -> None:
        self.seqs: list[tuple[Any, bool]] = []        # (sequence, urgent)

    def __len__(self) -> int:
        return len(self.seqs)

    def hold(self, seq: Any, urgent: bool) -> bool:
        """Keep ``seq`` here if its grammar is not compiled yet (True), else leave it to the caller (False)."""
        grammar: GrammarState | None = seq.state[1].grammar
        if grammar is None or (grammar.compiled.done() and grammar.compiled.exception() is None):
            return False
        self.seqs.append((seq, urgent))
        return True

    def release(self) -> tuple[list[tuple[Any, bool]], list[tuple[Any, str]]]:
        """The sequences now ready to run, and those whose grammar failed, with why."""
        ready, failed, kept = [], [], []
        for seq, urgent in self.seqs:
            grammar = seq.state[1].grammar
            if (why := grammar.grammars.failed(grammar.compiled)) is not None:
                failed.append((seq, why))
            else:
                (ready if grammar.compiled.done() else kept).append((seq, urgent))
        self.seqs = kept
        return ready, failed

    def drop(self, keys: set[int]) -> None:
        self.seqs = [(s, u) for s, u in self.seqs if s.key not in keys]

    def join(self, core: Any) -> Iterator[Any]:
        """Before a step of ``core`` (core.py's CpuCore): held sequences whose grammar is ready join its
        scheduler (interactive ones at once, batch ones first in the waiting line); those whose grammar failed
        yield their error result. With nothing else to run, wait briefly for a compile instead of spinning."""
        sched = core.sched
        if not sched.has_work() and not core.ready:
            self.wait(0.05)
        ready, failed = self.release()
        for seq, urgent in ready:
            if urgent:
                sched.admit_urgent(seq)
            else:
                sched.waiting.append(seq)
        for seq, why in failed:
            core.engine.results.choices.pop(seq.key, None)
            yield failure(seq.key, Refused(why), seq.prompt_len)

    def wait(self, timeout_s: float) -> None:
        """Block up to ``timeout_s`` for a held compile to end (the engine has nothing else to run)."""
        if self.seqs:
            wait([seq.state[1].grammar.compiled for seq, _ in self.seqs], timeout_s, FIRST_COMPLETED)
