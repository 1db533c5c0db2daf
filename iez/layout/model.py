"""A file's RAID-0 layout, as both the emulation and Lustre describe it."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """Stripe ``i`` of the file lives on OST ``osts[i]``."""

    stripe_size: int
    osts: tuple[int, ...]

    @property
    def stripe_count(self) -> int:
        return len(self.osts)


def lexical_abspath(path: str) -> str:
    """``path`` made absolute the way the placement library records it.

    Against the working directory, with ``.``, ``..`` and repeated slashes
    folded and symbolic links left alone (``os.path.abspath`` keeps a leading
    ``//``, which the library folds too).
    """
    out = os.path.abspath(os.fsdecode(path))
    return "/" + out.lstrip("/") if out.startswith("//") else out
