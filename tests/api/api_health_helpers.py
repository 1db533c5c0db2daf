"""A TCP proxy that can stop forwarding (a stalled database server), and waiting for /healthz to turn."""

from __future__ import annotations

import socket
import threading
import time

import httpx


class StallingProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; with :attr:`stalled` set it keeps every connection open and
    accepts new ones but passes nothing on, as a hung server or a black-holed network does."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.stalled = threading.Event()
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            if self.stalled.is_set():
                continue  # accepted, never answered
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)  # an idle connection stays open: only the stall may end it
            self._sockets.append(server)
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._closing.is_set():
                data = src.recv(65536)
                if not data:
                    break
                while self.stalled.is_set() and not self._closing.is_set():
                    time.sleep(0.05)  # hold what came; pass nothing on
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        for sock in self._sockets:
            sock.close()


def wait_for_health(url: str, healthy: bool, within: float) -> tuple[dict, float]:
    """Poll ``url``/healthz until its status says ``healthy`` (or not); ``(answer, seconds)``. Fails after
    ``within`` seconds with the last answer."""
    start = time.monotonic()
    last: object = None
    while time.monotonic() - start < within:
        try:
            answer = httpx.get(url + "/healthz", timeout=within)
        except httpx.HTTPError as err:
            last = err
        else:
            last = (answer.status_code, answer.text)
            if (answer.status_code == 200) == healthy:
                body = answer.json()
                assert body["status"] == ("ok" if healthy else "unhealthy"), body
                return body, time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError(f"/healthz did not turn {'healthy' if healthy else 'unhealthy'} within {within} s: {last}")
