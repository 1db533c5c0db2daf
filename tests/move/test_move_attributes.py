"""What a moved file keeps (issue 27, item 4), as real processes on an emulated cluster: `iez copy` (layout-aware
and --naive) gives each copy every attribute `cp -a` keeps (owner, setuid/setgid/sticky bits, security.capability
set by setcap, user. and trusted. attributes, a POSIX ACL set by setfacl, atime and mtime to the nanosecond,
holes), a copied directory its owner, mode, attributes, default ACL and times, and leaves the sources' atimes as
they were; `iez mirror resync` gives back what writing a file takes (security.capability, the times). Compared
with os.stat, os.listxattr/getxattr, getfacl, SEEK_DATA/SEEK_HOLE, and with what `cp -a` itself produces."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from move_helpers import (REPO, XATTR, MiB, decorate, differences, emulated_cluster, getfacl, iez_copy, run_tool,
                          snapshot)

from iez.move.attributes import Attributes, data_extents, open_source

pytestmark = pytest.mark.slow


def sparse_striped(path: Path, osts: list[int], rng: random.Random) -> Path:
    """3.5 MiB striped over ``osts`` at 1 MiB: data, a 1.5 MiB hole (crossing a chunk), data, a hole to the end."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        out.truncate(3 * MiB + MiB // 2)
        os.setxattr(out.fileno(), XATTR, f"version=1 stripe_size={MiB} stripe_count={len(osts)} "
                                         f"osts={','.join(map(str, osts))}".encode())
        out.write(rng.randbytes(MiB // 2 + 4096))
        out.seek(2 * MiB + 8192)
        out.write(rng.randbytes(MiB // 2))
    return path


def directory_snapshot(path: Path) -> dict:
    st = os.lstat(path)
    return {"mode": oct(st.st_mode), "owner": [st.st_uid, st.st_gid], "atime_ns": st.st_atime_ns,
            "mtime_ns": st.st_mtime_ns, "getfacl": getfacl(path),
            "xattrs": {n: os.getxattr(path, n).hex() for n in sorted(os.listxattr(path))}}


@pytest.mark.parametrize("naive", [False, True], ids=["layout-aware", "naive"])
def test_iez_copy_keeps_every_attribute_cp_a_keeps(tmp_path, naive):
    root, data = emulated_cluster(tmp_path)
    rng = random.Random(27)
    src, out = data / "src", data / "out"
    sub = src / "sub"
    sub.mkdir(parents=True)
    files = [sparse_striped((sub if k >= 6 else src) / f"f{k}", [k % 8, (k + 5) % 8], rng) for k in range(8)]
    for k, path in enumerate(files):
        decorate(path, k, rng, setcap=True)  # setuid/setgid/sticky mixes, setcap, setfacl, user./trusted., times
    (src / "empty").mkdir()
    run_tool("setfacl", "-d", "-m", "user:1234:rwx,group:2345:r-x", str(sub))  # a default ACL
    os.chown(sub, 1001, 2002)
    os.chmod(sub, 0o2775)
    os.setxattr(sub, "user.test.dir", b"a directory's attribute")
    for d in (sub, src / "empty", src):
        os.utime(d, ns=(time.time_ns() - 9 * 86400 * 10**9 + 123, time.time_ns() - 4 * 86400 * 10**9 + 456))
    before = {p: snapshot(p, acl=True) for p in files}
    dirs_before = {d: directory_snapshot(d) for d in (src, sub, src / "empty")}
    assert all(b["extents"] and b["extents"][-1][1] < b["size"] for b in before.values())  # holes, one at the end

    out.mkdir()
    done = iez_copy([str(src), str(out), "--json"] + (["--naive"] if naive else []), root)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["files"] == len(files) and report["failed"] == []
    for path in files:
        copy = out / path.relative_to(data)
        after = snapshot(copy, acl=True)
        assert after["sha256"] == before[path]["sha256"], copy
        assert differences(before[path], after) == [], (copy, before[path], after)
        assert os.getxattr(copy, "security.capability") == os.getxattr(path, "security.capability")
        assert snapshot(path, acl=True) == before[path], f"{path}: the copy changed its source"
    for d, snap in dirs_before.items():  # as they were before iez copy listed them
        assert directory_snapshot(out / d.relative_to(data)) == snap, d

    # cp -a of the same tree: iez's copies have exactly the attributes cp -a gives (layout aside)
    cp = tmp_path / "cp-a"
    run_tool("cp", "-a", str(src), str(cp))
    for path in files:
        ours, theirs = snapshot(out / path.relative_to(data), acl=True), snapshot(cp / path.relative_to(src))
        theirs["getfacl"] = getfacl(cp / path.relative_to(src))
        assert differences(theirs, ours) == [], path


def test_holes_stay_holes_and_dense_writes_them(tmp_path):
    root, data = emulated_cluster(tmp_path)
    src = sparse_striped(data / "s", [1, 2], random.Random(1))
    extents = snapshot(src)["extents"]
    for flag, expect in (([], extents), (["--dense"], [(0, src.stat().st_size)])):
        dst = data / f"d{'-'.join(flag)}"
        done = iez_copy([str(src), str(dst), "--json", *flag], root)
        assert done.returncode == 0, done.stderr
        got = snapshot(dst)
        assert got["sha256"] == snapshot(src)["sha256"] and got["extents"] == expect, flag


def test_a_killed_copy_leaves_the_sources_atime_as_it_was(tmp_path):
    """O_NOATIME: a copy killed mid-way has read the sources, and their atime (older than their mtime, so a
    relatime read would move it) stays; the next copy gives the destinations that atime."""
    root, data = emulated_cluster(tmp_path, ost_mib_s=4)
    rng = random.Random(2)
    src = data / "src"
    files = [sparse_striped(src / f"f{k}", [k % 8], rng) for k in range(4)]
    for k, p in enumerate(files):
        decorate(p, k, rng)
    before = {p: os.stat(p).st_atime_ns for p in files}
    out = data / "out"
    out.mkdir()
    env = {**os.environ, "IEZ_EMULATE": str(root), "IEZ_STATE_DIR": str(tmp_path / "state")}
    env.pop("LD_PRELOAD", None)
    proc = subprocess.Popen([sys.executable, "-m", "iez.cli", "copy", str(src), str(out)], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not any(".iez-copy." in p.name for p in out.rglob(".*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    proc.kill()
    proc.wait()
    assert {p: os.stat(p).st_atime_ns for p in files} == before
    done = iez_copy([str(src), str(out), "--json"], root)
    assert done.returncode == 0, done.stderr
    assert {p: os.stat(out / "src" / p.name).st_atime_ns for p in files} == before


def test_attributes_apply_in_the_kernels_order(tmp_path):
    """The primitive itself: a chown after a capability or the setuid bit would clear them, a write after
    them too; Attributes.apply sets owner, attributes, mode, times in that order on a finished copy."""
    src = tmp_path / "src"
    src.write_bytes(b"x" * 10000)
    decorate(src, 3, random.Random(3), setcap=True)  # 0o6711: setuid and setgid
    dst = tmp_path / "dst"
    dst.write_bytes(src.read_bytes())
    fd = open_source(str(src))
    try:
        attrs = Attributes.of_stat(os.fstat(fd)).with_xattrs(fd)
        assert data_extents(fd, 0, 10000) == [(0, 10000)]
    finally:
        os.close(fd)
    out = os.open(dst, os.O_WRONLY)
    try:
        assert attrs.apply(out) == []
    finally:
        os.close(out)
    assert differences(snapshot(src, acl=True), snapshot(dst, acl=True)) == []


def test_mirror_resync_gives_back_what_writing_takes(tmp_path):
    """A resync writes the stale copy: the kernel drops security.capability on a write, and the mtime moves;
    both come back (the data is the same), and the atime stays."""
    root, data = emulated_cluster(tmp_path)
    f = data / "m"
    f.write_bytes(os.urandom(2 * MiB + 17))
    os.setxattr(f, XATTR, b"version=3 mirror=1:prefer comp=0:eof:1048576:1:1 mirror=2:stale comp=0:eof:1048576:1:5")
    decorate(f, 1, random.Random(4), setcap=True)
    before = snapshot(f, acl=True)
    env = {**os.environ, "IEZ_STATE_DIR": str(tmp_path / "state"), "IEZ_EMULATE": str(root)}
    env.pop("LD_PRELOAD", None)
    done = subprocess.run([sys.executable, "-m", "iez.cli", "mirror", "resync", "--json", str(f)], env=env,
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"][0]["copies"] == [2]
    after = snapshot(f, acl=True)
    assert after["sha256"] == before["sha256"]
    assert differences(before, after) == []
