# Misbehaving HTTP clients for the abuse test and bench/serve_abuse.py: each opens real loopback
# sockets against a `cadre serve` and reports what the server did (status line, bytes it took,
# whether it closed). Every wait is bounded.
from __future__ import annotations

import json
import socket
import time

LINE_END = b"\r\n\r\n"


def connect(port: int, rcvbuf: int = 0, sndbuf: int = 0, source: str = "") -> socket.socket:
    """A loopback connection, from `source` when given (any 127.x.y.z: all of 127/8 is this machine)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if source:
        s.bind((source, 0))
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # set before connect: no autotuning
    if sndbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    s.connect(("127.0.0.1", port))
    return s


def read_answer(s: socket.socket, timeout_s: float = 30.0) -> tuple[bytes, bool]:
    """Reads until the peer closes or timeout_s passes; returns (bytes, closed)."""
    data = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def status_of(answer: bytes) -> int:
    line = answer.split(b"\r\n", 1)[0].split(b" ")
    return int(line[1]) if len(line) > 1 and line[0].startswith(b"HTTP/1.") and line[1].isdigit() else 0


def header_of(answer: bytes, name: str) -> str | None:
    head = answer.split(LINE_END, 1)[0].decode(errors="replace").split("\r\n")[1:]
    for field in head:
        key, _, value = field.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


def post_head(path: str, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{extra}\r\n".encode()


def json_request(path: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return post_head(path, f"Content-Length: {len(data)}\r\n") + data


class Slowloris:
    """A connection that sends half a request head, then one byte every `interval_s`."""

    def __init__(self, port: int, source: str = ""):
        self.sock = connect(port, source=source)
        self.sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        self.answer = b""
        self.closed = False

    def drip(self) -> None:
        if self.closed:
            return
        try:
            self.sock.sendall(b"a")
            self.sock.setblocking(False)
            try:
                chunk = self.sock.recv(65536)
                self.answer += chunk
                self.closed = not chunk
            except BlockingIOError:
                pass
            finally:
                self.sock.setblocking(True)
        except (BrokenPipeError, ConnectionResetError):
            self.closed = True

    def finish(self, timeout_s: float) -> None:
        if not self.closed:
            rest, self.closed = read_answer(self.sock, timeout_s)
            self.answer += rest
        self.sock.close()


def chunked_flood(port: int, cap_bytes: int, source: str = "") -> tuple[int, int]:
    """Sends an endless chunked body (up to cap_bytes) until the server answers or stops taking it;
    returns (status, bytes of body sent)."""
    s = connect(port, sndbuf=65536, source=source)
    s.sendall(post_head("/v1/completions", "Transfer-Encoding: chunked\r\n"))
    chunk = b"4000\r\n" + b"x" * 0x4000 + b"\r\n"
    sent = 0
    answer = b""
    s.setblocking(False)
    deadline = time.monotonic() + 60
    while sent < cap_bytes and time.monotonic() < deadline:
        try:
            got = s.recv(65536)
            answer += got
            if LINE_END in answer or not got:
                break
        except BlockingIOError:
            pass
        except ConnectionResetError:
            break
        try:
            sent += s.send(chunk)
        except BlockingIOError:
            time.sleep(0.001)  # the server is not reading: wait for its answer or for room
        except (BrokenPipeError, ConnectionResetError):
            break
    s.setblocking(True)
    if LINE_END not in answer:
        rest, _ = read_answer(s, 10)
        answer += rest
    s.close()
    return status_of(answer), sent


def one_shot(port: int, request: bytes, timeout_s: float = 30.0) -> bytes:
    s = connect(port)
    try:
        s.sendall(request)
        answer, _ = read_answer(s, timeout_s)
        return answer
    finally:
        s.close()
