"""`expires_after` / `output_expires_after`, as OpenAI defines them: {"anchor": "created_at", "seconds": N}.

N is between 3600 (1 hour) and 2592000 (30 days); the only anchor is the
file's own created_at. The API stores the resulting expires_at (uploads) or
the policy (a batch's output and error files, stamped when they are written);
blendserve/scheduler/retention.py deletes what has expired.
"""
from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from blendserve.api.errors import APIError

MIN_SECONDS, MAX_SECONDS = 3600, 2592000


class ExpiresAfter(BaseModel):
    anchor: Literal["created_at"]
    seconds: int = Field(ge=MIN_SECONDS, le=MAX_SECONDS)


def form_expires_after(fields: dict[str, str], name: str) -> int | None:
    """The policy from multipart fields `name[anchor]` and `name[seconds]` (how the OpenAI SDK sends it).

    `anchor` may be left out (its only value is the default, as in OpenAI's Ruby SDK); `seconds` may not.
    """
    anchor, seconds = fields.get(f"{name}[anchor]"), fields.get(f"{name}[seconds]")
    if anchor is None and seconds is None:
        return None
    if anchor is not None and anchor != "created_at":
        raise APIError(400, f"Invalid value for '{name}.anchor': the supported anchor is 'created_at'.",
                       param=f"{name}.anchor", code="invalid_value")
    # ASCII digits only: str.isdigit() also accepts '²' and other digits int() refuses.
    if seconds is None or not re.fullmatch(r"[0-9]{1,10}", seconds.strip()) \
            or not MIN_SECONDS <= int(seconds) <= MAX_SECONDS:
        raise APIError(400, f"Invalid value for '{name}.seconds': an integer between {MIN_SECONDS} and "
                       f"{MAX_SECONDS} is required.", param=f"{name}.seconds", code="invalid_value")
    return int(seconds)


def expires_at(created_at: int, seconds: int | None) -> int | None:
    return None if seconds is None else created_at + seconds
