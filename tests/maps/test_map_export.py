"""Layout maps written from the DB (``iez map export``) and read back: the app's live layouts only, atomic,
mode 0600, a constant database any CDB reader can read, and clear refusals."""

from __future__ import annotations

import io
import json
import os
import random
import stat
import struct

import pytest

from conftest import iez_cli
from map_helpers import MIB, add_app_layouts

from iez.maps import (CDB_HEADER, LayoutMap, MapEntry, MapError, MapTooLarge, build_cdb, cdb_hash, cdb_hashes,
                      decode_value, encode_value, write_map)

PFL = "version=2 comp=0:1048576:1048576:1:3 comp=1048576:eof:1048576:2:4,5:pool=flash"


def test_the_vectorised_hash_is_cdbs_hash():
    rng = random.Random(7)
    keys = [b"", b"/", b"iez-map", bytes(range(256)), "/scratch/é/ü".encode()] + \
           [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) for _ in range(500)]
    assert [int(h) for h in cdb_hashes(keys)] == [cdb_hash(k) for k in keys]
    assert cdb_hash(b"") == 5381 and cdb_hash(b"a") == (5381 * 33) ^ 97  # the format's definition


def test_every_key_is_found_by_probing_as_cdb_readers_do(tmp_path):
    # many keys per table force long probe runs and wrap-arounds past a table's end
    items = [(f"/k/{i}".encode(), str(i).encode()) for i in range(20000)]
    buf = io.BytesIO()
    size = build_cdb(items, buf)
    data = buf.getvalue()
    assert len(data) == size
    for key, value in items:
        h = cdb_hash(key)
        pos, slots = struct.unpack_from("<II", data, (h & 255) * 8)
        slot = (h >> 8) % slots
        while True:
            sh, rpos = struct.unpack_from("<II", data, pos + 8 * slot)
            assert rpos, f"{key!r} not reachable from its first slot"
            klen, vlen = struct.unpack_from("<II", data, rpos)
            if sh == h and data[rpos + 8:rpos + 8 + klen] == key:
                assert data[rpos + 8 + klen:rpos + 8 + klen + vlen] == value
                break
            slot = (slot + 1) % slots


def test_values_round_trip_and_malformed_ones_are_refused():
    for e in (MapEntry("/a", MIB, 3, "3 7 11"), MapEntry("/b", MIB, 1, "0", PFL, ""),
              MapEntry("/c", 2 * MIB, 2, "1 2", None, "version=2 comp=0:eof:2097152:2:-")):
        assert decode_value(e.path, encode_value(e)) == e
    with pytest.raises(MapError, match="NUL byte"):
        encode_value(MapEntry("/d", MIB, 1, "1\x002"))
    with pytest.raises(MapError, match="out of range"):
        encode_value(MapEntry("/e", 2**63, 1, "1"))
    with pytest.raises(MapError, match="malformed"):
        decode_value("/f", b"\x09" + bytes(12))


def test_a_map_beyond_4_gib_is_refused_with_its_size():
    class Huge(bytes):
        def __len__(self):
            return 1 << 31

    with pytest.raises(MapTooLarge, match=r"ends before 4 GiB"):
        build_cdb([(b"/a", Huge()), (b"/b", Huge())], io.BytesIO())


def test_write_map_is_atomic_private_and_readable(tmp_path):
    out = tmp_path / "m.cdb"
    out.write_bytes(b"old")
    os.chmod(out, 0o644)
    info = write_map(out, "my app", [MapEntry("/x/a", MIB, 2, "1 2"), MapEntry("/x/b", MIB, 1, "0", PFL, "")])
    assert info["entries"] == 2 and info["bytes"] == out.stat().st_size
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and out.stat().st_uid == os.getuid()
    assert sorted(os.listdir(tmp_path)) == ["m.cdb"]  # no temporary file left
    m = LayoutMap(out)
    assert (m.app, m.entries, m.header["version"]) == ("my app", 2, "1")
    assert m.lookup("/x/b") == MapEntry("/x/b", MIB, 1, "0", PFL, "")
    assert m.lookup("/x/c") is None
    with pytest.raises(MapError, match="not an absolute path"):
        write_map(tmp_path / "n.cdb", "a", [MapEntry("rel/a", MIB, 1, "1")])
    assert not (tmp_path / "n.cdb").exists() and sorted(os.listdir(tmp_path)) == ["m.cdb"]
    with pytest.raises(MapError, match="not an iez layout map"):
        (tmp_path / "plain").write_bytes(bytes(CDB_HEADER))
        LayoutMap(tmp_path / "plain")


@pytest.mark.slow
def test_iez_map_export_writes_the_apps_live_layouts_only(db, tmp_path):
    base = "/lustre/job"
    add_app_layouts(db, "ior", [
        {"path": f"{base}/plain", "stripe_size": MIB, "osts": [3, 7, 11]},
        {"path": f"{base}/pfl", "stripe_size": MIB, "osts": [3], "layout": PFL, "pool": "flash",
         "default_layout": ""},
        {"path": f"{base}/old", "stripe_size": MIB, "osts": [1], "state": "stale"},
        {"path": f"{base}/other", "stripe_size": MIB, "osts": [2], "app": "hacc"},
        {"path": f"{base}/pinned", "stripe_size": 2 * MIB, "osts": [5, 6], "pinned": True},
    ])
    out = tmp_path / "maps" / "ior.cdb"
    out.parent.mkdir()
    proc = iez_cli("map", "export", "--db", db, "--app", "ior", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["app"], info["entries"], info["path"]) == ("ior", 2, str(out))
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    m = LayoutMap(out)
    assert m.lookup(f"{base}/plain") == MapEntry(f"{base}/plain", MIB, 3, "3 7 11", None, None)
    assert m.lookup(f"{base}/pfl") == MapEntry(f"{base}/pfl", MIB, 1, "3", PFL, "")
    assert m.lookup(f"{base}/old") is None and m.lookup(f"{base}/other") is None
    assert m.lookup(f"{base}/pinned") is None
    # --pinned adds the layouts an administrator pinned by hand
    proc = iez_cli("map", "export", "--db", db, "--app", "ior", "--out", str(out), "--pinned", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["entries"] == 3
    assert LayoutMap(out).lookup(f"{base}/pinned").osts == "5 6"
    # iez map show reads it back
    proc = iez_cli("map", "show", str(out), "--path", f"{base}/pinned", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["osts"] == [5, 6]
    proc = iez_cli("map", "show", str(out), "--json")
    assert json.loads(proc.stdout)["entries"] == 3 and json.loads(proc.stdout)["app"] == "ior"
    assert iez_cli("map", "show", str(out), "--path", f"{base}/none").returncode == 1


@pytest.mark.slow
def test_iez_map_export_refuses_an_unknown_app_and_a_bad_output(db, tmp_path):
    proc = iez_cli("map", "export", "--db", db, "--app", "nobody", "--out", str(tmp_path / "m.cdb"))
    assert proc.returncode == 2 and "no application named 'nobody'" in proc.stderr
    assert not (tmp_path / "m.cdb").exists()
    add_app_layouts(db, "ior", [{"path": "/l/a", "stripe_size": MIB, "osts": [1]}])
    proc = iez_cli("map", "export", "--db", db, "--app", "ior", "--out", str(tmp_path / "no" / "dir" / "m.cdb"))
    assert proc.returncode == 2 and "No such file or directory" in proc.stderr
    proc = iez_cli("map", "show", str(tmp_path / "absent.cdb"))
    assert proc.returncode == 2 and "cannot read the layout map" in proc.stderr
