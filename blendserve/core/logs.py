"""Log set-up shared by every role: plain lines for people, one JSON object a line for log shippers.

`BLENDSERVE_LOG_FORMAT=json` makes each record `{"ts", "level", "logger", "message"}`
plus the exception text, so Loki, Elasticsearch or CloudWatch parse it without a pattern.
"""
from __future__ import annotations

import json
import logging
import time

PLAIN = "%(asctime)s %(name)s %(levelname)s %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "message": record.getMessage(),
               "pid": record.process}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure(level: str, fmt: str = "plain") -> None:
    """Root logging for a role: ``fmt`` is Settings.log_format (``plain`` or ``json``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(PLAIN))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
