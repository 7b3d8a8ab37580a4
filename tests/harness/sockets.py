"""Waiting on raw sockets without select.select, whose descriptors must be below 1,024: a test that holds a
thousand connections, or runs late in a suite that opened many files, gets higher ones."""
from __future__ import annotations

import select
import socket


def ready(socks: list[socket.socket], timeout: float, write: bool = False) -> tuple[list, list]:
    """(readable, writable) among `socks` within `timeout` seconds; a closed or failed peer counts as readable."""
    poll = select.poll()
    by_fd = {}
    for s in socks:
        poll.register(s, select.POLLIN | (select.POLLOUT if write else 0))
        by_fd[s.fileno()] = s
    events = poll.poll(max(timeout, 0) * 1000)
    readable = [by_fd[fd] for fd, ev in events if ev & (select.POLLIN | select.POLLHUP | select.POLLERR)]
    writable = [by_fd[fd] for fd, ev in events if ev & select.POLLOUT]
    return readable, writable
