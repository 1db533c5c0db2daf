"""MUNGE credentials through libmunge (ctypes): how Slurm and other HPC services learn who is calling.

A client asks its node's ``munged`` for a credential (:meth:`Munge.encode`,
or the ``munge -n`` command); the API hands it to its own ``munged``
(:meth:`Munge.decode`), which checks it was made with the site's shared key,
is within its time-to-live and was not used before, and answers the uid and
gid of the process that made it. Nothing secret is kept by iez.

Only the few entry points of ``libmunge.so.2`` (Debian's ``libmunge2``, which
the ``munge`` package pulls in) are used; option and error numbers are those
of its public header ``munge.h``. A context is made per call, so calls from
many threads at once are safe.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pwd
from functools import lru_cache

from iez.errors import InputError, StorageUnavailable

MUNGE_OPT_SOCKET = 8
EMUNGE_SUCCESS = 0
EMUNGE_SOCKET = 6
#: Errors that say the credential is bad, as opposed to the daemon being unreachable.
CREDENTIAL_ERRORS = {8: "invalid credential format", 9: "invalid credential version", 10: "invalid cipher type",
                     11: "invalid MAC type", 12: "invalid compression type", 13: "unrecognized security realm",
                     14: "invalid credential", 15: "expired credential", 16: "rewound credential (future time)",
                     17: "replayed credential", 18: "unauthorized credential decode"}
LIBRARY = "libmunge.so.2"


class MungeUnavailable(StorageUnavailable, RuntimeError):
    """libmunge cannot be loaded, or munged does not answer on its socket."""


class BadCredential(InputError):
    """munged refused the credential: the message says why (expired, replayed, invalid, ...)."""


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    name = ctypes.util.find_library("munge") or LIBRARY
    try:
        lib = ctypes.CDLL(name)
    except OSError as err:
        raise MungeUnavailable(f"cannot load {LIBRARY} ({err}): install MUNGE (Debian: apt-get install munge)") \
            from None
    lib.munge_ctx_create.restype = ctypes.c_void_p
    lib.munge_ctx_create.argtypes = []
    lib.munge_ctx_destroy.restype = None
    lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
    lib.munge_ctx_strerror.restype = ctypes.c_char_p
    lib.munge_ctx_strerror.argtypes = [ctypes.c_void_p]
    lib.munge_strerror.restype = ctypes.c_char_p
    lib.munge_strerror.argtypes = [ctypes.c_int]
    # munge_ctx_set is variadic (ctx, opt, ...): the socket option takes one char *.
    lib.munge_ctx_set.restype = ctypes.c_int
    lib.munge_encode.restype = ctypes.c_int
    lib.munge_encode.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    lib.munge_decode.restype = ctypes.c_int
    lib.munge_decode.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32)]
    return lib


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free.restype = None
    return libc


def user_name(uid: int) -> str:
    """The login name of ``uid``, or the number as text when the password database has none (as ``ls -l``)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class Munge:
    """Encode and decode MUNGE credentials through the munged at ``socket`` (None: libmunge's default)."""

    def __init__(self, socket: str | None = None):
        self.socket = os.fsencode(socket) if socket else None
        self.lib = _lib()

    def _context(self) -> int:
        ctx = self.lib.munge_ctx_create()
        if not ctx:
            raise MemoryError("munge_ctx_create failed")
        if self.socket is not None:
            err = self.lib.munge_ctx_set(ctypes.c_void_p(ctx), ctypes.c_int(MUNGE_OPT_SOCKET),
                                         ctypes.c_char_p(self.socket))
            if err != EMUNGE_SUCCESS:
                self.lib.munge_ctx_destroy(ctx)
                raise MungeUnavailable(f"munge socket {self.socket.decode(errors='replace')}: "
                                       f"{self.lib.munge_strerror(err).decode()}")
        return ctx

    def _error(self, ctx: int, err: int) -> str:
        text = self.lib.munge_ctx_strerror(ctx) or self.lib.munge_strerror(err)
        return text.decode(errors="replace")

    def encode(self) -> str:
        """A new credential of this process's user (no payload)."""
        ctx = self._context()
        cred = ctypes.c_void_p()
        try:
            err = self.lib.munge_encode(ctypes.byref(cred), ctx, None, 0)
            if err != EMUNGE_SUCCESS:
                raise MungeUnavailable(f"munge_encode: {self._error(ctx, err)}")
            return ctypes.string_at(cred.value or 0).decode("ascii")
        finally:
            if cred.value:
                _libc().free(cred.value)
            self.lib.munge_ctx_destroy(ctx)

    def decode(self, credential: str) -> tuple[int, int]:
        """``(uid, gid)`` of the process that made ``credential``.

        :class:`BadCredential` when munged refuses it (the reason in the message), :class:`MungeUnavailable`
        when munged cannot be reached.
        """
        try:
            raw = credential.encode("ascii")
        except UnicodeEncodeError:
            raise BadCredential("invalid credential format (not ASCII)") from None
        if b"\x00" in raw:
            raise BadCredential("invalid credential format (NUL byte)")
        ctx = self._context()
        uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
        try:
            err = self.lib.munge_decode(raw, ctx, None, None, ctypes.byref(uid), ctypes.byref(gid))
            if err == EMUNGE_SUCCESS:
                return uid.value, gid.value
            if err in CREDENTIAL_ERRORS:
                raise BadCredential(CREDENTIAL_ERRORS[err])
            raise MungeUnavailable(f"munged: {self._error(ctx, err)}")
        finally:
            self.lib.munge_ctx_destroy(ctx)
