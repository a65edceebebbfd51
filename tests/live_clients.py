"""Simulated students for the live round's tests: aiohttp WebSocket clients driven from their
own thread and event loop, so a Qt test's GUI thread stays free while they join and answer."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import aiohttp


class Students:
    def __init__(self, url_base: str, code: str) -> None:
        self.base, self.code = url_base, code
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.http: aiohttp.ClientSession | None = None
        self.sockets: list[Any] = []
        self.inbox: list[list[dict]] = []

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def join(self, nicks: list[str]) -> None:
        async def one(nick: str) -> None:
            if self.http is None:
                self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            ws = await self.http.ws_connect(self.base + "/ws", origin=self.base)
            await ws.send_json({"type": "join", "code": self.code, "nick": nick})
            box: list[dict] = []
            self.sockets.append(ws)
            self.inbox.append(box)
            asyncio.ensure_future(self._read(ws, box))

        async def all_() -> None:
            for nick in nicks:
                await one(nick)

        self.run(all_())

    async def _read(self, ws: Any, box: list[dict]) -> None:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                data = json.loads(msg.data)
                data["_at"] = time.monotonic()
                box.append(data)

    def send(self, answers: list[dict]) -> None:
        """One message per student, all at once."""

        async def go() -> None:
            await asyncio.gather(
                *(
                    ws.send_json({"type": "answer", **a})
                    for ws, a in zip(self.sockets, answers, strict=False)
                )
            )

        self.run(go())

    def last(self, i: int, kind: str) -> dict | None:
        found = [m for m in list(self.inbox[i]) if m["type"] == kind]
        return found[-1] if found else None

    def close(self) -> None:
        async def shut() -> None:
            for ws in self.sockets:
                await ws.close()
            if self.http is not None:
                await self.http.close()

        try:
            self.run(shut(), 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
