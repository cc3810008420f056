"""The internal modes of the hostile rerun, each run as a subprocess of it through the entry
point (`rerun.py --upstream-stub PORTFILE`, `--upstream-starlette PORTFILE`, `--delay-proxy
LISTEN TARGET MS`, `--python-northstar-rawunits ARGS`): rl-gateway's upstreams, the proxy that
delays Redis's replies, and Python northstar with one stub addition."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import socket
import sys
import time
import urllib.parse
from pathlib import Path


def upstream_stub(portfile: str):
    """The upstream behind rl-gateway, as northstar's stub: 200 with a small JSON body; ?ms=N
    waits, ?units=V sends V (percent-decoded bytes, verbatim) as X-Actual-Cost, ?status=N;
    POST /login is 401 without X-Password: ok. GET /__count: requests seen by method and path."""
    seen = collections.Counter()

    async def handle(reader, writer):
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                method, target, _ = lines[0].split(b" ", 2)
                headers = {}
                for line in lines[1:]:
                    if line:
                        k, _, v = line.partition(b":")
                        headers.setdefault(k.strip().lower(), v.strip())
                if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
                    while True:
                        size = int((await reader.readline()).split(b";")[0], 16)
                        if size == 0:
                            while (await reader.readline()).strip():
                                pass
                            break
                        await reader.readexactly(size + 2)
                elif b"content-length" in headers:
                    await reader.readexactly(int(headers[b"content-length"]))
                path, _, query = target.partition(b"?")
                q = {}
                for pair in query.split(b"&"):
                    k, _, v = pair.partition(b"=")
                    q.setdefault(k, urllib.parse.unquote_to_bytes(v))
                if path == b"/__count":
                    body = json.dumps(seen).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                                 + str(len(body)).encode() + b"\r\n\r\n" + body)
                    await writer.drain()
                    continue
                seen[f"{method.decode()} {path.decode('latin-1')}"] += 1
                if q.get(b"ms", b"").isdigit():
                    await asyncio.sleep(int(q[b"ms"]) / 1000)
                status = int(q[b"status"]) if q.get(b"status", b"").isdigit() else 200
                if method == b"POST" and path == b"/login" and headers.get(b"x-password") != b"ok":
                    status = 401
                body = json.dumps({"ok": status == 200, "method": method.decode(), "path": path.decode("latin-1")}).encode()
                out = [b"HTTP/1.1 %d X" % status, b"content-type: application/json",
                       b"content-length: " + str(len(body)).encode()]
                if b"units" in q:
                    out.append(b"x-actual-cost: " + q[b"units"])
                if q.get(b"chunks", b"").isdigit() and method != b"HEAD":
                    # The body streamed in N small chunks 2 ms apart (a proxy forwards each).
                    out[2] = b"transfer-encoding: chunked"
                    writer.write(b"\r\n".join(out) + b"\r\n\r\n")
                    await writer.drain()
                    for _ in range(int(q[b"chunks"])):
                        await asyncio.sleep(0.002)
                        writer.write(b"%x\r\n%s\r\n" % (len(body), body))
                        await writer.drain()
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    continue
                writer.write(b"\r\n".join(out) + b"\r\n\r\n" + (b"" if method == b"HEAD" else body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0, limit=1 << 20, backlog=1024)
        Path(portfile).write_text(str(server.sockets[0].getsockname()[1]))
        await server.serve_forever()

    asyncio.run(main())


def upstream_starlette(portfile: str):
    """A Starlette application as the upstream (Starlette routes on the percent-decoded path, as
    uvicorn gives it): POST /checkout answers "checkout handler", anything else 404."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def checkout(request):
        return PlainTextResponse("checkout handler")

    app = Starlette(routes=[Route("/checkout", checkout, methods=["POST"])])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)  # connections wait in the backlog until uvicorn accepts them
    Path(portfile).write_text(str(sock.getsockname()[1]))
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])


def delay_proxy(listen: int, target: int, delay_ms: int):
    """Forwards loopback TCP to `target`; every chunk the target sends back is delivered
    `delay_ms` after it arrived (in order). TCP_NODELAY on both sides: the proxy adds no Nagle."""
    delay = delay_ms / 1000

    async def handle(creader, cwriter):
        sreader, swriter = await asyncio.open_connection("127.0.0.1", target)
        for w in (cwriter, swriter):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        queue: asyncio.Queue = asyncio.Queue()

        async def up():
            with contextlib.suppress(Exception):
                while chunk := await creader.read(65536):
                    swriter.write(chunk)
                    await swriter.drain()
            swriter.close()

        async def down_read():
            with contextlib.suppress(Exception):
                while chunk := await sreader.read(65536):
                    queue.put_nowait((time.monotonic() + delay, chunk))
            queue.put_nowait((time.monotonic() + delay, b""))

        async def down_write():
            with contextlib.suppress(Exception):
                while True:
                    at, chunk = await queue.get()
                    wait = at - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    if not chunk:
                        break
                    cwriter.write(chunk)
                    await cwriter.drain()
            cwriter.close()

        await asyncio.gather(up(), down_read(), down_write())

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", listen, backlog=1024)
        await server.serve_forever()

    asyncio.run(main())


def python_northstar_rawunits(argv):
    """Python northstar with one addition to its stub: ?rawunits=V sends V verbatim as
    X-Actual-Cost (the shipped stub sends only ASCII digits, so the middleware never meets ²)."""
    import redis_rl.northstar as ns

    shipped = ns.backend

    async def backend(scope, receive, send):
        q = dict(p.partition(b"=")[::2] for p in scope.get("query_string", b"").split(b"&"))
        if b"rawunits" not in q:
            return await shipped(scope, receive, send)
        value = urllib.parse.unquote_to_bytes(q[b"rawunits"])

        async def send_with(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=list(message["headers"]) + [(b"x-actual-cost", value)])
            await send(message)

        return await shipped(scope, receive, send_with)

    ns.backend = backend
    sys.exit(ns.main(argv))
