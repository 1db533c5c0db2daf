"""Agent settings: a config file (INI with an ``[agent]`` section, or plain
``key = value`` lines), overridden by command-line flags.

The file comes from ``--config FILE`` or, without it, from the environment variable
``IEZ_AGENT_CONFIG``. Example (``/etc/iez/agent.conf``)::

    # iez OSS agent
    oss_id = oss1
    mds = tcp://mds:5555
    # with a standby MDS service: list both, every message goes to each
    # mds = tcp://mds1:5555, tcp://mds2:5555
    interval = 60
    # source = auto | lctl | procfs | file
    source = auto
    root = /proc/fs/lustre:/sys/fs/lustre
    # declare (and restrict to) the OSTs of this OSS; empty = discover them
    osts = fs-OST0000,fs-OST0001
    curve_server_key = /etc/iez/keys/mds.key
    curve_secret_key = /etc/iez/keys/oss1.key_secret

Keys: see :data:`KEYS`. Dashes and underscores are interchangeable in key names;
``#`` and ``;`` start comments; relative paths are relative to the file's directory.
Unknown keys and sections are errors (a typo must not be silently ignored).
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field, fields
from pathlib import Path

from agents import AgentError
from agents.lctl import ost_index

__all__ = ["AgentConfig", "KEYS", "ENV_CONFIG", "read_config_file", "resolve"]

ENV_CONFIG = "IEZ_AGENT_CONFIG"
SECTIONS = ("agent", "iez-agent", "iez_agent")
MIN_INTERVAL_S = 1.0
MAX_INTERVAL_S = 3600.0
DEFAULT_INTERVAL_S = 60.0
SOURCES = ("auto", "lctl", "procfs", "file")

#: key -> description (all keys of the file; each is also a CLI flag)
KEYS = {
    "oss_id": "identifier of this OSS (default: the short host name)",
    "mds": "MDS endpoint(s), e.g. tcp://mds1:5555 or, with a standby, tcp://mds1:5555,tcp://mds2:5555 "
           "(every one gets every message, each on its own socket)",
    "interval": "seconds between messages, 1..3600 (default 60)",
    "source": "auto, lctl, procfs or file (default auto)",
    "root": "colon-separated parameter trees (default /proc/fs/lustre:/sys/fs/lustre)",
    "lctl_output": "saved 'lctl get_param' text (source file)",
    "lctl": "the lctl program (default: lctl on PATH)",
    "osts": "comma-separated OST names this OSS serves (default: all found)",
    "fsname": "only OSTs of this file system",
    "host": "host name put in messages (default: this host's name)",
    "curve_server_key": "the MDS's public key file (zmq certificate)",
    "curve_secret_key": "this agent's secret key file (zmq certificate)",
    "sndhwm": "messages queued for a slow MDS before newer ones are dropped (default 8)",
    "proc_stat": "CPU statistics file (default /proc/stat)",
    "meminfo": "memory statistics file (default /proc/meminfo)",
}
_PATH_KEYS = ("lctl_output", "curve_server_key", "curve_secret_key", "proc_stat", "meminfo")
_ENDPOINT = re.compile(r"^(tcp|ipc|inproc|pgm|epgm|ws|wss|vmci)://\S+$")
_TCP = re.compile(r"^tcp://(?:\[[^\]]+\]|[^:/\s]+):(\d+)$")


@dataclass
class AgentConfig:
    oss_id: str = ""
    mds: str | None = None
    interval: float = DEFAULT_INTERVAL_S
    source: str = "auto"
    root: str | None = None
    lctl_output: str | None = None
    lctl: str | None = None
    osts: tuple[str, ...] = ()
    fsname: str | None = None
    host: str = ""
    curve_server_key: str | None = None
    curve_secret_key: str | None = None
    sndhwm: int = 8
    proc_stat: str = "/proc/stat"
    meminfo: str = "/proc/meminfo"
    config_file: str | None = field(default=None)

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Every MDS endpoint (``mds`` is a comma list: the active MDS service and its standbys)."""
        return tuple(e for e in (self.mds or "").split(",") if e)

    @property
    def curve(self) -> bool:
        return bool(self.curve_server_key and self.curve_secret_key)


def _strip_value(value: str) -> str:
    value = re.split(r"\s[#;]", value, maxsplit=1)[0].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value


