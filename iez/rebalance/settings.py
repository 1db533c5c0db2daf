"""The balancing service's settings: a TOML file's ``[balance]`` table, then command-line flags over it.

A typo must not silently leave a threshold at its default, so an unknown key,
a wrong type or a value out of range is one line naming the file (or the flag)
and the key. Example (``deploy/etc/balance.toml``)::

    [balance]
    root = "/lustre/fs"        # the file system: a Lustre mount point, or an emulated cluster's root
    high_water = 0.85          # a pass starts when an OST of a pool is fuller than this ...
    target = 0.10              # ... or the pool's fill spread passes target + hysteresis,
    hysteresis = 0.05
    low_water = 0.80           # and moves until every OST is under low_water and the spread under target
    share = 0.3                # of each OST's bandwidth (I/O class "rebalance"; NRS TBF on Lustre)
    busy_mib_s = 256           # pause while jobs drive more than this on a source or destination OST
    interval = 60              # seconds between looks while idle
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from iez.rebalance.plan import DEFAULT_TARGET


@dataclass(frozen=True)
class BalanceSettings:
    root: str | None = None
    db: str | None = None
    high_water: float = 0.85
    low_water: float = 0.80
    target: float = DEFAULT_TARGET
    hysteresis: float = 0.05
    share: float = 0.3
    busy_mib_s: float = 256.0
    interval: float = 60.0
    state_dir: str | None = None
    pools: tuple[str, ...] = ()

    def check(self, where: dict[str, str]) -> "BalanceSettings":
        """Raise ValueError naming where a bad value came from (``where``: key -> "FILE: key" or "--flag")."""

        def bad(key: str, why: str) -> ValueError:
            return ValueError(f"{where.get(key, key)} {getattr(self, key)!r}: {why}")

        for key in ("high_water", "low_water"):
            if not 0.0 < getattr(self, key) <= 1.0:
                raise bad(key, "a fill between 0 and 1 (e.g. 0.85)")
        if self.low_water >= self.high_water:
            raise bad("low_water", f"must be below high_water ({self.high_water})")
        if not 0.0 < self.target < 1.0:
            raise bad("target", "a fill spread between 0 and 1 (e.g. 0.10)")
        if not 0.0 <= self.hysteresis < 1.0:
            raise bad("hysteresis", "a fill spread from 0 to below 1 (e.g. 0.05)")
        if not 0.0 < self.share <= 1.0:
            raise bad("share", "a fraction of each OST's bandwidth, above 0 and at most 1")
        if not 0.0 < self.busy_mib_s < 1e9:
            raise bad("busy_mib_s", "MiB/s of jobs' traffic on an OST, above 0")
        if not 0.1 <= self.interval <= 86400:
            raise bad("interval", "seconds from 0.1 to 86400")
        return self


#: key -> (type the TOML value must have, what to say when it has not)
_KEYS = {
    "root": (str, "a directory"), "db": (str, "a SQLite path or mysql:// URL"),
    "high_water": (float, "a number"), "low_water": (float, "a number"), "target": (float, "a number"),
    "hysteresis": (float, "a number"), "share": (float, "a number"), "busy_mib_s": (float, "a number"),
    "interval": (float, "a number of seconds"), "state_dir": (str, "a directory"),
    "pools": (tuple, "a list of pool names"),
}
assert set(_KEYS) == {f.name for f in fields(BalanceSettings)}


def read_file(path: str | Path) -> tuple[dict, dict[str, str]]:
    """The ``[balance]`` table of a TOML file, typed, and where each key came from (for messages)."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"cannot read the balance config {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not TOML ({err})") from None
    extra = sorted(set(doc) - {"balance"})
    if extra:
        raise ValueError(f"{path}: unknown table or key {extra[0]!r} (the settings go in [balance])")
    table = doc.get("balance", {})
    if not isinstance(table, dict):
        raise ValueError(f"{path}: balance must be a table ([balance])")
    values, where = {}, {}
    for key, value in table.items():
        if key not in _KEYS:
            raise ValueError(f"{path}: [balance] unknown key {key!r} (known: {', '.join(_KEYS)})")
        kind, what = _KEYS[key]
        where[key] = f"{path}: {key}"
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{path}: {key} {value!r}: {what}")
            value = float(value)
        elif kind is tuple:
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"{path}: {key} {value!r}: {what}")
            value = tuple(value)
        elif not isinstance(value, str) or not value:
            raise ValueError(f"{path}: {key} {value!r}: {what}")
        if key in ("root", "state_dir") and not os.path.isabs(value):
            value = str((path.parent / value).resolve())
        values[key] = value
    return values, where


def resolve(config: str | None, flags: dict[str, object], env: dict[str, str] | None = None) -> BalanceSettings:
    """Defaults, then the config file (``config``, else ``$IEZ_BALANCE_CONFIG`` when set), then the flags given
    (``flags``: key -> value, None when not given), checked."""
    from iez.config import Settings

    values: dict[str, Any] = {}  # as read_file's: each typed by _KEYS or argparse, then BalanceSettings.check
    where: dict[str, str] = {}
    path = config or Settings.from_env(env=env).balance_config
    if path:
        values, where = read_file(path)
    for key, value in flags.items():
        if value is not None:
            values[key] = tuple(value) if key == "pools" and isinstance(value, Iterable) else value
            where[key] = "--" + key.replace("_", "-")
    return replace(BalanceSettings(), **values).check(where)
