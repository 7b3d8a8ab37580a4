"""How deep a request body may nest: the same bound for a batch line and an interactive call.

A body the parsers take can still be too deep for what follows: orjson reads
1024 levels but writes 254 (a line's parameters are stored with it), the
standard library stops near Python's recursion limit, and schema and template
code recurses. No OpenAI body needs more than a few levels (structured outputs
allow 10), so MAX_DEPTH levels of arrays and objects is the rule, checked once
after parsing; past it the request fails alone with `nested_too_deeply`.
"""
from __future__ import annotations

import json
import re
from typing import Any

from blendserve.protocol.fields import BodyError

MAX_DEPTH = 64
_CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*("(?:[^"\\]|\\.)*")')


def check_depth(body: Any, param: str | None = None) -> None:
    """BodyError when `body` nests more than MAX_DEPTH arrays and objects; iterative, it stops at the bound."""
    stack: list[tuple[Any, int]] = [(body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BodyError("nested_too_deeply", f"The body nests arrays and objects more than {MAX_DEPTH} levels "
                            "deep.", param)
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


class TooDeep(BodyError):
    """A batch line nested deeper than the JSON parsers go (orjson: 1024 levels; json: Python's recursion limit).
    Its custom_id, when the text names one only, makes it that request's own error: the rest of the batch runs."""

    def __init__(self, text: str) -> None:
        super().__init__("nested_too_deeply", f"The line nests arrays and objects more than {MAX_DEPTH} levels "
                         "deep (too deep to parse).")
        found = _CUSTOM_ID.findall(text)
        cid = json.loads(found[0]) if len(found) == 1 else None
        self.custom_id = cid if isinstance(cid, str) and cid and len(cid) <= 512 and "\x00" not in cid else None
