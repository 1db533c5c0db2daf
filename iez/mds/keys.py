"""Which CURVE key speaks for which OSS: the authorised-keys directory.

The directory holds one public certificate per OSS, ``OSS_ID.key``, as
``iez-agent keys DIR OSS_ID`` writes it. The file name binds the key to that
``oss_id``: the ZAP handler (:class:`OssAuthenticator`) sets the connection's
User-Id to it, and the service refuses a message whose ``oss_id`` is another.
So the key list is the OSS list. Adding an OSS is dropping its key into the
directory: an unknown key makes the registry read the directory again (at most
once a second, only when it changed), no restart needed. Removing a key takes
effect for new connections.

Refused handshakes (unknown keys) are counted and logged at most once per key
per minute: a misconfigured agent retries every few seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from iez.errors import ConfigError

log = logging.getLogger("iez.mds")

RELOAD_EVERY_S = 1.0
LOG_REFUSAL_EVERY_S = 60.0


class KeyFileError(ConfigError):
    """A key directory the MDS cannot run with (one line naming the file)."""


def load_server_key(path: Path) -> tuple[bytes, bytes]:
    """The MDS's (public, secret) key from its ``.key_secret`` certificate."""
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError):
        raise KeyFileError(f"--curve-secret-key {path}: not a zmq certificate file") from None
    if secret is None:
        raise KeyFileError(f"--curve-secret-key {path}: no secret-key in it (give the .key_secret file)")
    return public, secret


def read_keys(directory: Path) -> dict[bytes, str]:
    """Z85 public key -> oss_id from ``directory/*.key``; a key under two names is an error."""
    directory = Path(directory)
    if not directory.is_dir():
        raise KeyFileError(f"--curve-authorized {directory}: no such directory")
    keys: dict[bytes, str] = {}
    for path in sorted(directory.glob("*.key")):
        oss_id = path.stem
        try:
            public, _ = zmq.auth.load_certificate(str(path))
        except (OSError, ValueError):
            raise KeyFileError(f"{path}: not a zmq public certificate (iez-agent keys DIR {oss_id} writes one)") from None
        if len(public) != 40:
            raise KeyFileError(f"{path}: a CURVE public key is 40 Z85 characters, found {len(public)}")
        if public in keys:
            raise KeyFileError(f"{path}: the same key as {keys[public]}.key; a key speaks for one OSS")
        if not 1 <= len(oss_id) <= 255:
            raise KeyFileError(f"{path}: the name (the OSS id) must be 1..255 characters")
        keys[public] = oss_id
    return keys


class OssKeys:
    """The authorised keys, read again when the directory changes."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._keys = read_keys(self.directory)
        self._mtime = self._stamp()
        self._checked = float("-inf")
        self._logged: dict[bytes, float] = {}
        self.refused = 0

    def _stamp(self) -> float | None:
        try:
            return self.directory.stat().st_mtime_ns
        except OSError:
            return None

    def oss_ids(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._keys.values())

    def oss_of(self, z85_key: bytes) -> str | None:
        """The OSS a key speaks for, or None; the directory is read again when it changed (one stat per
        handshake, a new reading at most once a second), so added and removed keys count for new connections."""
        with self._lock:
            stamp = self._stamp()
            if stamp != self._mtime and time.monotonic() - self._checked >= RELOAD_EVERY_S:
                self._checked = time.monotonic()
                try:
                    self._keys = read_keys(self.directory)
                    self._mtime = stamp
                    log.info("read %d authorised key(s) from %s", len(self._keys), self.directory)
                except KeyFileError as err:
                    log.error("keeping the previous keys: %s", err)
            return self._keys.get(z85_key)

    def refuse(self, z85_key: bytes, address: str) -> None:
        """Count a refused handshake; log it once per key per minute."""
        now = time.monotonic()
        with self._lock:
            self.refused += 1
            last = self._logged.get(z85_key)
            if last is not None and now - last < LOG_REFUSAL_EVERY_S:
                return
            self._logged[z85_key] = now
            if len(self._logged) > 10_000:  # a flood of made-up keys must not grow this without bound
                self._logged = {k: t for k, t in self._logged.items() if now - t < LOG_REFUSAL_EVERY_S}
        log.warning("refused a CURVE handshake from %s: key %s is not in %s (logged once a minute per key)",
                    address or "?", z85_key.decode("ascii", "replace"), self.directory)


class OssAuthenticator(ThreadAuthenticator):
    """ZAP handler: a known key is accepted with User-Id = its oss_id; others are refused and logged."""

    def __init__(self, context, keys: OssKeys):
        super().__init__(context)
        self.keys = keys
        self._address = ""

    def start(self) -> None:
        super().start()
        self.configure_curve_callback(domain="*", credentials_provider=self)

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        self._address = msg[3].decode("utf-8", "replace") if len(msg) > 3 else ""
        await super().handle_zap_message(msg)

    def callback(self, domain: str, z85_key: bytes) -> bool:  # the credentials provider's check
        if self.keys.oss_of(z85_key) is not None:
            return True
        self.keys.refuse(z85_key, self._address)
        return False

    def curve_user_id(self, client_public_key: bytes) -> str:
        return self.keys.oss_of(z85.encode(client_public_key)) or ""
