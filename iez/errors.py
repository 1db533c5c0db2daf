"""The error tree: every exception iez raises derives from :class:`IezError`, under one of five branches,
and :data:`TABLE` is the one place that says what each branch means to a user - the ``iez`` command's exit
code (``iez/cli.py``) and the REST API's HTTP status (``iez/api/app.py``).

A module's own exception keeps its name and the built-in base its callers catch (``except ValueError``
still catches an :class:`InputError`, ``except LookupError`` a :class:`NotFound`), and adds the branch::

    class MapError(InputError): ...            # was MapError(ValueError)
    class DatabaseUnavailable(StorageUnavailable, OSError): ...

``tests/test_errors.py`` imports every module of ``iez`` and fails on an exception class outside the tree.
The table is documented in ``docs/reference.md`` (Exit codes and HTTP statuses).
"""

from __future__ import annotations

from typing import ClassVar


class IezError(Exception):
    """The root: anything iez raises on purpose. Outside every branch: exit 1, HTTP 500."""

    exit_code: ClassVar[int]
    http_status: ClassVar[int]


class InputError(IezError, ValueError):
    """What the user or a client gave cannot be used (a bad value, a malformed file or request)."""


class NotFound(IezError, LookupError):
    """What was named does not exist (a request, an allocation, an application)."""


class Infeasible(IezError, ValueError):
    """A well-formed request that cannot be placed: no pool or OST set satisfies it (said per file)."""


class StorageUnavailable(IezError):
    """A service iez needs is not available now (the interaction DB, munged, a busy journal): retry later."""


class ConfigError(IezError, ValueError):
    """The installation or its configuration is wrong (a settings file, a key file, a missing driver
    or library): fix the configuration, retrying does not help."""


#: The one mapping of the tree to exit codes and HTTP statuses: branch -> (exit code, HTTP status).
#: 2 is also argparse's code for a bad command line, and the systemd units do not restart on it;
#: 75 is sysexits' EX_TEMPFAIL, so the units restart a service whose DB is not up yet.
TABLE: dict[type[IezError], tuple[int, int]] = {
    IezError: (1, 500),
    InputError: (2, 422),
    NotFound: (3, 404),
    Infeasible: (4, 409),
    StorageUnavailable: (75, 503),
    ConfigError: (2, 500),
}

for _cls, (_code, _status) in TABLE.items():
    _cls.exit_code, _cls.http_status = _code, _status


def branch(exc: BaseException) -> type[IezError] | None:
    """The branch of :data:`TABLE` an exception falls under (the nearest in its MRO), None outside the tree."""
    for cls in type(exc).__mro__:
        if cls in TABLE:
            return cls
    return None


def exit_code(exc: BaseException) -> int:
    """The ``iez`` command's exit code for an exception: its branch's, 1 outside the tree."""
    found = branch(exc)
    return TABLE[found][0] if found else 1


def http_status(exc: BaseException) -> int:
    """The API's HTTP status for an exception: its branch's, 500 outside the tree."""
    found = branch(exc)
    return TABLE[found][1] if found else 500
