"""Shared pieces of the operations tests: the real MDS process helper of tests/mds, and a /metrics scrape."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


mds_helpers = _load("iez_ops_mds_helpers", REPO / "tests" / "mds" / "mds_helpers.py")
Mds, Publisher, stats, free_port = mds_helpers.Mds, mds_helpers.Publisher, mds_helpers.stats, mds_helpers.free_port

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(url: str) -> dict[str, dict[str, float]]:
    """``/metrics`` as {sample name: {label text ('' for none): value}}."""
    answer = httpx.get(url, timeout=10)
    answer.raise_for_status()
    samples: dict[str, dict[str, float]] = {}
    for line in answer.text.splitlines():
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            samples.setdefault(match[1], {})[match[2] or ""] = float(match[3])
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [v for text, v in samples.get(name, {}).items()
             if all(f'{k}="{want}"' in text for k, want in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]
