"""Which tokens run in the next step: all running sequences first, then new ones, within a token budget.

Shaped after vLLM V1's scheduler (there is no separate prefill or decode phase):

* A sequence is ``tokens`` (prompt, then output) of which ``computed`` have
  K/V in the pool. Each step gives every running sequence, in admission order,
  what it still lacks (one token for a decode, the rest of its prompt for a
  prefill) cut to what is left of the step's token budget; then admits waiting
  sequences, in the order they came, while budget, the running cap and free
  KV blocks allow. So a step carries decodes and prefill chunks together.
* A sequence is admitted when its first chunk's blocks fit; it takes the
  cached blocks of its longest cached prefix (``BlockManager.match``) and
  computes the rest. At least the last token is always computed: its logits
  give the next token.
* When a running sequence needs a block and none is free, the most recently
  admitted sequence is preempted: its blocks are freed (their full blocks stay
  in the prefix cache) and it goes back to the front of the waiting line, to
  be recomputed, prompt and output so far, when it is admitted again.
* A sequence whose next uncached block is still to be computed by a running
  sequence's prefill (two requests behind one new prefix) waits rather than
  compute the same prefix again: a later step finds it in the cache. Admission stops there, so the order still holds.
* New sequences are pulled from the caller only when they could be admitted
  now, so the caller can still drop or reorder what was not pulled.
* Urgent (interactive) sequences (``admit_urgent``) skip the line: they join
  the running set at once, past the running cap, ahead of every batch
  sequence, so they get the step's budget first and are never the ones
  preempted while a batch sequence is left; tenants take turns among them,
  shortest remaining prompt first within a turn (``turns``).
  The step that finishes one's prefill runs interactive work alone (no batch
  decode, prefill or admission): its time is the interactive request's time
  to first token, after the step in flight; at most RUSH_STEPS such steps
  run in a row, so a stream of interactive prompts slows batch work, never
  stops it. While interactive work is about, the engine also caps what a
  step carries of batch work (``batch_cap`` tokens, oldest sequences first):
  the others keep their blocks and wait. An urgent sequence that arrives
  while a step runs does not wait for it: the engine runs its prompt between
  two layers of that step (``cut_in``).
* With speculative decoding (``speculative.py``), in steps of few sequences
  (``draft_max_running``), a decoding sequence's chunk
  grows by a draft after every running sequence has its own chunk, from what
  is left of the token budget and the free blocks (a draft never preempts);
  ``advance`` then commits only the verified tokens and frees blocks that only
  rejected draft tokens used.
"""
from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable

from blendserve.worker.engines.cpu.block_manager import BlockManager, block_hash
from blendserve.worker.engines.cpu.sequence import ScheduledChunk, Sequence, Step


def turns(urgent: list[Sequence]) -> list[Sequence]:
    """Interactive sequences in the order they get a step's tokens: tenants take turns, and within a tenant,
    and within a turn, the shortest rest of prompt first. So a short chat's prefill never queues behind
    another caller's long prompt (one tenant's 7,000-token prompts would otherwise delay every other chat),
    and a tenant's k-th request waits for every other tenant's first k (one tenant's many short chats
    would otherwise fill each step before another tenant's one chat)."""
    def rest(s: Sequence) -> int:
        return max(s.prompt_len - s.computed, 0)

    taken: Counter[str] = Counter()
    ranked = []
    for s in sorted(urgent, key=rest):
        ranked.append((taken[s.tenant], rest(s), len(ranked), s))
        taken[s.tenant] += 1
    return [s for *_, s in sorted(ranked, key=lambda r: r[:3])]


