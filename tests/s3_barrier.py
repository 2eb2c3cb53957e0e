"""A loopback TCP proxy in front of an S3 endpoint that makes two writers' Delta commits collide
every time: it holds each ``PUT`` of a ``_delta_log/<version>.json`` key until ``writers`` PUTs of
that key have arrived (or ``timeout_s`` passed), then forwards them all.

A Delta commit on S3 checks that ``<version>.json`` is absent and then uploads it; with a log store
whose create is not conditional the two steps are separate requests, so two writers that both
checked before either uploaded are both told they committed the version, and one commit is gone.
Left to timing, the two writers' checks fall inside that window rarely (1 commit of 12, 1 of 40 on
2026-11-27); the barrier puts every commit's upload after both checks, so every round collides.
With a conditional create (``If-None-Match: *``) the store itself refuses the second PUT, held or not.

Only the request line is read: an HTTP/1.1 client sends its next request on a connection after the
previous response, so a request starts a fresh read, and a read beginning ``PUT /…/_delta_log/
<digits>.json`` is such a request's head. Everything else is passed through byte for byte (SigV4
signatures stay valid: the ``Host`` header is the proxy's, as the client signed it).
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections import defaultdict

#: The request line of a Delta commit's upload (path-style: /bucket/…/_delta_log/<20 digits>.json).
COMMIT_PUT = re.compile(rb"^PUT (\S*/_delta_log/\d{20}\.json)(?:\?\S*)? HTTP/1\.[01]\r\n")


class CommitBarrier:
    """``with CommitBarrier(upstream_port, writers=2) as proxy:`` listens on ``proxy.port``
    (127.0.0.1) and forwards to ``127.0.0.1:upstream_port``. ``proxy.held`` counts, per key, the
    commit PUTs it held; ``proxy.released_by_timeout`` the keys released before all arrived."""

    def __init__(self, upstream_port: int, writers: int = 2, timeout_s: float = 60.0):
        self.upstream_port, self.writers, self.timeout_s = upstream_port, writers, timeout_s
        self.held: dict[bytes, int] = defaultdict(int)
        self.released_by_timeout: list[bytes] = []
        self._cond = threading.Condition()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False

    def __enter__(self) -> "CommitBarrier":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._closed = True
        self._listener.close()
        with self._cond:
            self._cond.notify_all()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()

    def _wait_for_peers(self, key: bytes) -> None:
        with self._cond:
            self.held[key] += 1
            self._cond.notify_all()
            deadline = time.monotonic() + self.timeout_s
            while self.held[key] < self.writers and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.released_by_timeout.append(key)
                    return
                self._cond.wait(left)

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_client:
                    match = COMMIT_PUT.match(data)
                    if match:
                        self._wait_for_peers(match.group(1))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
