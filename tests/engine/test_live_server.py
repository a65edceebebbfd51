"""The live round's server (engine.classroom.live_server) with real WebSocket clients on
127.0.0.1 (aiohttp's client): a round played through, the page's headers, and hostile clients
(markup and control characters, wrong origins and codes, oversized, binary and malformed
frames, floods, a client that never reads): each refused or shown as text, the round goes on.
The load test: 200 students answering in the same second, every answer counted once."""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc

import aiohttp
import numpy as np
import pytest

from engine.classroom import live_messages
from engine.classroom.live import GUESS, VOTE, Choice, Distribution, LiveRound
from engine.classroom.live_server import BURST, FRAME_MAX, STRIKES, WRONG_CODES, LiveServer

CODE = "ABCDE"


@pytest.fixture
def server():
    s = LiveServer(LiveRound(CODE), "127.0.0.1", 0)
    s.start()
    yield s
    s.stop()
    assert not s.running


def base(s: LiveServer) -> str:
    return f"http://127.0.0.1:{s.port}"


async def receive(ws, kind: str, timeout: float = 5.0) -> dict:
    """The next message of ``kind`` (others skipped)."""
    end = time.monotonic() + timeout
    while True:
        msg = await ws.receive(timeout=max(0.01, end - time.monotonic()))
        if msg.type != aiohttp.WSMsgType.TEXT:
            raise AssertionError(f"socket ended waiting for {kind}: {msg}")
        data = json.loads(msg.data)
        if data["type"] == kind:
            return data


async def join(http, s: LiveServer, nick: str, code: str = CODE, **kw):
    ws = await http.ws_connect(base(s) + "/ws", origin=base(s), **kw)
    await ws.send_json({"type": "join", "code": code, "nick": nick})
    return ws


async def ended(ws, timeout: float = 5.0) -> bool:
    """True once the server closes the socket (text messages before that skipped)."""
    msg = await ws.receive(timeout=timeout)
    while msg.type == aiohttp.WSMsgType.TEXT:
        msg = await ws.receive(timeout=timeout)
    return msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)


def drain(s: LiveServer) -> list:
    out = []
    while not s.events.empty():
        out.append(s.events.get())
    return out


def test_a_round_played_through_and_hostile_text_shown_as_text(server):
    async def main():
        async with aiohttp.ClientSession() as http:
            ws = await join(http, server, "<img src=x onerror=alert(1)>")
            assert "longer" in (await receive(ws, "refused"))["message"]
            await ws.send_json({"type": "join", "code": CODE, "nick": "<b>\x00\u202eSam</b>"})
            hello = await receive(ws, "welcome")
            assert hello["nick"] == "<b>Sam</b>"  # controls gone, markup kept as text
            await receive(ws, "wait")
            server.round.ask(GUESS, "Once upon a")
            server.push_all(live_messages.question(server.round.question))
            q = await receive(ws, "question")
            assert q["mode"] == GUESS and q["context"] == "Once upon a"
            await ws.send_json({"type": "answer", "guess": "<script>time</script>\x07"})
            await receive(ws, "answered")
            assert server.round.tally() == {"<script>time</script>": 1}
            await ws.send_json({"type": "answer", "guess": "x" * 41})
            assert "longer" in (await receive(ws, "error"))["message"]
            dist = Distribution(np.array([0.25, 0.75], np.float32), {0: " a", 1: " time"})
            v = server.round.reveal(dist, 1, {"<script>time</script>": 1})
            server.push_to(live_messages.reveals(v, list(server.round.students)))
            r = await receive(ws, "reveal")
            assert r["picked"] == " time" and r["mine"]["prob"] == 0.75 and r["mine"]["rank"] == 1
            await ws.close()

    asyncio.run(main())
    kinds = [k for k, _ in drain(server)]
    assert kinds == ["joined", "answer", "left"]


