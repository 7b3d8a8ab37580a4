"""Rows to OpenAI objects, field by field as the OpenAI API returns them."""
from __future__ import annotations

from blendserve.core.jobs import BatchStats
from blendserve.core.models import Batch, File


def file_obj(f: File) -> dict:
    return {"id": f.id, "object": "file", "bytes": f.bytes, "created_at": f.created_at,
            "expires_at": f.expires_at, "filename": f.filename, "purpose": f.purpose,
            "status": "processed", "status_details": None}


def batch_obj(b: Batch, s: BatchStats) -> dict:
    return {
        "id": b.id, "object": "batch", "endpoint": b.endpoint, "model": b.model,
        "errors": {"object": "list", "data": b.errors} if b.errors else None,
        "input_file_id": b.input_file_id, "completion_window": b.completion_window, "status": b.status,
        "output_file_id": b.output_file_id, "error_file_id": b.error_file_id,
        "created_at": b.created_at, "in_progress_at": b.in_progress_at, "expires_at": b.expires_at,
        "finalizing_at": b.finalizing_at, "completed_at": b.completed_at, "failed_at": b.failed_at,
        "expired_at": b.expired_at, "cancelling_at": b.cancelling_at, "cancelled_at": b.cancelled_at,
        "request_counts": {"total": s.total or b.total, "completed": s.completed, "failed": s.failed},
        "metadata": b.metadata_,
        "usage": {
            "input_tokens": s.input_tokens,
            "input_tokens_details": {"cached_tokens": s.cached_tokens},
            "output_tokens": s.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": s.input_tokens + s.output_tokens,
        },
    }


def page(data: list[dict], has_more: bool) -> dict:
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": has_more}
