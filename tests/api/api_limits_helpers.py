"""Raw HTTP/1.1 over a socket, for what httpx will not do: send a body while reading the answer, lie in
Content-Length, stream a chunked body, and count how much the server took before it answered."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """``VmRSS`` (or ``VmHWM``, the peak) of process ``pid`` in KiB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


class Upload:
    """One request whose body is sent by a thread while the caller waits for the answer."""

    def __init__(self, url: str, path: str, headers: dict[str, str], body_bytes: int, chunked: bool = False,
                 chunk: int = 64 * 1024, hold: bool = False):
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sent = 0
        self.send_error: OSError | None = None
        self._stop = threading.Event()
        self.go = threading.Event()  # with ``hold``, the body is sent only once this is set
        if not hold:
            self.go.set()
        head = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        head += ["Transfer-Encoding: chunked"] if chunked else [f"Content-Length: {body_bytes}"]
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._pump, args=(body_bytes, chunked, chunk), daemon=True)
        self._thread.start()

    def _pump(self, total: int, chunked: bool, size: int) -> None:
        data = b" " * size  # JSON whitespace: a body that would parse, were it read
        while not self.go.wait(0.05):
            if self._stop.is_set():
                return
        try:
            while self.sent < total and not self._stop.is_set():
                part = data[: min(size, total - self.sent)]
                self.sock.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                self.sent += len(part)
            if chunked and not self._stop.is_set():
                self.sock.sendall(b"0\r\n\r\n")
        except OSError as err:  # the server closed the connection: it does not want the rest
            self.send_error = err

    def answer(self, timeout: float = 30) -> tuple[int, bytes, float]:
        """``(status, raw answer, seconds from the headers to the status line)``."""
        self.sock.settimeout(timeout)
        raw = b""
        while b"\r\n\r\n" not in raw:
            part = self.sock.recv(65536)
            if not part:
                break
            raw += part
        elapsed = time.monotonic() - self.started
        head, _, rest = raw.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(rest) < length:
            part = self.sock.recv(65536)
            if not part:
                break
            rest += part
        status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else 0
        return status, head + b"\r\n\r\n" + rest, elapsed

    def closed_by_server(self, timeout: float = 10) -> bool:
        """Whether the server closes the connection (reads give EOF or a reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sock.close()
