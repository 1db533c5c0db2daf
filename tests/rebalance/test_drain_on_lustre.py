"""iez drain's Lustre step: the MDS's osp.*.max_create_count read, set to 0 and given back, through ``lctl``.

This machine has no Lustre, so ``lctl`` is a stand-in on PATH that logs its arguments and answers as the real
one does; the OST names come from the DB's view on a real cluster, here given directly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from iez.rebalance import drain


def fake_lctl(tmp: Path, value: str = "20000", exit_code: int = 0, stderr: str = "") -> Path:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "lctl"
    script.write_text(f"""#!{sys.executable}
import json, sys
with open({str(tmp / 'lctl.log')!r}, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "get_param":
    print({value!r})
sys.stderr.write({stderr!r})
sys.exit({exit_code})
""")
    script.chmod(0o755)
    return bindir


def calls(tmp: Path) -> list[list[str]]:
    log = tmp / "lctl.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def lustre_target(tmp_path, monkeypatch):
    monkeypatch.setattr(drain, "ost_names", lambda target, osts: {i: f"lfs1-OST{i:04x}" for i in osts})
    return drain.Target("lustre", [str(tmp_path)], tmp_path / "state", None, None)


def test_drain_stops_creates_on_the_mds_and_undrain_gives_the_old_value_back(tmp_path, lustre_target, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_lctl(tmp_path, '5000')}:/usr/bin:/bin")
    assert drain.stop_creates(lustre_target, [3, 12]) == {3: 5000, 12: 5000}
    assert calls(tmp_path) == [
        ["get_param", "-n", "osp.lfs1-OST0003-osc-MDT*.max_create_count"],
        ["set_param", "osp.lfs1-OST0003-osc-MDT*.max_create_count=0"],
        ["get_param", "-n", "osp.lfs1-OST000c-osc-MDT*.max_create_count"],
        ["set_param", "osp.lfs1-OST000c-osc-MDT*.max_create_count=0"]]
    drain.allow_creates(lustre_target, {3: 5000})
    assert calls(tmp_path)[-1] == ["set_param", "osp.lfs1-OST0003-osc-MDT*.max_create_count=5000"]


def test_a_failing_or_missing_lctl_is_one_error_naming_the_command(tmp_path, lustre_target, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_lctl(tmp_path, exit_code=2, stderr='error: set_param: Permission denied')}:"
                       "/usr/bin:/bin")
    with pytest.raises(OSError, match=r"lctl get_param -n osp.lfs1-OST0003-osc-MDT\*.max_create_count failed "
                                      r"\(exit 2\): error: set_param: Permission denied"):
        drain.stop_creates(lustre_target, [3])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(OSError, match="no lctl command on PATH"):
        drain.stop_creates(lustre_target, [3])


def test_an_answer_that_is_not_a_number_is_refused(tmp_path, lustre_target, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_lctl(tmp_path, 'error: get_param: no such parameter')}:/usr/bin:/bin")
    with pytest.raises(OSError, match="not a number"):
        drain.stop_creates(lustre_target, [3])
    assert [c[0] for c in calls(tmp_path)] == ["get_param"]  # nothing was set