def test_the_page_and_its_headers(server):
    async def main():
        async with aiohttp.ClientSession() as http:
            async with http.get(base(server) + "/?code=ABCDE") as r:
                assert r.status == 200
                csp = r.headers["Content-Security-Policy"]
                assert "default-src 'none'" in csp and "script-src 'self'" in csp
                assert r.headers["X-Content-Type-Options"] == "nosniff"
                assert '<script src="/live.js"' in await r.text()
            for path in ("/live.js", "/live.css"):
                async with http.get(base(server) + path) as r:
                    assert r.status == 200
            for path in ("/../pyproject.toml", "/engine", "/ws/x", "/index.html"):
                async with http.get(base(server) + path) as r:
                    assert r.status == 404
            async with http.get(base(server) + "/", headers={"X-Big": "x" * 10_000}) as r:
                assert r.status in (400, 431)
            async with http.post(base(server) + "/", data=b"x" * 100_000) as r:
                assert r.status in (405, 413)

    asyncio.run(main())


def test_wrong_origin_no_origin_and_wrong_codes_are_refused(server):
    async def main():
        async with aiohttp.ClientSession() as http:
            for origin in ("http://evil.example", None):
                with pytest.raises(aiohttp.WSServerHandshakeError) as err:
                    await http.ws_connect(base(server) + "/ws", origin=origin)
                assert err.value.status == 403
            for _ in range(WRONG_CODES):  # a wrong code: told so, and the socket closed
                ws = await join(http, server, "Eve", code="ZZZZZ")
                assert (await receive(ws, "refused"))["message"] == "wrong code"
                assert await ended(ws)
            # that address is refused now, even with the right code
            ws = await join(http, server, "Eve")
            assert await ended(ws)

    asyncio.run(main())
    assert server.round.students == {} and server.refused["origin"] == 2


def test_oversized_binary_malformed_and_flooding_clients_are_dropped_the_round_goes_on(server):
    async def main():
        async with aiohttp.ClientSession() as http:
            good = await join(http, server, "Good")
            await receive(good, "welcome")
            big = await join(http, server, "Big")
            await receive(big, "welcome")
            await big.send_str(json.dumps({"type": "answer", "guess": "x" * FRAME_MAX}))
            assert await ended(big)
            binary = await join(http, server, "Bin")
            await receive(binary, "welcome")
            await binary.send_bytes(b"\x00" * 10)
            assert await ended(binary)
            odd = await join(http, server, "Odd")
            await receive(odd, "welcome")
            for junk in ("not json", "[1, 2]", "null", '{"type": "answer", "guess": 3}'):
                await odd.send_str(junk)
            await receive(odd, "error")
            flood = await join(http, server, "Flood")
            await receive(flood, "welcome")
            server.round.ask(VOTE, "the", [Choice(1, " a"), Choice(2, " b")])
            try:
                for _ in range(STRIKES + 3 * int(BURST)):
                    await flood.send_json({"type": "answer", "choice": 0})
            except ConnectionResetError:  # dropped mid-flood (aiohttp's reset is one of these)
                pass
            assert await ended(flood)
            await good.send_json({"type": "answer", "choice": 1})
            await receive(good, "answered")
            assert {c.text: n for c, n in server.round.tally().items()} == {" b": 1, " a": 1}

    asyncio.run(main())
    assert server.refused["frame"] >= 2 and server.refused["malformed"] >= 3
    assert server.refused["rate"] >= STRIKES


def test_a_client_that_never_reads_is_dropped_and_the_others_get_everything(server):
    async def main():
        async with aiohttp.ClientSession() as http:
            sleeper = await join(http, server, "Sleeper")  # never reads again
            reader = await join(http, server, "Reader")
            await receive(reader, "welcome")
            server.round.ask(GUESS, "x" * 60_000)
            big = live_messages.question(server.round.question)
            start = time.monotonic()
            for _ in range(150):  # 9 MB, more than the sockets' buffers hold
                server.push_all(big)
                await receive(reader, "question", timeout=10)
            assert time.monotonic() - start < 20
            for _ in range(100):  # the sleeper is gone (its queue filled or its send timed out)
                if server.refused["slow"]:
                    break
                await asyncio.sleep(0.1)
            assert server.refused["slow"] >= 1
            await sleeper.close()

    asyncio.run(main())


