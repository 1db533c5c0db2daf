"""`make -C placement_lib test`: the library builds without a warning (-Werror), the Lustre ABI is pinned,
and the C unit tests pass plainly and under ASan+UBSan."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_make_test_passes():
    done = subprocess.run(["make", "-C", str(ROOT / "placement_lib"), "test"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "warning:" not in done.stderr
    assert "test_lustre_abi: all Lustre constants, sizes and offsets match lustre_user.h" in done.stdout
    assert len(re.findall(r"^test_unit: \d+ checks passed$", done.stdout, re.M)) == 2  # plain and sanitised builds
