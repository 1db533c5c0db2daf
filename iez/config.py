"""Settings of every iez service: one class, :class:`Settings` (pydantic-settings), whose fields are the
``IEZ_*`` environment variables iez reads as configuration, each with its type, default, check and
description; ``docs/configuration.md``'s table is checked against the fields by
``tests/test_settings_documented.py``.

One setting names the interaction database everywhere: ``IEZ_DB`` (or ``--db``
on a command). A plain path is a SQLite file; ``mysql://user[:password]@host[:port]/db``
is a MariaDB/MySQL server reached through mysqlclient (the ``mariadb`` extra,
``pip install '.[mariadb]'``; without it such a URL is refused with
:class:`DriverMissing`, naming what to install). Without either the
database is ``$IEZ_STATE_DIR/iez.db`` (``IEZ_STATE_DIR`` defaults to
``~/.local/state/iez``).

A field's variable is ``IEZ_`` and its name in capitals (``oss_stale_s``: ``IEZ_OSS_STALE_S``) unless the
field names another (``reads``: ``IEZ_API_READS``); :func:`variable` gives it. An empty variable counts
as unset. A value the field refuses raises :class:`ConfigError` (exit code 2) naming the variable and the
value. :meth:`Settings.from_env` reads the environment (or a mapping given) when called;
:func:`settings` is the process-wide copy, read once (``settings.cache_clear()`` reads again).

The variables that are not settings of a service are listed here too, so that this module names every
``IEZ_*`` variable: :data:`PROCESS_VARIABLES` (what iez sets for the processes it starts, read back by
them and by the preload library), :data:`AGENT_VARIABLES` (the OSS agent's, which does not import iez)
and :data:`LIBRARY_VARIABLES` (read only by the preload library, ``placement_lib/README.md``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from sqlalchemy.engine import URL, make_url

from iez import errors

DEFAULT_STATE_DIR = "~/.local/state/iez"
READ_MODES = ("open", "token", "owner")
DEFAULT_MAX_BODY = 64 * 1024 * 1024
DEFAULT_MIN_FREE = 16 * 1024 * 1024
DEFAULT_XATTR = "user.iez.layout"
DEFAULT_MISS_RATE = 0.5
_UNITS = {"": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2, "g": 1024**3, "gib": 1024**3}
_INVENTORY_OFF = ("off", "0", "no", "false", "walk")
_INVENTORY_ON = ("on", "1", "yes", "true", "auto")


class ConfigError(errors.ConfigError):
    """A setting has a value iez cannot use; the message names the setting."""


class DriverMissing(ConfigError):
    """A MariaDB URL, but the MariaDB driver (mysqlclient, the ``mariadb`` extra) is not installed."""


#: What a MariaDB site installs: the driver builds against MariaDB Connector/C.
MARIADB_INSTALL = ("install the 'mariadb' extra: apt-get install libmariadb-dev pkg-config, "
                   "then, in the iez source tree, python -m pip install '.[mariadb]'")

#: Set by iez for the processes it starts (or by a user for one command), read back by them and by the
#: preload library: per-process protocol, not settings of a service, so not fields of :class:`Settings`.
PROCESS_VARIABLES: dict[str, str] = {
    "IEZ_MAP": "the layout map file a job's library reads its layouts from (iez.maps, iez run)",
    "IEZ_EMULATE": "an emulated cluster's root (`iez cluster emulate --root`): commands re-execute under the "
                   "preloaded library, which paces I/O at its servers' bandwidths ([data movement](data-movement.md))",
    "IEZ_EMULATE_SCALE": "emulation: each byte stands for K bytes (1 to 10^6; default 1)",
    "IEZ_EMULATE_WINDOW": "emulation: this process's bytes in flight per server (default: the table's window)",
    "IEZ_MODE": "the library's mode for this process: trace, place or off (iez run, the movers)",
    "IEZ_APP": "the application name the library records (iez run)",
    "IEZ_TRACE_DIR": "where the library writes this run's trace (iez run)",
    "IEZ_RUN_ID": "this run's identifier, else the scheduler's job id (iez run)",
    "IEZ_INCLUDE": "path prefixes the library watches (iez.predict.scope)",
    "IEZ_EXCLUDE": "path prefixes the library leaves alone (iez.predict.scope)",
    "IEZ_DEFAULT_STRIPE_COUNT": "the library's stripe count for a file without a prediction (iez demo)",
    "IEZ_IO_CLASS": "emulation: the I/O class this process's bytes count in (`iez copy`, staging and the "
                    "rebalancer set it)",
    "IEZ_IO_SHARE": "emulation: this process's cap as a share of each server (`iez copy --share`; default no cap)",
    "IEZ_IO_WEIGHT": "emulation: this process's weight among classes (`iez copy --weight`; default 1)",
    "IEZ_COPY_REEXEC": "marks an iez copy re-executed under the library",
    "IEZ_MOVER_PRELOADED": "marks a mover re-executed under the library",
    "IEZ_DEMO_RANK": "a demo writer's rank",
}

#: Read by the OSS agent (``agents/``, which runs on OSS nodes without iez): its own settings.
AGENT_VARIABLES: dict[str, str] = {
    "IEZ_AGENT_CONFIG": "the OSS agent's config file, when --config is not given (agents/config.py)",
}

#: Read only by the preload library (C), documented in placement_lib/README.md.
LIBRARY_VARIABLES: dict[str, str] = {
    "IEZ_TIMEOUT_MS": "how long the library waits for the DB or the API",
    "IEZ_DEBUG": "the library's diagnostics on stderr",
    "IEZ_TRACE_MAX_FILES": "trace mode: files whose records a process keeps in memory",
    "IEZ_ASSUME_LUSTRE": "treat a non-Lustre directory as Lustre (the pre-creating path, in emulation)",
}


def parse_size(text: str, where: str = "IEZ_API_MAX_BODY", minimum: int = 1024) -> int:
    """Bytes from ``text`` (``1048576``, ``512k``, ``64M``, ``1GiB``), at least ``minimum``; ValueError naming
    ``where`` otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text or "")
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"{where}={text!r} is not a size: use bytes or a number with k, M or G (e.g. 64M)")
    size = int(match.group(1)) * _UNITS[unit]
    if size < minimum:
        raise ValueError(f"{where}={text!r} is below {minimum} bytes")
    return size


