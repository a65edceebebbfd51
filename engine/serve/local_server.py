"""A server the tests start on this machine (``vllm serve``, llama.cpp's ``llama-server``):
its process group, address, log, and how to wait for it and stop it. No Qt. A real deployment
is started by whoever runs it; the lab only connects (engine.serve.connect)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalServer:
    """A running server; ``stop`` ends it (its whole process group)."""

    process: subprocess.Popen
    url: str
    model: str
    log_path: Path
    started_s: float = 0.0
    api_key: str | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """Kill it at once (SIGKILL), as a crash would."""
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self, grace: float = 30.0) -> None:
        if not self.alive():
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until_up(
    server: LocalServer, name: str, ready: Callable[[], bool], timeout: float, poll: float = 1.0
) -> LocalServer:
    """Wait (at most ``timeout`` s) until ``ready()``; a process that exits or never gets
    ready is stopped and raises RuntimeError with its log's tail."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if not server.alive():
            raise RuntimeError(
                f"{name} exited with {server.process.returncode} while starting:\n"
                f"{server.log_tail()}"
            )
        try:
            if ready():
                server.started_s = time.perf_counter() - start
                return server
        except httpx.TransportError:
            pass
        time.sleep(poll)
    server.stop()
    raise RuntimeError(f"{name} did not come up in {timeout:.0f} s:\n{server.log_tail()}")


def launch(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start ``cmd`` in its own process group (``stop`` ends its children too), output to
    ``log``, no stdin."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