class Scheduler:
    WATERMARK = 0.01   # share of blocks a new admission leaves free, so running decodes rarely preempt at once
    RUSH_STEPS = 2     # steps in a row that may shut batch work out for interactive prefills

    def __init__(self, blocks: BlockManager, max_running: int, step_tokens: int,
                 drafter: Callable[[Sequence, int], list[int]] | None = None, draft_max_running: int = 0) -> None:
        """``drafter(seq, most)``, when given, proposes up to ``most`` tokens to follow ``seq``, in steps
        of at most ``draft_max_running`` sequences (0: any)."""
        self.blocks = blocks
        self.drafter = drafter
        self.draft_max_running = draft_max_running
        self.max_running = max_running
        self.step_tokens = step_tokens
        self.running: list[Sequence] = []
        self.waiting: deque[Sequence] = deque()   # preempted ones first, then at most one pulled
        self.batch_cap: int | None = None         # batch tokens a step may carry; None: the budget
        self.rushed = 0                           # steps in a row that carried no batch work (RUSH_STEPS)
        self.preemptions = 0

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def admit_urgent(self, seq: Sequence) -> None:
        """Put an interactive sequence into the running set now, after the urgent ones already there; it
        takes its cached prefix, and its blocks are found (by preempting batch work) when it is scheduled."""
        seq.urgent = True
        cached, hashes = self.blocks.match(seq.tokens, len(seq.tokens) - 1)
        self.blocks.take(cached)
        seq.block_table, seq.block_hashes = list(cached), hashes
        seq.computed = len(cached) * self.blocks.block_size
        if seq.cached_tokens is None:
            seq.cached_tokens = min(seq.computed, seq.prompt_len)
        self.running.insert(sum(s.urgent for s in self.running), seq)

    def cut_in(self, seqs: list[Sequence]) -> Step:
        """A step of the prompts of ``seqs`` (just admitted urgent sequences) alone, to run between two
        layers of the step in flight. Blocks come from the free pool only: the step in flight holds its
        own, so nothing can be preempted now; a prompt that does not fit waits for the next step."""
        step, budget = Step([]), self.step_tokens
        for seq in seqs:
            n = min(len(seq.tokens) - seq.computed, budget)
            need = self.blocks.blocks_for(seq.computed + n) - len(seq.block_table)
            if n <= 0 or need > self.blocks.free_blocks:
                break
            seq.block_table += self.blocks.allocate(need)
            step.chunks.append(ScheduledChunk(seq, seq.computed, n))
            budget -= n
        return step

    def schedule(self, pull: Callable[[], Sequence | None]) -> Step:
        budget = self.step_tokens
        step = Step([])
        scheduled: list[ScheduledChunk] = []
        batch_left, urgent_left = self._shares(budget, pull)
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(len(seq.tokens) - seq.computed, budget)
            if seq.urgent:
                if seq.computed < seq.prompt_len:             # a prefill chunk, within the interactive share
                    if urgent_left <= 0:
                        i += 1
                        continue
                    n = min(n, urgent_left)
                urgent_left -= n                              # a decode's token always runs
            else:
                if batch_left <= 0:
                    i += 1                                    # batch work waits for interactive work
                    continue
                n = min(n, batch_left)
                batch_left -= n
            need = self.blocks.blocks_for(seq.computed + n) - len(seq.block_table)
            while need > self.blocks.free_blocks:
                victim = self.running.pop()
                self._release(victim)
                if victim is seq and not self.running:       # alone and still too long for the pool
                    victim.finish_reason = "length"
                    step.finished.append(victim)
                else:
                    self.waiting.appendleft(victim)           # popped newest first: oldest ends at the front
                    step.preempted += 1
                if victim is seq:
                    break
            if seq not in self.running[i:i + 1]:
                break
            seq.block_table += self.blocks.allocate(need)
            scheduled.append(ScheduledChunk(seq, seq.computed, n))
            budget -= n
            i += 1
        # Victims come from the tail, after every sequence already scheduled: no chunk needs dropping.
        self.preemptions += step.preempted
        if self.drafter is not None and (not self.draft_max_running or len(scheduled) <= self.draft_max_running):
            budget = self._draft(scheduled, budget)
        if not step.preempted and batch_left > 0:
            self._admit(pull, min(budget, batch_left), scheduled, step)
        step.chunks = scheduled
        return step

    def _shares(self, budget: int, pull: Callable[[], Sequence | None]) -> tuple[int, int]:
        """This step's tokens for batch work and for interactive prefill; orders the interactive sequences."""
        urgent = sum(s.urgent for s in self.running)
        self.running[:urgent] = turns(self.running[:urgent])
        # Batch work this step: none while an interactive prompt finishes its prefill in it (a CPU step's
        # time grows with every token in it, and that step is the request's time to first token), at most
        # ``batch_cap`` tokens while interactive work is about (set by the engine), else the budget. Batch
        # work is never shut out for long: not by a long prompt's earlier chunks (its first token is steps
        # away whatever the step carries), nor for more than RUSH_STEPS steps in a row.
        rushing = self.rushed < self.RUSH_STEPS and any(
            s.urgent and 0 < s.prompt_len - s.computed <= budget for s in self.running)
        self.rushed = self.rushed + 1 if rushing else 0
        batch_left = 0 if rushing else budget if self.batch_cap is None else self.batch_cap
        # Outside those steps interactive prefill leaves batch work its share of the step (half at most):
        # a long prompt's chunks would otherwise take every token of every step until it is done.
        # Whether batch work is about: running, waiting, or the plan's next request, pulled now where this
        # step could admit it. Without the pull, interactive prefill that takes the whole budget would never
        # leave room to pull one, and a tenant's steady long prompts would shut every batch out.
        if urgent and batch_left and not self.waiting and len(self.running) == urgent < self.max_running \
                and (seq := pull()) is not None:
            self.waiting.append(seq)
        batch_about = self.waiting or len(self.running) > urgent
        urgent_left = budget - (min(batch_left, budget // 2) if batch_about else 0)
        return batch_left, urgent_left

    def _draft(self, scheduled: list[ScheduledChunk], budget: int) -> int:
        """Extend decode chunks by drafts, within the budget and the free blocks; returns the budget left."""
        bs = self.blocks.block_size
        for c in scheduled:
            if budget <= 0:
                break
            seq = c.seq
            if c.n != 1 or c.start + 1 != len(seq.tokens):
                continue
            room = (len(seq.block_table) + self.blocks.free_blocks) * bs - len(seq.tokens)
            draft = self.drafter(seq, min(budget, room))
            if draft:
                seq.block_table += self.blocks.allocate(
                    self.blocks.blocks_for(len(seq.tokens) + len(draft)) - len(seq.block_table))
                c.draft, c.n = draft, 1 + len(draft)
                budget -= len(draft)
        return budget

    def _admit(self, pull: Callable[[], Sequence | None], budget: int, scheduled: list[ScheduledChunk],
               step: Step) -> int:
        bs = self.blocks.block_size
        reserve = int(self.WATERMARK * self.blocks.num_blocks)
        in_flight = {h for c in scheduled if c.seq.prompt_hashes
                     for h in c.seq.prompt_hashes[c.start // bs:]}
        while budget > 0 and len(self.running) < self.max_running:
            if not self.waiting:
                seq = pull()
                if seq is None:
                    break
                self.waiting.append(seq)
            seq = self.waiting[0]
            cached, hashes = self.blocks.match(seq.tokens, len(seq.tokens) - 1)
            computed = len(cached) * bs
            if seq.prompt_hashes is None:
                seq.prompt_hashes = self._hashes(seq.tokens[:seq.prompt_len], hashes)
            if len(seq.prompt_hashes) > len(cached) and seq.prompt_hashes[len(cached)] in in_flight:
                break
            n = min(len(seq.tokens) - computed, budget)
            new = self.blocks.blocks_for(computed + n) - len(cached)
            cost = self.blocks.cost(cached, new)
            if cost > self.blocks.free_blocks - (reserve if self.running else 0):
                if not self.running and self.blocks.blocks_for(len(seq.tokens)) > self.blocks.num_blocks:
                    self.waiting.popleft()                     # longer than the whole pool: it can never run
                    seq.finish_reason = "length"
                    step.finished.append(seq)
                    continue
                break
            self.waiting.popleft()
            self.blocks.take(cached)
            seq.block_table = cached + self.blocks.allocate(new)
            seq.block_hashes = hashes
            seq.computed = computed
            if seq.cached_tokens is None:
                seq.cached_tokens = min(computed, seq.prompt_len)
            self.running.insert(sum(s.urgent for s in self.running) if seq.urgent else len(self.running), seq)
            scheduled.append(ScheduledChunk(seq, computed, n))
            in_flight.update(seq.prompt_hashes[computed // bs:])
            budget -= n
        return budget

    def _hashes(self, tokens: list[int], known: list[int]) -> list[int]:
        """Chained hashes of every full block of ``tokens``; the first ``len(known)`` are already known."""
        bs = self.blocks.block_size
        out = list(known)
        for i in range(len(known), len(tokens) // bs):
            out.append(block_hash(out[-1] if out else None, tuple(tokens[i * bs:(i + 1) * bs])))
        return out

    def advance(self, chunk: ScheduledChunk, committed: int | None = None) -> None:
        """After the forward pass: the chunk's K/V are in the pool; publish the blocks it filled.

        A drafted chunk commits only ``committed`` tokens (its last token and the
        accepted draft), the engine having appended the verified tokens first;
        blocks past the sequence's tokens held only rejected draft K/V and are freed.
        """
        seq = chunk.seq
        seq.computed += chunk.n if committed is None else committed
        bs = self.blocks.block_size
        if chunk.draft:
            keep = self.blocks.blocks_for(len(seq.tokens))
            self.blocks.free(seq.block_table[keep:])
            del seq.block_table[keep:]
        while len(seq.block_hashes) < seq.computed // bs:
            i = len(seq.block_hashes)
            tokens = tuple(seq.tokens[i * bs:(i + 1) * bs])
            h = block_hash(seq.block_hashes[-1] if seq.block_hashes else None, tokens)
            self.blocks.register(seq.block_table[i], h, tokens)
            seq.block_hashes.append(h)

    def finish(self, seq: Sequence) -> None:
        """Take a finished or cancelled sequence out, wherever it is, and free its blocks."""
        if seq in self.running:
            self.running.remove(seq)
            self._release(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    def _release(self, seq: Sequence) -> None:
        self.blocks.free(seq.block_table)
        seq.block_table, seq.block_hashes, seq.computed = [], [], 0
