"""Byte sizes as administrators write them (``10G``, ``512M``, ``64K``; powers of 1024)."""

from __future__ import annotations

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def parse_size(text: str) -> int:
    """``"10G"`` → 10737418240. Plain numbers are bytes; a trailing ``B``/``iB`` is accepted."""
    raw = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    number, suffix = (raw[:-1], raw[-1]) if raw and raw[-1] in _SUFFIX else (raw, "")
    try:
        value = float(number) * _SUFFIX[suffix]
    except ValueError:
        raise ValueError(f"size {text!r}: expected a number with an optional K, M, G, T or P suffix") from None
    if value < 0:
        raise ValueError(f"size {text!r} is negative")
    return int(value)
