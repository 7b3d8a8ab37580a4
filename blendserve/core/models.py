"""The job table: files, batches, one row per request, plan chunks and workers.

Every role talks through these rows only. Times that the OpenAI contract shows
are integer epoch seconds; leases and heartbeats are float seconds.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Index, Integer, LargeBinary, String, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Migration 0014's partial indexes: rows in their finish order, and finished rows not yet given an out_seq.
NUMBERED, UNNUMBERED = text("out_seq IS NOT NULL"), text("out_seq IS NULL AND finished_at IS NOT NULL")


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class File(Base):
    __tablename__ = "files"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    filename: Mapped[str] = mapped_column(String(512))
    purpose: Mapped[str] = mapped_column(String(32))
    bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[int] = mapped_column(Integer, index=True)
    expires_at: Mapped[int | None] = mapped_column(Integer, index=True)   # index: retention's sweep (0006)
    lines: Mapped[int | None] = mapped_column(Integer)   # lines of an upload: the queue quota's bound (0012)


class DeletedFile(Base):
    """A file deleted through the API, kept for a week (migration 0012) so that a list cursor (`after`) naming
    it still says where the next page starts: a script that deletes each file of a page as it goes would
    otherwise get a 404 for the next page."""

    __tablename__ = "deleted_files"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[int] = mapped_column(Integer)
    deleted_at: Mapped[int] = mapped_column(Integer, index=True)


class Batch(Base):
    __tablename__ = "batches"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    endpoint: Mapped[str] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(256))
    input_file_id: Mapped[str] = mapped_column(String(64), index=True)   # index: a file's unfinished batches (0012)
    completion_window: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), index=True)
    output_file_id: Mapped[str | None] = mapped_column(String(64))
    error_file_id: Mapped[str | None] = mapped_column(String(64))
    errors: Mapped[list[Any] | None] = mapped_column(JSON)
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON)
    created_at: Mapped[int] = mapped_column(Integer, index=True)
    in_progress_at: Mapped[int | None] = mapped_column(Integer)
    expires_at: Mapped[int] = mapped_column(Integer)
    finalizing_at: Mapped[int | None] = mapped_column(Integer)
    completed_at: Mapped[int | None] = mapped_column(Integer)
    failed_at: Mapped[int | None] = mapped_column(Integer)
    expired_at: Mapped[int | None] = mapped_column(Integer)
    cancelling_at: Mapped[int | None] = mapped_column(Integer)
    cancelled_at: Mapped[int | None] = mapped_column(Integer)
    total: Mapped[int] = mapped_column(Integer, default=0)
    # When the first of its requests was handed to an engine: in_progress -> first run is the planning wait.
    first_run_at: Mapped[float | None] = mapped_column(Float)

    # Retention (migration 0006): output_expires_after.seconds; its output and error files expire that long
    # after they are written (blendserve/scheduler/retention.py stamps and deletes them).
    output_expires_after_s: Mapped[int | None] = mapped_column(Integer)


class Request(Base):
    """One input line. status: [queued ->] pending -> planned -> completed | failed, or cancelled | expired.

    queued rows passed validation but are not tokenized yet (no prompt ids, maybe no max_tokens).
    body holds the request's parameters; its prompt (messages or prompt) stays in the input file,
    at input_offset, and is read once, to tokenize it.
    """

    __tablename__ = "requests"
    __table_args__ = (
        Index("ix_requests_batch_line", "batch_id", "line", unique=True),
        Index("ix_requests_status_model", "status", "model"),
        Index("ix_requests_chunk", "chunk_id", "position"),
        Index("ix_requests_batch_status", "batch_id", "status", "line"),
        Index("ix_requests_batch_out", "batch_id", "out_seq", sqlite_where=NUMBERED, postgresql_where=NUMBERED),
        Index("ix_requests_unnumbered", "batch_id", sqlite_where=UNNUMBERED, postgresql_where=UNNUMBERED),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    batch_id: Mapped[str] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"))
    line: Mapped[int] = mapped_column(Integer)
    custom_id: Mapped[str] = mapped_column(String(512))
    model: Mapped[str] = mapped_column(String(256))
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    input_offset: Mapped[int | None] = mapped_column(BigInteger)
    input_length: Mapped[int | None] = mapped_column(Integer)
    prompt_ids: Mapped[bytes | None] = mapped_column(LargeBinary)   # int32 little-endian
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    max_tokens: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    chunk_id: Mapped[int | None] = mapped_column(Integer)
    position: Mapped[int | None] = mapped_column(Integer)
    response: Mapped[dict[str, Any] | None] = mapped_column(JSON)   # the output line's response.body
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON)      # {"code", "message"}
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    finished_at: Mapped[float | None] = mapped_column(Float)
    # Engine tries that ended without a result (the stream raised, or the worker died running it
    # alone). A request with attempts runs alone; it fails once it reaches blendserve.worker.service.MAX_ATTEMPTS.
    # It lives on the request, not the chunk, so re-planning never resets it.
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Its place among its batch's finished requests, in the order they became visible (migration 0014;
    # blendserve/scheduler/outputs.py assigns it): the cursor of GET /v1/batches/{id}/output.
    out_seq: Mapped[int | None] = mapped_column(BigInteger)


class Chunk(Base):
    """A slice of the plan: requests run in `position` order by one worker under a lease."""

    __tablename__ = "chunks"
    __table_args__ = (Index("ix_chunks_claim", "model", "status", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model: Mapped[str] = mapped_column(String(256))
    seq: Mapped[int] = mapped_column(Integer)          # global plan order
    rank: Mapped[int | None] = mapped_column(Integer)  # data-parallel rank it was planned for; None = any
    status: Mapped[str] = mapped_column(String(16), default="pending")   # pending | claimed | done
    worker_id: Mapped[str | None] = mapped_column(String(64))
    lease_until: Mapped[float | None] = mapped_column(Float)
    # Claims; a chunk whose claims were lost LOST_CLAIMS times runs its requests alone (blendserve/worker/claims.py).
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)


class Worker(Base):
    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(256))
    engine: Mapped[str] = mapped_column(String(32))
    kv_capacity_tokens: Mapped[int] = mapped_column(Integer)
    step_tokens: Mapped[int | None] = mapped_column(Integer)   # tokens per mixed step; None: cannot mix
    # The planner's hardware profile (blendserve.planner.perf.HARDWARE) of its device; None: unknown (migration 0011)
    hardware: Mapped[str | None] = mapped_column(String(32))
    interactive_url: Mapped[str | None] = mapped_column(String(256))   # its interactive endpoint; None: none
    # Of its tokens, the last minute.
    interactive_share: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    host: Mapped[str] = mapped_column(String(256))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float)
    # Pushed with each heartbeat (migration 0008): the engine's load now; None when it cannot say.
    running_sequences: Mapped[int | None] = mapped_column(Integer)
    kv_used_tokens: Mapped[int | None] = mapped_column(Integer)


class PlanningRound(Base):
    """One planning round of one model, written by the scheduler (migration 0008) for /metrics and the dashboard.

    est_* are the policy's own estimate of the round's work (None where the policy makes none, as FCFS):
    seconds to run it, its compute and memory (KV read) seconds, and the prefill (uncached prompt) and
    decode tokens it expects, the same units as what the results later show ran.
    """

    __tablename__ = "planning_rounds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model: Mapped[str] = mapped_column(String(256))
    started_at: Mapped[float] = mapped_column(Float, index=True)
    duration_s: Mapped[float] = mapped_column(Float)
    requests: Mapped[int] = mapped_column(Integer)
    est_seconds: Mapped[float | None] = mapped_column(Float)
    est_compute_s: Mapped[float | None] = mapped_column(Float)
    est_memory_s: Mapped[float | None] = mapped_column(Float)
    est_prefill_tokens: Mapped[float | None] = mapped_column(Float)
    est_decode_tokens: Mapped[float | None] = mapped_column(Float)
    # Running totals of the model's rounds up to and including this one, so /metrics reads one row per model
    # and old rows can be deleted without a counter going back: rounds, requests, seconds, and per bound of
    # ROUND_BUCKETS_S the rounds that took at most that long (a Prometheus histogram's cumulative buckets).
    rounds_total: Mapped[int] = mapped_column(Integer, default=0)
    requests_total: Mapped[int] = mapped_column(BigInteger, default=0)
    seconds_total: Mapped[float] = mapped_column(Float, default=0.0)
    buckets_total: Mapped[list[Any]] = mapped_column(JSON, default=list)


ROUND_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)   # planning round duration bounds


class Lease(Base):
    """A role that must act alone per database (the scheduler) holds this row's lease; others stand by."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(128))
    until: Mapped[float] = mapped_column(Float, default=0.0)


