"""Publish messages to the MDS over a ZeroMQ PUB socket that connects to it.

The MDS binds a SUB socket; every agent connects, so agents can come and go and the
MDS needs no list of them. ZeroMQ reconnects by itself when the MDS restarts.

* ``SNDHWM`` is small and ``LINGER`` is 0: when the MDS is slow or away, old
  statistics are dropped rather than queued, and the agent never blocks on exit.
  (A run that stops after ``--count`` messages gives the last one up to a second.)
* A PUB socket only sends to peers that have subscribed, so before the first
  message the agent waits (briefly) until the connection's handshake is done.
* CURVE: with the MDS's public key and the agent's secret key (``zmq.auth``
  certificate files, see :mod:`agents.keys`), the connection is authenticated
  and encrypted; an MDS running a ZAP authenticator accepts only known keys.

A socket monitor reports connection changes and rejected handshakes on stderr.
libzmq gives up on a connection whose handshake failed (a key the MDS does not
know yet, CURVE on one side only); the publisher connects again every
``RETRY_HANDSHAKE_S`` (30 s), so an agent whose key the administrator adds to
the MDS later is heard without a restart.

Several MDS services (the active one and its standbys, issue 25): :class:`Publishers`
gives each endpoint its own socket (and its own ``SNDHWM`` queue) and sends every
message to each without blocking, so an endpoint that is down or slow only drops
its own oldest messages; the others get every one.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import zmq
import zmq.auth
from zmq.utils.monitor import recv_monitor_message

from agents import AgentError

__all__ = ["Publisher", "Publishers", "load_curve_keys"]

_EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
           | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
           | zmq.EVENT_DISCONNECTED)
_SLICE_MS = 200
RETRY_HANDSHAKE_S = 30.0


def _stderr(message: str) -> None:
    print(f"iez-agent: {message}", file=sys.stderr, flush=True)


def _load(path: str, what: str) -> tuple[bytes, bytes | None]:
    try:
        return zmq.auth.load_certificate(path)
    except OSError:
        raise AgentError(f"{what} {path}: no such file") from None
    except ValueError:
        raise AgentError(f"{what} {path}: no public-key in it (not a zmq certificate file)") from None


def load_curve_keys(server_key_file: str, secret_key_file: str) -> tuple[bytes, bytes, bytes]:
    """(server public, client public, client secret) from zmq.auth certificate files."""
    server_public, _ = _load(server_key_file, "CURVE server key")
    client_public, client_secret = _load(secret_key_file, "CURVE secret key")
    if client_secret is None:
        raise AgentError(f"CURVE secret key {secret_key_file}: no secret-key in it "
                         f"(give this agent's .key_secret file)")
    for key, path in ((server_public, server_key_file), (client_public, secret_key_file),
                      (client_secret, secret_key_file)):
        if len(key) != 40:
            raise AgentError(f"{path}: a CURVE key must be 40 Z85 characters, found {len(key)}")
    return server_public, client_public, client_secret


class Publisher:
    """A connected PUB socket plus a monitor of its connection."""

    def __init__(self, endpoint: str, *, server_key_file: str | None = None, secret_key_file: str | None = None,
                 sndhwm: int = 8, log: Callable[[str], None] = _stderr) -> None:
        self.endpoint = endpoint
        self.log = log
        self.connected = False
        self._last_problem: str | None = None
        self._retry_at: float | None = None  # when to connect again after a failed handshake
        self.unconnected_since: float | None = time.monotonic()  # None while a handshake holds
        self._silence_said = False  # "no handshake for N intervals" said for the current silence
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PUB)
        try:
            self.sock.setsockopt(zmq.SNDHWM, sndhwm)
            self.sock.setsockopt(zmq.LINGER, 0)
            self.sock.setsockopt(zmq.RECONNECT_IVL, 100)
            self.sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)  # a restarted MDS service is heard within a second
            self.sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
            if server_key_file and secret_key_file:
                server_public, public, secret = load_curve_keys(server_key_file, secret_key_file)
                self.sock.curve_secretkey = secret
                self.sock.curve_publickey = public
                self.sock.curve_serverkey = server_public
            self.monitor = self.sock.get_monitor_socket(_EVENTS)
            self.sock.connect(endpoint)
        except zmq.ZMQError as err:
            self._close_quietly()
            raise AgentError(f"cannot connect to {endpoint}: {err}") from None
        except AgentError:
            self._close_quietly()
            raise

    # -- connection events -------------------------------------------------
    def _handle(self, event: Mapping[str, Any]) -> None:
        kind = event["event"]
        if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._retry_at = None
            if not self.connected:
                self.log(f"connected to the MDS at {self.endpoint}")
            self.connected = True
            self.unconnected_since, self._silence_said = None, False
            self._last_problem = None
            return
        if kind == zmq.EVENT_DISCONNECTED:
            if self.connected:
                self.log(f"lost the connection to {self.endpoint}; reconnecting")
                self.unconnected_since = time.monotonic()
            self.connected = False
            return
        if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            problem = (f"the MDS at {self.endpoint} refused this agent's key "
                       f"(ZAP status {event['value']}): is its public key in the MDS's allowed keys?")
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            problem = (f"handshake with {self.endpoint} failed (protocol error {event['value']:#x}): "
                       f"do the agent and the MDS agree on CURVE and on the MDS key?")
        else:
            problem = f"handshake with {self.endpoint} failed: are CURVE settings the same on both sides?"
        if self.connected:
            self.unconnected_since = time.monotonic()
        self.connected = False
        if self._retry_at is None:
            self._retry_at = time.monotonic() + RETRY_HANDSHAKE_S
        if problem != self._last_problem:
            self.log(f"{problem} (trying again every {RETRY_HANDSHAKE_S:g} s)")
            self._last_problem = problem

    def _retry(self) -> None:
        """libzmq does not reconnect after a failed handshake: connect again once it is time."""
        if self._retry_at is None or self.connected or time.monotonic() < self._retry_at:
            return
        self._retry_at = None
        try:
            self.sock.disconnect(self.endpoint)
        except zmq.ZMQError:
            pass  # already gone
        self.sock.connect(self.endpoint)

    def check_silence(self, limit_s: float, intervals: int) -> None:
        """Warn once per silence when no handshake has held for ``limit_s`` (``intervals`` report intervals):
        a PUB socket drops every message then, and the agent would otherwise look as if it were working."""
        if self.connected or self._silence_said or self.unconnected_since is None:
            return
        silent = time.monotonic() - self.unconnected_since
        if silent >= limit_s:
            self._silence_said = True
            why = f" ({self._last_problem})" if self._last_problem else \
                ": is iez mds running there, and the address and port right?"
            self.log(f"warning: no handshake with the MDS at {self.endpoint} for {intervals} report intervals "
                     f"({silent:.0f} s){why}; every message to it is dropped until it answers")

    @property
    def problem(self) -> str | None:
        """The last handshake failure since the last success, if any."""
        return self._last_problem

    def poll(self, timeout_ms: int = 0) -> None:
        """Handle the connection events that arrive within ``timeout_ms``."""
        self._retry()
        if self.monitor.poll(timeout_ms):
            while True:
                try:
                    event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._handle(event)

    def wait(self, seconds: float, stop: Callable[[], bool] = lambda: False,
             until_connected: bool = False) -> None:
        """Sleep ``seconds`` while handling events; return early on ``stop()``
        (or, with ``until_connected``, once the handshake is done)."""
        deadline = time.monotonic() + seconds
        while not stop() and not (until_connected and self.connected):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.poll(max(1, min(_SLICE_MS, int(left * 1000))))

    # -- messages ------------------------------------------------------------
    def send(self, data: bytes) -> bool:
        """Queue one single-frame message; False when it had to be dropped."""
        self.poll(0)
        try:
            self.sock.send(data, zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def close(self, linger_ms: int = 0) -> None:
        try:
            self.sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close(linger=0)
        self.sock.close(linger=linger_ms)
        self.ctx.term()

    def _close_quietly(self) -> None:
        monitor = getattr(self, "monitor", None)
        if monitor is not None:
            monitor.close(linger=0)
        self.sock.close(linger=0)
        self.ctx.term()


class Publishers:
    """One :class:`Publisher` per MDS endpoint, used as one: every message goes to each.

    Sends never block (``NOBLOCK`` on sockets with a small ``SNDHWM``): an endpoint that is down
    or slow keeps at most ``sndhwm`` messages queued and drops the rest; the others are not held up.
    """

    def __init__(self, endpoints: tuple[str, ...] | list[str], *, server_key_file: str | None = None,
                 secret_key_file: str | None = None, sndhwm: int = 8, log: Callable[[str], None] = _stderr) -> None:
        if not endpoints:
            raise AgentError("no MDS endpoint given")
        self.log = log
        self.publishers: list[Publisher] = []
        self._dropping: set[str] = set()  # endpoints whose drops were said (said again after one send succeeds)
        try:
            for endpoint in endpoints:
                self.publishers.append(Publisher(endpoint, server_key_file=server_key_file,
                                                 secret_key_file=secret_key_file, sndhwm=sndhwm, log=log))
        except AgentError:
            self.close(0)
            raise

    @property
    def endpoint(self) -> str:
        return ",".join(p.endpoint for p in self.publishers)

    @property
    def connected(self) -> bool:
        """At least one MDS endpoint has a connection (a message published now reaches someone)."""
        return any(p.connected for p in self.publishers)

    @property
    def all_connected(self) -> bool:
        return all(p.connected for p in self.publishers)

    @property
    def problem(self) -> str | None:
        problems = [p.problem for p in self.publishers if p.problem]
        return "; ".join(problems) if problems else None

    def poll(self, timeout_ms: int = 0) -> None:
        for p in self.publishers:
            p.poll(0)
        if timeout_ms > 0:  # sleep on the first socket's monitor, then look at every one again
            self.publishers[0].poll(timeout_ms)
            for p in self.publishers[1:]:
                p.poll(0)

    def wait(self, seconds: float, stop: Callable[[], bool] = lambda: False,
             until_connected: bool = False) -> None:
        """Sleep ``seconds`` handling every socket's events; return early on ``stop()`` (or, with
        ``until_connected``, once every endpoint's handshake is done)."""
        deadline = time.monotonic() + seconds
        while not stop() and not (until_connected and self.all_connected):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.poll(max(1, min(_SLICE_MS // max(1, len(self.publishers)), int(left * 1000))))

    def send(self, data: bytes) -> list[str]:
        """Queue one message on every socket; the endpoints that had to drop it (none when all kept up)."""
        dropped = []
        for p in self.publishers:
            if p.send(data):
                self._dropping.discard(p.endpoint)
            else:
                dropped.append(p.endpoint)
        return dropped

    def check_silence(self, limit_s: float, intervals: int) -> None:
        for p in self.publishers:
            p.check_silence(limit_s, intervals)

    def dropped(self, endpoint: str) -> None:
        """Say (once until it keeps up again) that ``endpoint`` is not keeping up."""
        if endpoint not in self._dropping:
            self._dropping.add(endpoint)
            self.log(f"warning: the MDS at {endpoint} is not keeping up; its messages are dropped "
                     f"(the other endpoints still get every one)")

    def close(self, linger_ms: int = 0) -> None:
        for p in self.publishers:
            p.close(linger_ms)
