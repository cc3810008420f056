"""HTTP/1.1 on raw sockets for the hostile rerun: every byte as written (non-UTF-8 headers,
HEAD, any request target), and the small formatters the checks print their figures with."""

from __future__ import annotations

import collections
import contextlib
import socket
import time


class Answer:
    def __init__(self, status=None, headers=None, body=b"", elapsed=0.0, error=None):
        self.status = status
        self.headers = headers or {}
        self.body = body
        self.elapsed = elapsed
        self.error = error

    def header(self, name: str) -> bytes | None:
        values = self.headers.get(name.lower().encode())
        return values[0] if values else None

    def __repr__(self):
        return f"<{self.status} {self.error or ''} {self.elapsed * 1000:.1f}ms>"


def _b(x) -> bytes:
    return x if isinstance(x, bytes) else str(x).encode("utf-8")


def request_bytes(method, target, headers=(), body=b"", close=False) -> bytes:
    lines = [_b(method) + b" " + _b(target) + b" HTTP/1.1", b"host: 127.0.0.1"]
    for name, value in headers:
        lines.append(_b(name) + b": " + _b(value))
    if body or _b(method) in (b"POST", b"PUT", b"PATCH"):
        lines.append(b"content-length: " + str(len(body)).encode())
    if close:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _parse_head(lines: list[bytes]):
    status = int(lines[0].split()[1])
    headers: dict[bytes, list[bytes]] = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return status, headers


class Conn:
    """One keep-alive connection; reconnects after the server closed it."""

    def __init__(self, port, timeout=10.0):
        self.port, self.timeout = port, timeout
        self.sock = self.file = None

    def _open(self):
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb")

    def close(self):
        with contextlib.suppress(Exception):
            self.file and self.file.close()
            self.sock and self.sock.close()
        self.sock = self.file = None

    def request(self, method, target, headers=(), body=b"", close=False) -> Answer:
        started = time.monotonic()
        try:
            if self.sock is None:
                self._open()
            self.sock.sendall(request_bytes(method, target, headers, body, close))
            answer = self._read(_b(method) == b"HEAD")
        except Exception as e:  # noqa: BLE001 - a reset or a timeout is a figure too
            self.close()
            return Answer(error=f"{type(e).__name__}: {e}", elapsed=time.monotonic() - started)
        answer.elapsed = time.monotonic() - started
        if close or b"close" in (answer.header("connection") or b"").lower():
            self.close()
        return answer

    def _read(self, head_only: bool) -> Answer:
        f = self.file
        while True:
            lines = []
            while True:
                line = f.readline(1 << 20)
                if not line:
                    raise ConnectionError("closed before an answer" if not lines else "closed in the head")
                line = line.rstrip(b"\r\n")
                if not line:
                    if lines:
                        break
                    continue
                lines.append(line)
            status, headers = _parse_head(lines)
            if 100 <= status < 200:
                continue
            break
        body = b""
        if head_only or status in (204, 304):
            pass
        elif b"chunked" in b",".join(headers.get(b"transfer-encoding", [])).lower():
            parts = []
            while True:
                size = int(f.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while f.readline().rstrip(b"\r\n"):
                        pass
                    break
                parts.append(f.read(size))
                f.readline()
            body = b"".join(parts)
        elif b"content-length" in headers:
            body = f.read(int(headers[b"content-length"][0]))
        else:
            body = f.read()
            self.close()
        return Answer(status, headers, body)


def http(port, method, target, headers=(), body=b"", timeout=10.0) -> Answer:
    c = Conn(port, timeout)
    try:
        return c.request(method, target, headers, body, close=True)
    finally:
        c.close()


async def a_request(reader, writer, req: bytes):
    """One exchange on an asyncio stream pair: (status, headers, body, whether it closes)."""
    writer.write(req)
    await writer.drain()
    lines = []
    while True:
        line = await reader.readline()
        if not line:
            raise ConnectionError("closed before an answer")
        line = line.rstrip(b"\r\n")
        if not line:
            if lines:
                if 100 <= int(lines[0].split()[1]) < 200:
                    lines = []
                    continue
                break
            continue
        lines.append(line)
    status, headers = _parse_head(lines)
    body = b""
    if b"chunked" in b",".join(headers.get(b"transfer-encoding", [])).lower():
        parts = []
        while True:
            size = int((await reader.readline()).split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readline()).rstrip(b"\r\n"):
                    pass
                break
            parts.append(await reader.readexactly(size))
            await reader.readline()
        body = b"".join(parts)
    elif b"content-length" in headers:
        body = await reader.readexactly(int(headers[b"content-length"][0]))
    closing = b"close" in b",".join(headers.get(b"connection", [])).lower()
    return status, headers, body, closing


def parse_metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            out[name] = float(value)
    return out


def pctl(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))
    return s[k]


def ms(seconds):
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def counts(statuses) -> str:
    c = collections.Counter("none" if s is None else s for s in statuses)
    return ", ".join(f"{n}×{k}" for k, n in sorted(c.items(), key=lambda kv: str(kv[0])))


def export(conn_or_port, tenant, key=None, query="", user=None) -> Answer:
    h = [("x-tenant", tenant)]
    if user is not None:
        h.append(("x-user", user))
    if key is not None:
        h.append((b"idempotency-key", key))
    if isinstance(conn_or_port, Conn):
        return conn_or_port.request("POST", f"/reports/export{query}", h)
    return http(conn_or_port, "POST", f"/reports/export{query}", h)
