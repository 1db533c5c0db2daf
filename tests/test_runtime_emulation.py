"""iez.runtime's one rule for the emulated cluster a process runs against (``IEZ_EMULATE``) and whether it must
run again under libiez: what ``iez copy``, the stager, the movers (``iez drain``, ``rebalance apply``,
``balance``) and the destination placement all ask."""

from __future__ import annotations

import pytest

from iez import runtime
from iez.move.placement import Placer


def test_emulated_root_is_the_variable_read_when_asked(monkeypatch):
    monkeypatch.delenv("IEZ_EMULATE", raising=False)
    assert runtime.emulated_root() is None
    monkeypatch.setenv("IEZ_EMULATE", "")
    assert runtime.emulated_root() is None  # empty counts as unset
    monkeypatch.setenv("IEZ_EMULATE", "/srv/cluster")
    assert runtime.emulated_root() == "/srv/cluster"
    assert runtime.emulated_root({"IEZ_EMULATE": "/other"}) == "/other"
    assert runtime.emulated_root({}) is None


@pytest.mark.parametrize(("ld_preload", "loaded"), [
    ("", False),
    ("/usr/lib/iez/libiez.so", True),
    ("/lib/libfoo.so:/opt/build/libiez.so", True),
    ("/lib/libfoo.so /opt/build/libiez.so", True),
    ("/home/libiez/libother.so", False),  # a directory of that name is not the library
])
def test_preloaded_is_libiez_in_ld_preload(ld_preload, loaded):
    assert runtime.preloaded({"LD_PRELOAD": ld_preload}) is loaded


def test_needs_preload_only_when_emulating_without_the_library():
    assert not runtime.needs_preload({})
    assert not runtime.needs_preload({"IEZ_EMULATE": "", "LD_PRELOAD": ""})
    assert runtime.needs_preload({"IEZ_EMULATE": "/srv/cluster"})
    assert not runtime.needs_preload({"IEZ_EMULATE": "/srv/cluster", "LD_PRELOAD": "/x/libiez.so"})


def test_preload_into_puts_the_library_first_and_placement_off(monkeypatch, tmp_path):
    lib = tmp_path / "libiez.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("IEZ_PRELOAD_LIB", str(lib))
    env = {"LD_PRELOAD": "/lib/libfoo.so"}
    runtime.preload_into(env)
    assert env == {"LD_PRELOAD": f"{lib} /lib/libfoo.so", "IEZ_MODE": "off"}
    env = {"IEZ_MODE": "trace"}
    runtime.preload_into(env)
    assert env == {"LD_PRELOAD": str(lib), "IEZ_MODE": "trace"}
    monkeypatch.setenv("IEZ_PRELOAD_LIB", str(tmp_path / "missing.so"))
    with pytest.raises(runtime.LibraryNotFound, match="missing.so"):
        runtime.preload_into({})


def test_destination_placement_asks_the_same_rule(tmp_path):
    root = tmp_path / "cluster"
    data = root / "data"
    data.mkdir(parents=True)
    (root / "cluster.json").write_text(f'{{"emulation": {{"data": ["{data}"]}}}}')
    assert Placer.for_destination(str(data / "f"), env={"IEZ_EMULATE": str(root)}).where == "emulated"
    outside = Placer.for_destination(str(tmp_path / "f"), env={"IEZ_EMULATE": str(root)})
    assert outside.where == "none" and "not in the emulated cluster's data" in outside.reason
    unset = Placer.for_destination(str(tmp_path / "f"), env={"IEZ_EMULATE": ""})
    assert unset.where == "none" and "IEZ_EMULATE unset" in unset.reason
