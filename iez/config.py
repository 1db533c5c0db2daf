"""Settings of every iez service, read once from the environment.

One setting names the interaction database everywhere: ``IEZ_DB`` (or ``--db``
on a command). A plain path is a SQLite file; ``mysql://user[:password]@host[:port]/db``
is a MariaDB/MySQL server reached through mysqlclient (the ``mariadb`` extra,
``pip install '.[mariadb]'``; without it such a URL is refused with
:class:`DriverMissing`, naming what to install). Without either the
database is ``$IEZ_STATE_DIR/iez.db`` (``IEZ_STATE_DIR`` defaults to
``~/.local/state/iez``).

Other variables:

- ``IEZ_API_TOKEN``: the bearer token writes to the REST API need; unset means
  the API refuses every write (403) rather than accepting them unauthenticated.
- ``IEZ_API_READS``: ``open`` lets anyone read; ``token`` makes reads need the
  token too; ``owner`` (the default once users can authenticate) serves an
  application's layouts only to its owner (:mod:`iez.api.auth`).
- ``IEZ_API_MUNGE_SOCKET``: munged's socket; set, the API accepts
  ``Authorization: MUNGE <credential>`` (as Slurm authenticates users).
- ``IEZ_API_USER_TOKENS``: a file of ``USER TOKEN`` lines; set, the API accepts
  those tokens as ``Authorization: Bearer <token>`` of that user.
- ``IEZ_OSS_STALE_S``: seconds after its last report an OSS counts as stale and
  its OSTs are left out of allocations (default 180: three missed 60 s reports).
- ``IEZ_RESERVATION_TTL_S``: how long an allocation's reservation holds OST space
  (default 86400).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from sqlalchemy.engine import URL, make_url

DEFAULT_STATE_DIR = "~/.local/state/iez"
READ_MODES = ("open", "token", "owner")


class ConfigError(ValueError):
    """A setting has a value iez cannot use; the message names the setting."""


class DriverMissing(ConfigError):
    """A MariaDB URL, but the MariaDB driver (mysqlclient, the ``mariadb`` extra) is not installed."""


#: What a MariaDB site installs: the driver builds against MariaDB Connector/C.
MARIADB_INSTALL = ("install the 'mariadb' extra: apt-get install libmariadb-dev pkg-config, "
                   "then, in the iez source tree, python -m pip install '.[mariadb]'")


@dataclass(frozen=True)
class Settings:
    db: str
    state_dir: Path
    api_token: str | None = None
    reads: str = "open"
    oss_stale_s: float = 180.0
    reservation_ttl_s: float = 86400.0
    munge_socket: str | None = None
    user_tokens: str | None = None

    @classmethod
    def from_env(cls, db: str | None = None, env: dict[str, str] | None = None) -> "Settings":
        """Settings from ``env`` (default ``os.environ``); ``db`` (a ``--db`` value) wins over ``IEZ_DB``."""
        env = dict(os.environ if env is None else env)
        state_dir = Path(env.get("IEZ_STATE_DIR") or DEFAULT_STATE_DIR).expanduser()
        munge_socket, user_tokens = env.get("IEZ_API_MUNGE_SOCKET") or None, env.get("IEZ_API_USER_TOKENS") or None
        default_reads = "owner" if munge_socket or user_tokens else "open"
        reads = env.get("IEZ_API_READS", default_reads).strip().lower() or default_reads
        if reads not in READ_MODES:
            raise ConfigError(f"IEZ_API_READS={reads!r}: choose one of {', '.join(READ_MODES)}")
        return cls(
            db=db or env.get("IEZ_DB") or str(state_dir / "iez.db"),
            state_dir=state_dir,
            api_token=env.get("IEZ_API_TOKEN") or None,
            reads=reads,
            oss_stale_s=_positive(env, "IEZ_OSS_STALE_S", 180.0),
            reservation_ttl_s=_positive(env, "IEZ_RESERVATION_TTL_S", 86400.0),
            munge_socket=munge_socket,
            user_tokens=user_tokens,
        )

    def with_db(self, db: str | None) -> "Settings":
        return replace(self, db=db) if db else self

    @property
    def db_url(self) -> URL:
        return database_url(self.db)


def _positive(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be positive")
    return value


def database_url(db: str) -> URL:
    """The SQLAlchemy URL for an ``IEZ_DB`` value (path, ``sqlite:///…`` or ``mysql://…``)."""
    if not db:
        raise ConfigError("IEZ_DB is empty")
    if db.startswith(("mysql://", "mariadb://", "mysql+mysqldb://")):
        try:
            url = make_url(db)
        except Exception as err:  # sqlalchemy raises ArgumentError with a terse text
            raise ConfigError(f"IEZ_DB={db!r} is not a valid mysql://user[:password]@host[:port]/db URL") from err
        if not url.database:
            raise ConfigError(f"IEZ_DB={db!r} names no database: use mysql://user[:password]@host[:port]/db")
        query = dict(url.query)
        query.setdefault("charset", "utf8mb4")
        url = url.set(drivername="mysql+mysqldb", query=query)
        require_driver(url)
        return url
    if db.startswith("sqlite:"):
        url = make_url(db)
        if not url.database or url.database == ":memory:":
            raise ConfigError(f"IEZ_DB={db!r}: the interaction DB must be a file shared by every process")
        return url
    if "://" in db:
        raise ConfigError(f"IEZ_DB={db!r}: use a file path or mysql://user[:password]@host[:port]/db")
    return URL.create("sqlite", database=str(Path(db).expanduser().resolve()))


def require_driver(url: URL) -> None:
    """Refuse, in one line naming what to install, a MariaDB ``url`` when its driver cannot be imported."""
    if url.get_backend_name() not in ("mysql", "mariadb"):
        return
    problem = _mysqldb_problem()
    if problem:
        raise DriverMissing(f"{describe(url)} is a MariaDB database, but the MariaDB driver (mysqlclient) "
                            f"{problem}: {MARIADB_INSTALL}")


@lru_cache(maxsize=1)
def _mysqldb_problem() -> str | None:
    try:
        import MySQLdb  # noqa: F401
    except ImportError as err:
        if isinstance(err, ModuleNotFoundError) and err.name == "MySQLdb":
            return "is not installed"
        return f"cannot be loaded ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
    return None


def describe(url: URL) -> str:
    """The database for messages, password hidden."""
    if url.get_backend_name() == "sqlite":
        return str(url.database)
    return url.set(drivername="mysql", query={}).render_as_string(hide_password=True)


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The process-wide settings, read from the environment once."""
    return Settings.from_env()