#: The mapping :meth:`Settings.from_env` reads instead of ``os.environ`` (None: ``os.environ``).
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("iez_settings_environ", default=None)


class _Variables(PydanticBaseSettingsSource):
    """Each field's variable, exactly as named (case matters, empty means unset), from the environment."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        env = _ENVIRON.get()
        name = variable(field_name)
        value = (os.environ if env is None else env).get(name)
        return value, name, False

    def __call__(self) -> dict[str, Any]:
        values = {}
        for name, info in self.settings_cls.model_fields.items():
            value, _, _ = self.get_field_value(info, name)
            if value is not None and str(value).strip() != "":
                values[name] = value
        return values


class Settings(BaseSettings):
    """Every setting of iez's services and commands: a field per ``IEZ_*`` variable (:func:`variable`)."""

    model_config = SettingsConfigDict(env_prefix="IEZ_", frozen=True, populate_by_name=True, extra="ignore")

    db: str = Field(
        default="", json_schema_extra={"shown": "`$IEZ_STATE_DIR/iez.db`"},
        description="the interaction DB (also `--db`): a path is a SQLite file, "
                    "`mysql://user[:password]@host[:port]/db` a MariaDB/MySQL server")
    state_dir: Path = Field(
        default=Path(DEFAULT_STATE_DIR),
        description="where local state lives (the default DB, traces, runs, the staging journal, the emulated "
                    "layouts' log)")
    api_token: str | None = Field(
        default=None,
        description="the bearer token every write to the API must carry (unset: writes are refused, 403); "
                    "clients send it (`iez map fetch`, `iez learn --api`, the Slurm plugin)")
    reads: str = Field(
        default="", validation_alias="IEZ_API_READS",
        json_schema_extra={"shown": "`owner` when users can authenticate, else `open`"},
        description="who reads the API: `open` (anyone), `token` (reads need `IEZ_API_TOKEN`) or `owner` "
                    "(each user reads only their own applications)")
    munge_socket: str | None = Field(
        default=None, validation_alias="IEZ_API_MUNGE_SOCKET",
        description="munged's socket (also `iez api --munge-socket`): the API accepts "
                    "`Authorization: MUNGE <credential>`")
    user_tokens: str | None = Field(
        default=None, validation_alias="IEZ_API_USER_TOKENS",
        description="a file of `USER TOKEN` lines (also `iez api --user-tokens`): the API accepts those tokens "
                    "as that user's `Authorization: Bearer`")
    api_max_body: int = Field(
        default=DEFAULT_MAX_BODY,
        description="request bodies larger than this get 413 before they are read (also `iez api --max-body`; "
                    "bytes, or with k, M, G)")
    api_min_free: int = Field(
        default=DEFAULT_MIN_FREE,
        description="`/healthz` says unhealthy when the SQLite DB's file system has less free (bytes, or with "
                    "k, M, G; 0: no check)")
    oss_stale_s: float = Field(
        default=180.0, gt=0, allow_inf_nan=False,
        description="for an OSS whose reports give no interval: silent for longer (seconds), it is left out of "
                    "allocation (others: 3 of their own intervals, `iez/freshness.py`)")
    reservation_ttl_s: float = Field(
        default=86400.0, gt=0, allow_inf_nan=False,
        description="how long (seconds) allocated-but-unwritten bytes stay reserved (reports showing them "
                    "written end it sooner)")
    retrace_miss_rate: float = Field(
        default=DEFAULT_MISS_RATE, ge=0, lt=1,
        description="a run missing more than this share of its files flags its application for re-tracing "
                    "(also `--retrace-miss-rate`)")
    preload_lib: Path | None = Field(
        default=None, json_schema_extra={"shown": "found"},
        description="the `libiez.so` that `iez run`, `demo`, `copy` and the movers preload (else a source "
                    "tree's `placement_lib/build/libiez.so`, else the packaged copy)")
    layout_xattr: str = Field(
        default=DEFAULT_XATTR,
        description="the extended attribute an emulated cluster's layouts are stored in (the preload library "
                    "reads it too)")
    inventory: bool = Field(
        default=True,
        description="`off` (or `walk`): the mover, drain and rebalancer walk the tree instead of asking the "
                    "file inventory ([balancing](balancing.md)); `on`: the inventory when it covers the roots")
    balance_config: Path | None = Field(
        default=None,
        description="the balancing service's TOML file, when `--config` is not given "
                    "([balancing](balancing.md))")
    api_url: str | None = Field(
        default=None,
        description="the API `iez map fetch` asks (also `--api`); `notebooks/03-live` queries it instead of "
                    "starting its own")
    api_user_token: str | None = Field(
        default=None,
        description="a user's token, sent by `iez map fetch`, `iez learn --api` and the Slurm plugin as "
                    "`Authorization: Bearer` (after `IEZ_API_TOKEN`, before MUNGE)")
    client_munge_socket: str | None = Field(
        default=None, validation_alias="IEZ_MUNGE_SOCKET", json_schema_extra={"shown": "libmunge's"},
        description="the munged socket a client's MUNGE credential comes from")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _Variables(settings_cls)

    @classmethod
    def from_env(cls, db: str | None = None, env: Mapping[str, str] | None = None) -> "Settings":
        """Settings from ``env`` (default ``os.environ``), read now; ``db`` (a ``--db`` value) wins over
        ``IEZ_DB``. :class:`ConfigError` names the variable whose value cannot be used. The same values give
        the same (frozen) object, built once: callers on hot paths (a layout attribute per file) may call this."""
        source = os.environ if env is None else env
        return _build(cls, db or None, tuple(source.get(name) for name in _names()))

    @field_validator("state_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @field_validator("reads", mode="before")
    @classmethod
    def _read_mode(cls, value: Any) -> str:
        mode = str(value).strip().lower()
        if mode and mode not in READ_MODES:
            raise ValueError(f"choose one of {', '.join(READ_MODES)}")
        return mode

    @field_validator("api_max_body", mode="before")
    @classmethod
    def _max_body(cls, value: Any) -> int:
        return value if isinstance(value, int) else parse_size(str(value), "IEZ_API_MAX_BODY")

    @field_validator("api_min_free", mode="before")
    @classmethod
    def _min_free(cls, value: Any) -> int:
        return value if isinstance(value, int) else parse_size(str(value), "IEZ_API_MIN_FREE", minimum=0)

    @field_validator("inventory", mode="before")
    @classmethod
    def _inventory(cls, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _INVENTORY_OFF or word in _INVENTORY_ON:
            return word in _INVENTORY_ON
        raise ValueError("use off (walk the tree) or on (the inventory when it covers the roots)")

    @model_validator(mode="after")
    def _defaults(self) -> "Settings":
        """The defaults that depend on other settings (frozen: set once, here)."""
        if not self.db:
            object.__setattr__(self, "db", str(self.state_dir / "iez.db"))
        if not self.reads:
            object.__setattr__(self, "reads", "owner" if self.munge_socket or self.user_tokens else "open")
        return self

    def with_db(self, db: str | None) -> "Settings":
        return self.model_copy(update={"db": db}) if db else self

    @property
    def db_url(self) -> URL:
        return database_url(self.db)


def variable(field_name: str) -> str:
    """The environment variable of a :class:`Settings` field."""
    alias = Settings.model_fields[field_name].validation_alias
    return alias if isinstance(alias, str) else "IEZ_" + field_name.upper()


def variables() -> dict[str, str]:
    """Every :class:`Settings` field's variable -> its description."""
    return {variable(name): info.description or "" for name, info in Settings.model_fields.items()}


#: The markers around the generated tables in docs/configuration.md.
TABLE_BEGIN = "<!-- settings: generated from iez/config.py by `python -m iez.config`; do not edit -->"
TABLE_END = "<!-- end of the generated settings -->"


def _shown_default(info: FieldInfo) -> str:
    extra = info.json_schema_extra
    if isinstance(extra, dict) and "shown" in extra:
        return str(extra["shown"])
    value = info.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`on`" if value else "`off`"
    if isinstance(value, int) and value >= 1024 * 1024 and value % (1024 * 1024) == 0:
        return f"`{value // (1024 * 1024)}M`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def _kind(info: FieldInfo) -> str:
    text = str(info.annotation)
    for word, kind in (("bool", "on/off"), ("Path", "path"), ("int", "size"), ("float", "number")):
        if word in text:
            return kind
    return "text"


def markdown() -> str:
    """docs/configuration.md's generated part: the fields, then the variables that are not settings."""
    lines = [TABLE_BEGIN, "", "| variable | kind | default | meaning |", "|---|---|---|---|"]
    for name, info in Settings.model_fields.items():
        lines.append(f"| `{variable(name)}` | {_kind(info)} | {_shown_default(info)} | {info.description} |")
    for title, table in (("Set by iez for the processes it starts (or by you for one command), read back by "
                          "them and by the preload library:", PROCESS_VARIABLES),
                         ("Read by the OSS agent (`agents/`), which does not import iez:", AGENT_VARIABLES),
                         ("Read only by the preload library (its table, with defaults, is in "
                          "[placement_lib/README.md](../placement_lib/README.md)):", LIBRARY_VARIABLES)):
        lines += ["", title, "", "| variable | meaning |", "|---|---|"]
        lines += [f"| `{name}` | {meaning} |" for name, meaning in table.items()]
    return "\n".join([*lines, "", TABLE_END])


@lru_cache(maxsize=1)
def _names() -> tuple[str, ...]:
    return tuple(variables())


@lru_cache(maxsize=64)
def _build(cls: type[Settings], db: str | None, values: tuple[str | None, ...]) -> Settings:
    """The settings of these variables' ``values`` (in :func:`_names`' order; None: unset)."""
    token = _ENVIRON.set({name: value for name, value in zip(_names(), values) if value is not None})
    try:
        return cls(db=db) if db else cls()
    except ValidationError as err:
        raise ConfigError(_explain(err)) from None
    finally:
        _ENVIRON.reset(token)


def _explain(err: ValidationError) -> str:
    """One line per refused value: ``IEZ_X='value': why``."""
    lines = []
    for problem in err.errors():
        field = str(problem["loc"][0]) if problem["loc"] else ""
        name = variable(field) if field in Settings.model_fields else field
        why = str(problem["msg"]).removeprefix("Value error, ")
        if why.startswith(name + "="):
            lines.append(why)
        else:
            lines.append(f"{name}={problem.get('input')!r}: {why}")
    return "; ".join(lines)


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


if __name__ == "__main__":  # python -m iez.config: the generated part of docs/configuration.md
    print(markdown())