def test_a_dropped_connection_rejoins_as_itself_with_its_answer(server):
    async def main():
        async with aiohttp.ClientSession() as http:
            ws = await join(http, server, "Ann")
            key = (await receive(ws, "welcome"))["key"]
            server.round.ask(VOTE, "the", [Choice(1, " a"), Choice(2, " b")])
            await ws.send_json({"type": "answer", "choice": 1})
            await receive(ws, "answered")
            await ws.close()
            ws = await http.ws_connect(base(server) + "/ws", origin=base(server))
            await ws.send_json({"type": "join", "code": CODE, "nick": "", "key": key})
            assert (await receive(ws, "welcome"))["nick"] == "Ann"
            assert (await receive(ws, "question"))["answer"] == 1
            sid = next(iter(server.round.students))
            server.round.remove(sid)
            server.drop(sid, live_messages.REMOVED)
            await receive(ws, "removed")

    asyncio.run(main())
    assert len(server.round.students) == 0


@pytest.mark.slow
def test_200_students_answering_in_the_same_second_every_answer_counted_once(server):
    n = 200
    tracemalloc.start()

    async def student(http, i: int, go: asyncio.Event, seen: list):
        ws = await join(http, server, f"s{i}")
        await receive(ws, "welcome", 30)
        await receive(ws, "question", 30)
        await go.wait()
        await ws.send_json({"type": "answer", "choice": i % 4})
        await receive(ws, "answered", 30)
        await receive(ws, "reveal", 30)
        seen.append(time.monotonic())
        await ws.close()

    async def main():
        go, seen = asyncio.Event(), []
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as http:
            server.round.ask(VOTE, "the", [Choice(i, f" w{i}") for i in range(4)])
            tasks = [asyncio.ensure_future(student(http, i, go, seen)) for i in range(n)]
            while len(server.round.students) < n:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            server.push_all(live_messages.question(server.round.question))
            await asyncio.sleep(0.5)
            start = time.monotonic()
            go.set()
            while server.round.answered() < n and time.monotonic() - start < 10:
                await asyncio.sleep(0.01)
            answered_s = time.monotonic() - start
            tally = {c.text: k for c, k in server.round.tally().items()}
            assert tally == {f" w{k}": n // 4 for k in range(4)}
            dist = Distribution(np.full(4, 0.25, np.float32), {i: f" w{i}" for i in range(4)})
            v = server.round.reveal(dist, 0, {})
            sent = time.monotonic()
            server.push_to(live_messages.reveals(v, list(server.round.students)))
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
            return answered_s, max(seen) - sent

    answered_s, reveal_s = asyncio.run(main())
    _now, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    answers = [k for k, _ in drain(server) if k == "answer"]
    assert len(answers) == n and len(server.round.reveals[-1].results) == n
    print(f"\n200 students: answers in {answered_s:.3f} s, reveal to all in {reveal_s:.3f} s, "
          f"peak Python memory {peak / 1e6:.1f} MB (both sides)")  # fmt: skip
    assert answered_s < 1.0 and reveal_s < 1.0


def test_the_address_list_offers_ipv4_then_ipv6_then_this_machine_only():
    import ipaddress

    from engine.classroom.live_server import lan_addresses

    found = lan_addresses()
    assert found[-1] == "127.0.0.1" and found.count("127.0.0.1") == 1
    ips = [ipaddress.ip_address(a) for a in found[:-1]]
    assert not any(ip.is_loopback or ip.is_link_local or ip.is_unspecified for ip in ips)
    versions = [ip.version for ip in ips]
    assert versions == sorted(versions)  # every IPv4 address before the IPv6 ones
    assert len(set(found)) == len(found)


def test_a_round_served_on_ipv6_joins_and_names_no_bracketed_csp_source():
    import socket

    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    s = LiveServer(LiveRound(CODE), "::1", 0)
    url = s.start()
    here = f"http://[::1]:{s.port}"
    try:
        assert url == f"{here}/?code={CODE}"

        async def main():
            async with aiohttp.ClientSession() as http:
                async with http.get(url) as r:
                    csp = r.headers["Content-Security-Policy"]
                    assert "connect-src 'self';" in csp and "[" not in csp
                ws = await http.ws_connect(here + "/ws", origin=here)
                await ws.send_json({"type": "join", "code": CODE, "nick": "six"})
                assert (await receive(ws, "welcome"))["nick"] == "six"
                await ws.close()

        asyncio.run(main())
    finally:
        s.stop()
    assert not s.running
