"""The live round's server: aiohttp (HTTP + WebSocket) on its own thread with its own event
loop, serving the student page and nothing else. No Qt.

aiohttp rather than Starlette on uvicorn: one dependency with no server process to manage,
an ``AppRunner`` that starts and stops cleanly inside a thread we own (uvicorn wants to own
the process's signals and loop), and WebSocket limits (``max_msg_size``, heartbeat) built in.

The window never waits on it: what happens here reaches the window as ``events`` (a
thread-safe queue the window drains on its display clock); what the window says to the
students goes through ``push_all`` / ``push_to``, which hand the message to the loop and
return at once. Each student has a bounded send queue drained by its own task with a send
timeout, so a client that never reads is dropped instead of holding up the class.

Limits: the page and its script are static files with a Content-Security-Policy (no inline
script, no other origin); HTTP requests and header lines are bounded; a WebSocket frame is at
most ``FRAME_MAX`` bytes; a socket's Origin must be the page's own; the first message must
join with the code within ``JOIN_WAIT_S``; wrong codes from one address are refused after
``WRONG_CODES``; each client may send ``RATE`` messages a second (a burst of ``BURST``) and is
dropped after ``STRIKES`` messages over it; at most ``LiveRound.cap`` students and
``MAX_SOCKETS`` open sockets. Nothing is logged or written to disk.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import queue
import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from engine.classroom import live_messages
from engine.classroom.live import LiveError, LiveRound, Student

PAGE_DIR = Path(__file__).resolve().parents[2] / "resources" / "live"
FILES = {"/": ("index.html", "text/html"), "/live.js": ("live.js", "text/javascript"),
         "/live.css": ("live.css", "text/css")}  # fmt: skip
FRAME_MAX = 1024  # bytes
REQUEST_MAX = 2048
RATE, BURST, STRIKES = 4.0, 8.0, 40
JOIN_WAIT_S = 15.0
WRONG_CODES = 20  # per address, for the server's life
SEND_QUEUE = 32  # messages waiting for one client before it is dropped
SEND_TIMEOUT_S = 3.0
MAX_SOCKETS = 400
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'{ws}; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")  # fmt: skip


def lan_addresses() -> list[str]:
    """This machine's addresses the class can reach: IPv4 ones, the likeliest first (the one
    the default route leaves by; no packet is sent), then IPv6 ones (global or unique local: a
    link-local address needs its interface named, which a browser's address bar refuses),
    then 127.0.0.1 (this machine only)."""
    found: list[str] = []
    for family, target in ((socket.AF_INET, "10.255.255.255"), (socket.AF_INET6, "2001:db8::1")):
        probe = socket.socket(family, socket.SOCK_DGRAM)
        try:
            probe.connect((target, 1))
            found.append(str(probe.getsockname()[0]))
        except OSError:
            pass
        finally:
            probe.close()
        try:
            infos = socket.getaddrinfo(socket.gethostname(), None, family)
        except OSError:
            infos = []
        found += [str(info[4][0]) for info in infos]
    out: list[str] = []
    for address in found:
        ip = ipaddress.ip_address(address.split("%")[0])
        if address not in out and not (ip.is_loopback or ip.is_link_local or ip.is_unspecified):
            out.append(address)
    return [*sorted(out, key=lambda a: ":" in a), "127.0.0.1"]


async def _no_icon(request: web.Request) -> web.Response:
    return web.Response(status=204)  # so a page logs no 404


@dataclass
class Client:
    ws: web.WebSocketResponse
    transport: Any = None  # asyncio's, to abort a client that does not read
    sid: int = 0
    out: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(SEND_QUEUE))
    tokens: float = BURST
    last: float = field(default_factory=time.monotonic)
    strikes: int = 0

    def allow(self) -> bool:
        """The token bucket: RATE messages a second, bursts of BURST."""
        now = time.monotonic()
        self.tokens = min(BURST, self.tokens + (now - self.last) * RATE)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        self.strikes += 1
        return False

    def abort(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


class LiveServer:
    """``start()`` binds (``host``, ``port``; 0 picks a free port) and returns the page's URL;
    ``stop()`` closes every socket and the thread. ``welcome(student)`` is the state a
    (re)joining student is sent (``live_messages.welcome``)."""

    def __init__(self, round_: LiveRound, host: str = "127.0.0.1", port: int = 0) -> None:
        self.round, self.host, self.port = round_, host, port
        self.events: queue.SimpleQueue = queue.SimpleQueue()  # (kind, sid) for the window
        self.welcome: Any = lambda student: live_messages.welcome(round_, student)
        self.clients: dict[int, Client] = {}  # sid -> its socket (the loop's thread only)
        self.sockets = 0
        self.wrong: dict[str, int] = defaultdict(int)
        self.refused: dict[str, int] = defaultdict(int)  # why -> how many (for tests, status)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/?code={self.round.code}"

    def start(self, timeout: float = 10.0) -> str:
        ready, failure = threading.Event(), []
        self._thread = threading.Thread(target=self._main, args=(ready, failure),
                                        name="live-round-server", daemon=True)  # fmt: skip
        self._thread.start()
        if not ready.wait(timeout):
            raise OSError("the live round's server did not start in time")
        if failure:
            self._thread.join(timeout)
            raise failure[0]
        return self.url

    def stop(self, timeout: float = 5.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and self._stopped is not None and loop.is_running():
            loop.call_soon_threadsafe(self._stopped.set)
        if thread is not None:
            thread.join(timeout)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- from the window's thread --------------------------------------------------------------

    def push_all(self, message: dict) -> None:
        self._call(self._fanout, None, json.dumps(message))

    def push_to(self, messages: dict[int, dict]) -> None:
        """One message per student (their own reveal)."""
        self._call(self._fanout, {sid: json.dumps(m) for sid, m in messages.items()}, "")

    def drop(self, sid: int, message: dict) -> None:
        """Tell a student (removed by the teacher) and close their socket."""
        self._call(self._drop, sid, json.dumps(message))

    def _call(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(fn, *args)

    # -- the loop's thread ---------------------------------------------------------------------

    def _main(self, ready: threading.Event, failure: list) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready))
        except BaseException as exc:  # a bind failure: the window says why
            failure.append(exc if isinstance(exc, OSError) else OSError(str(exc)))
            ready.set()
        finally:
            loop.close()

    async def _serve(self, ready: threading.Event) -> None:
        self._stopped = asyncio.Event()
        app = web.Application(client_max_size=REQUEST_MAX)
        app.router.add_get("/ws", self._socket)
        for path in FILES:
            app.router.add_get(path, self._file)
        app.router.add_get("/favicon.ico", _no_icon)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False,
            max_line_size=REQUEST_MAX, max_field_size=REQUEST_MAX,
        )  # fmt: skip
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=256)
        try:
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            await self._stopped.wait()
        finally:
            for client in list(self.clients.values()):
                await client.ws.close(code=1001, message=b"the round has ended")
            await self._runner.cleanup()

    async def _file(self, request: web.Request) -> web.Response:
        name, kind = FILES[request.path]
        body = (PAGE_DIR / name).read_bytes()
        # 'self' covers the page's own ws:// in current browsers; older Safari needs it named,
        # which a CSP source cannot do for an IPv6 literal ([::1] is refused as a source)
        ws = "" if request.host.startswith("[") else f" ws://{request.host}"
        headers = {"Content-Security-Policy": CSP.format(ws=ws),
                   "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                   "Cache-Control": "no-store", "X-Frame-Options": "DENY"}  # fmt: skip
        return web.Response(body=body, content_type=kind, charset="utf-8", headers=headers)

    def _refuse(self, why: str) -> None:
        self.refused[why] += 1

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Origin") != f"http://{request.host}":
            self._refuse("origin")
            raise web.HTTPForbidden(text="wrong origin")
        if self.sockets >= MAX_SOCKETS:
            self._refuse("sockets")
            raise web.HTTPServiceUnavailable(text="too many connections")
        ws = web.WebSocketResponse(max_msg_size=FRAME_MAX, heartbeat=20.0, compress=False)
        await ws.prepare(request)
        self.sockets += 1
        client = Client(ws, request.transport)
        sender = asyncio.ensure_future(self._sender(client))
        try:
            student = await self._join(client, request.remote or "?")
            if student is not None:
                await self._listen(client, student)
        finally:
            self.sockets -= 1
            sender.cancel()
            if client.sid and self.clients.get(client.sid) is client:
                del self.clients[client.sid]
                self.round.left(client.sid)
                self.events.put(("left", client.sid))
            await ws.close()
        return ws

    async def _receive(self, client: Client, timeout: float | None) -> Any:
        """The next JSON object from the client, or None when it is gone (or sent what no
        page sends: binary, an oversized frame, too many messages)."""
        while True:
            msg = await client.ws.receive(timeout)
            if msg.type != WSMsgType.TEXT:
                if msg.type == WSMsgType.ERROR or msg.type == WSMsgType.BINARY:
                    self._refuse("frame")
                return None
            if not client.allow():
                self._refuse("rate")
                if client.strikes >= STRIKES:
                    return None
                continue
            try:
                data = json.loads(msg.data)
            except ValueError:
                data = None
            if isinstance(data, dict):
                return data
            self._refuse("malformed")
            self._send(client, {"type": "error", "message": "that message makes no sense"})

    async def _join(self, client: Client, address: str) -> Student | None:
        if self.wrong[address] >= WRONG_CODES:
            self._refuse("code")
            return None
        try:
            data = await self._receive(client, JOIN_WAIT_S)
        except asyncio.TimeoutError:
            self._refuse("silent")
            return None
        while data is not None:
            if data.get("type") == "join":
                try:
                    student = self.round.join(data.get("code"), data.get("nick"), data.get("key"))
                except LiveError as exc:
                    self._send(client, {"type": "refused", "message": str(exc)})
                    if str(exc) == "wrong code":  # told so, then closed: one try a socket
                        self.wrong[address] += 1
                        self._refuse("code")
                        await asyncio.sleep(0.1)
                        return None
                else:
                    old = self.clients.get(student.sid)
                    if old is not None:  # the same student on a new socket: the old one goes
                        await old.ws.close(code=4000, message=b"joined elsewhere")
                    client.sid = student.sid
                    self.clients[student.sid] = client
                    self._send(client, {"type": "welcome", "nick": student.nick,
                                        "key": student.key})  # fmt: skip
                    for message in self.welcome(student):
                        self._send(client, message)
                    self.events.put(("joined", student.sid))
                    return student
            data = await self._receive(client, JOIN_WAIT_S)
        return None

    async def _listen(self, client: Client, student: Student) -> None:
        while (data := await self._receive(client, None)) is not None:
            if data.get("type") != "answer":
                continue
            try:
                self.round.answer(student.sid, data)
            except LiveError as exc:
                self._send(client, {"type": "error", "message": str(exc)})
            else:
                self._send(client, {"type": "answered"})
                self.events.put(("answer", student.sid))

    def _send(self, client: Client, message: dict | str) -> None:
        text = message if isinstance(message, str) else json.dumps(message)
        try:
            client.out.put_nowait(text)
        except asyncio.QueueFull:  # it does not read: let it go
            self._refuse("slow")
            client.abort()

    async def _sender(self, client: Client) -> None:
        try:
            while True:
                text = await client.out.get()
                await asyncio.wait_for(client.ws.send_str(text), SEND_TIMEOUT_S)
        except (asyncio.TimeoutError, ConnectionError, RuntimeError):
            self._refuse("slow")
            client.abort()

    def _fanout(self, each: dict[int, str] | None, text: str) -> None:
        if each is None:
            for client in list(self.clients.values()):
                self._send(client, text)
            return
        for sid, message in each.items():
            client = self.clients.get(sid)
            if client is not None:
                self._send(client, message)

    def _drop(self, sid: int, text: str) -> None:
        client = self.clients.pop(sid, None)
        if client is not None:
            self._send(client, text)
            asyncio.ensure_future(self._close_soon(client))

    async def _close_soon(self, client: Client) -> None:
        await asyncio.sleep(0.2)  # the message first
        await client.ws.close(code=4001, message=b"removed")
