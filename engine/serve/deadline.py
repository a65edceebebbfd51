"""A whole-request deadline under httpx: connecting, the TLS handshake, sending, the headers
and the body together (issue 56). httpx's timeouts are per operation, so a server that sends
its headers one byte a second never trips them; here every socket operation of the request is
given at most the time left before the deadline, and one started after it fails at once.

It sits where httpx meets the socket: a network backend for httpcore's connection pool
(``httpcore.NetworkBackend``, the public interface its pool takes) wrapping the default one.
The deadline is per thread (the synchronous client runs a request on its caller's thread) and
set around each piece of network work by ``within``, never across a stream's ``yield``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

_local = threading.local()


@contextmanager
def within(end: float) -> Iterator[None]:
    """Socket work on this thread inside the block ends by ``end`` (``time.monotonic()``)."""
    before = getattr(_local, "end", None)
    _local.end = end
    try:
        yield
    finally:
        _local.end = before


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """The operation's timeout cut to the time left, or ``error`` when none is left."""
    end = getattr(_local, "end", None)
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise error("the request's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's synchronous backend whose every socket operation keeps the deadline."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None, socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:  # fmt: skip
        left = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_tcp(host, port, left, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def transport(verify: bool) -> httpx.HTTPTransport:
    """httpx's own transport, its pool on the deadline backend (where this httpx has the pool
    httpcore documents; otherwise as it is, with the body's deadline only)."""
    made = httpx.HTTPTransport(verify=verify)
    pool = getattr(made, "_pool", None)
    if isinstance(pool, httpcore.ConnectionPool) and hasattr(pool, "_network_backend"):
        pool._network_backend = DeadlineBackend(pool._network_backend)
    return made