def read_config_file(path: str | Path) -> dict[str, str]:
    """Key -> value from a config file (INI ``[agent]`` section or plain lines)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise AgentError(f"cannot read config file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise AgentError(f"config file {path} is not UTF-8 text") from None
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
            if section not in SECTIONS:
                raise AgentError(f"{path}:{number}: unknown section [{section}] (use [agent])")
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i > 0]
        if not seps:
            raise AgentError(f"{path}:{number}: expected 'key = value', found {line[:60]!r}")
        cut = min(seps)
        key = line[:cut].strip().lower().replace("-", "_")
        if key not in KEYS:
            raise AgentError(f"{path}:{number}: unknown key {key!r} (known: {', '.join(KEYS)})")
        value = _strip_value(line[cut + 1:])
        if key in _PATH_KEYS and value and not os.path.isabs(value):
            value = str((path.parent / value).resolve())
        if key == "root" and value:
            value = ":".join(p if os.path.isabs(p) else str((path.parent / p).resolve())
                             for p in value.split(":") if p)
        values[key] = value
    return values


def _scalar(value: object) -> str | int | float:
    """``value`` (a file's text, a flag's parsed value) when float() or int() may take it; else TypeError."""
    if not isinstance(value, (str, int, float)):
        raise TypeError(f"not a number: {value!r}")
    return value


def _interval(value: object, where: str) -> float:
    try:
        seconds = float(_scalar(value))
    except (TypeError, ValueError):
        raise AgentError(f"{where}: interval must be a number of seconds, got {value!r}") from None
    if not MIN_INTERVAL_S <= seconds <= MAX_INTERVAL_S:
        raise AgentError(f"{where}: interval must be {MIN_INTERVAL_S:g}..{MAX_INTERVAL_S:g} s, got {value}")
    return seconds


def _osts(value: object, where: str) -> tuple[str, ...]:
    items = value if isinstance(value, (list, tuple)) else re.split(r"[,\s]+", str(value))
    names: list[str] = []
    for item in items:
        for name in re.split(r"[,\s]+", str(item)):
            if not name:
                continue
            if ost_index(name) is None:
                raise AgentError(f"{where}: {name!r} is not an OST name like fs-OST0001")
            names.append(name)
    return tuple(names)


def _endpoint(value: str, where: str) -> str:
    if not _ENDPOINT.match(value):
        raise AgentError(f"{where}: MDS endpoint must look like tcp://host:port, got {value!r}")
    tcp = _TCP.match(value)
    if value.startswith("tcp://") and (not tcp or not 1 <= int(tcp.group(1)) <= 65535):
        raise AgentError(f"{where}: MDS endpoint must look like tcp://host:port, got {value!r}")
    return value


def _text(value: str, where: str, what: str) -> str:
    if not value or len(value) > 255 or "\x00" in value or value != value.strip():
        raise AgentError(f"{where}: {what} must be 1..255 characters without surrounding blanks, got {value!r}")
    return value


def resolve(cli: dict[str, object], config_path: str | None = None) -> AgentConfig:
    """Merge defaults, the config file (``config_path`` or ``$IEZ_AGENT_CONFIG``) and CLI values.

    ``cli`` maps :data:`KEYS` names to values; None means "not given on the command line".
    """
    if config_path is None:
        config_path = os.environ.get(ENV_CONFIG) or None
    merged: dict[str, object] = {}
    where: dict[str, str] = {}
    if config_path:
        for key, text in read_config_file(config_path).items():
            merged[key] = text
            where[key] = f"config file {config_path}"
    for key, value in cli.items():
        if value is not None:
            merged[key] = value
            where[key] = f"--{key.replace('_', '-')}"
    known = {f.name for f in fields(AgentConfig)}
    cfg = AgentConfig(config_file=config_path)
    for key, value in merged.items():
        if key not in known:
            raise AgentError(f"unknown setting {key!r}")
        at = where[key]
        if value == "":
            continue  # "key =" in a file means "use the default"
        if key == "interval":
            cfg.interval = _interval(value, at)
        elif key == "osts":
            cfg.osts = _osts(value, at)
        elif key == "mds":
            items = value if isinstance(value, (list, tuple)) else [value]
            endpoints = [_endpoint(e.strip(), at) for item in items for e in str(item).split(",") if e.strip()]
            if len(set(endpoints)) != len(endpoints):
                raise AgentError(f"{at}: an MDS endpoint is listed twice: {', '.join(endpoints)}")
            cfg.mds = ",".join(endpoints) or None
        elif key == "sndhwm":
            try:
                cfg.sndhwm = int(_scalar(value))
            except (TypeError, ValueError):
                raise AgentError(f"{at}: sndhwm must be an integer, got {value!r}") from None
            if not 1 <= cfg.sndhwm <= 100000:
                raise AgentError(f"{at}: sndhwm must be 1..100000, got {value!r}")
        elif key == "source":
            if value not in SOURCES:
                raise AgentError(f"{at}: source must be one of {', '.join(SOURCES)}, got {value!r}")
            cfg.source = str(value)
        elif key in ("oss_id", "host", "fsname"):
            setattr(cfg, key, _text(str(value), at, key))
        else:
            setattr(cfg, key, str(value))
    if not cfg.host:
        cfg.host = socket.gethostname() or "localhost"
    if not cfg.oss_id:
        cfg.oss_id = cfg.host.split(".")[0]
    if bool(cfg.curve_server_key) != bool(cfg.curve_secret_key):
        raise AgentError("CURVE needs both --curve-server-key (the MDS's public key) and "
                         "--curve-secret-key (this agent's secret key)")
    return cfg