# History out of the hot path (migration 0006): done chunks pile up with every batch ever run, and the
# planner asks which models have pending chunks and for chunks by seq each round. Request rows need
# nothing new: every planner query on them goes through ix_requests_status_model, which finished
# rows (completed, failed, cancelled, expired) never enter.
Index("ix_chunks_status_model", Chunk.status, Chunk.model)
Index("ix_chunks_seq", Chunk.seq)
Index("ix_planning_rounds_model_id", PlanningRound.model, PlanningRound.id)   # a model's latest round (0008)


class BatchCount(Base):
    """Running request_counts and usage of a batch, one row per writer (migration 0010).

    A status poll sums a few rows instead of aggregating a million request
    rows (250 ms at 100,000 on PostgreSQL, seconds at 1,000,000). Each
    writer (a worker rank, or the scheduler) adds to its own row in the
    transaction that finishes the requests, so counts are exact and writers
    never contend on one hot row. blendserve/core/counts.py writes and reads them.
    """

    __tablename__ = "batch_counts"

    batch_id: Mapped[str] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True)
    writer: Mapped[str] = mapped_column(String(128), primary_key=True)
    completed: Mapped[int] = mapped_column(BigInteger, default=0)
    failed: Mapped[int] = mapped_column(BigInteger, default=0)          # failed, cancelled or expired
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)   # of completed requests
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
