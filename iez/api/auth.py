"""Who is calling the API: the service credential, a user, or nobody.

Three credentials are accepted in the ``Authorization`` header:

- ``Bearer <IEZ_API_TOKEN>``: the service (administrator) credential. It writes
  statistics, requests and allocations for anyone and reads everything, as before.
- ``MUNGE <credential>`` (with ``IEZ_API_MUNGE_SOCKET``): a credential from the
  caller's ``munged`` (``munge -n``), decoded by the API's ``munged``: the user is
  the uid it carries, named through the password database. munged refuses
  expired and replayed credentials, so a client makes a new one per request, as
  Slurm's clients do.
- ``Bearer <user token>`` (with ``IEZ_API_USER_TOKENS``): for sites without MUNGE,
  a file of ``USER TOKEN`` lines (``#`` comments; a user may have several tokens;
  at least 16 characters each; the file must give no access to other users, as
  ``ssh`` demands of its keys). It is read again when it changes.

With ``IEZ_API_READS=owner`` (the default once either user method is set), an
application's requests, allocations, lookups and layout map go only to the user
who owns it (:mod:`iez.db.owners`) and to the service credential; anyone else
gets the same 404 as for something that does not exist.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from iez.api.munge import BadCredential, Munge, MungeUnavailable, user_name
from iez.config import ConfigError, Settings
from iez.errors import IezError

MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Caller:
    """The authenticated caller: ``admin`` for the service credential, else ``user`` (None: anonymous)."""

    user: str | None = None
    admin: bool = False
    method: str = "none"  # "token" (service), "munge", "user-token", "none"

    @property
    def anonymous(self) -> bool:
        return not self.admin and self.user is None

    def may_read(self, owner: str | None) -> bool:
        """Whether this caller may see what ``owner`` owns (NULL owners: the service credential only)."""
        return self.admin or (self.user is not None and owner == self.user)


ANONYMOUS = Caller()
SERVICE = Caller(admin=True, method="token")


class AuthError(IezError):
    """The header names a credential that does not hold: ``status`` 401 (or 403 for a wrong token), ``detail``."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail

    @property
    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer, MUNGE"} if self.status == 401 else {}


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def read_user_tokens(path: str | Path, service_token: str | None = None) -> dict[bytes, str]:
    """``{sha256(token): user}`` from a tokens file; ConfigError naming the file and line for anything wrong."""
    path = Path(path)
    try:
        info = path.stat()
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"IEZ_API_USER_TOKENS={path}: cannot read it ({err})") from None
    if info.st_mode & (stat.S_IRWXO):
        raise ConfigError(f"IEZ_API_USER_TOKENS={path}: other users may access it (mode "
                          f"{stat.filemode(info.st_mode)}): chmod o-rwx {path}")
    tokens: dict[bytes, str] = {}
    lines: dict[bytes, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        where = f"IEZ_API_USER_TOKENS={path} line {number}"
        if len(fields) != 2:
            raise ConfigError(f"{where}: expected 'USER TOKEN', got {len(fields)} fields")
        user, token = fields
        if service_token and hmac.compare_digest(token.encode(), service_token.encode()):
            raise ConfigError(f"{where}: the token of {user!r} is IEZ_API_TOKEN, the service credential")
        if len(token) < MIN_TOKEN_CHARS:
            raise ConfigError(f"{where}: the token of {user!r} has {len(token)} characters; use at least "
                              f"{MIN_TOKEN_CHARS} (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
        digest = _digest(token)
        if digest in tokens:
            raise ConfigError(f"{where}: the same token as line {lines[digest]}")
        tokens[digest], lines[digest] = user, number
    return tokens


class _TokenFile:
    """The user tokens, read again when the file's size or modification time changes."""

    def __init__(self, path: str, service_token: str | None):
        self.path, self.service_token = path, service_token
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self.tokens = read_user_tokens(path, service_token)

    def _stat(self) -> tuple | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size, info.st_ino

    def user(self, token: str) -> str | None:
        stamp = self._stat()
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    try:
                        self.tokens = read_user_tokens(self.path, self.service_token)
                    except ConfigError:
                        pass  # a file being edited: keep serving the tokens last read
                    else:
                        self._stamp = stamp
        return self.tokens.get(_digest(token))


class Authenticator:
    """Turns an ``Authorization`` header into a :class:`Caller` (:class:`AuthError` when it does not hold)."""

    def __init__(self, settings: Settings):
        self.service_token = settings.api_token.encode() if settings.api_token else None
        self.munge = Munge(settings.munge_socket) if settings.munge_socket else None
        self.tokens = _TokenFile(settings.user_tokens, settings.api_token) if settings.user_tokens else None
        self.owner_reads = settings.reads == "owner"
        if self.owner_reads and not (self.munge or self.tokens):
            raise ConfigError("IEZ_API_READS=owner needs a way for users to authenticate: set "
                              "IEZ_API_MUNGE_SOCKET (MUNGE) or IEZ_API_USER_TOKENS (a tokens file)")
        if settings.munge_socket and not os.path.exists(settings.munge_socket):
            raise ConfigError(f"IEZ_API_MUNGE_SOCKET={settings.munge_socket}: no such socket (is munged running?)")

    @property
    def users(self) -> bool:
        """Whether users (not only the service credential) can authenticate."""
        return self.munge is not None or self.tokens is not None

    @property
    def blocking(self) -> bool:
        """Whether authenticating may wait on munged (callers on an event loop use a thread then)."""
        return self.munge is not None

    def caller(self, authorization: str | None) -> Caller:
        if not authorization:
            return ANONYMOUS
        scheme, _, value = authorization.strip().partition(" ")
        scheme, value = scheme.lower(), value.strip()
        if scheme == "bearer":
            if not value:
                raise AuthError(401, "empty bearer token")
            if self.service_token is not None and hmac.compare_digest(value.encode(), self.service_token):
                return SERVICE
            user = self.tokens.user(value) if self.tokens else None
            if user is not None:
                return Caller(user=user, method="user-token")
            raise AuthError(403, "invalid bearer token")
        if scheme == "munge":
            if self.munge is None:
                raise AuthError(401, "this server does not take MUNGE credentials (IEZ_API_MUNGE_SOCKET is not set)")
            try:
                uid, _gid = self.munge.decode(value)
            except BadCredential as err:
                raise AuthError(401, f"MUNGE credential refused: {err}") from None
            except MungeUnavailable as err:
                raise AuthError(503, f"cannot check MUNGE credentials: {err}") from None
            return Caller(user=user_name(uid), method="munge")
        raise AuthError(401, f"unsupported authorization scheme {scheme!r}: use 'Bearer <token>' or "
                             "'MUNGE <credential>'")


def client_header(env: dict[str, str] | None = None) -> dict[str, str]:
    """The ``Authorization`` header a client sends, from its environment: ``IEZ_API_TOKEN`` (service), else
    ``IEZ_API_USER_TOKEN`` (a user token), else a new MUNGE credential from the munged at
    ``IEZ_MUNGE_SOCKET`` (libmunge's default socket when unset); ``{}`` when none applies."""
    settings = Settings.from_env(env=env)
    for token in (settings.api_token, settings.api_user_token):
        if token:
            return {"Authorization": f"Bearer {token}"}
    try:
        return {"Authorization": f"MUNGE {Munge(settings.client_munge_socket).encode()}"}
    except MungeUnavailable:
        return {}
