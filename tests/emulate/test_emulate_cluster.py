"""``iez cluster emulate --cluster FILE --no-agents``: the trees an emulated cluster's agents and MDS read, with
the description's pools and states; ``iez cluster set``: an administrator's changes, as lctl makes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.lctl import collect_osts
from agents.message import select_osts
from agents.procfs import read_tree
from conftest import iez_cli
from iez.emulate.cluster import ClusterLayout, Emulator, tree_states
from iez.mds.lustre_params import LustreParamsReader
from iez.sim.description import load_cluster

DESCRIPTION = {
    "fill_cap": 0.9,
    "oss": [{"id": "ossA", "bandwidth_mib_s": 800,
             "osts": [{"index": 0, "kbytes_total": 1048576, "kbytes_avail": 838861, "pools": ["flash"]},
                      {"index": 1, "kbytes_total": 1048576, "kbytes_avail": 1048576, "pools": ["flash"],
                       "state": "degraded"}]},
            {"id": "ossB",
             "osts": [{"index": 16, "kbytes_total": 2097152, "kbytes_avail": 1048576, "pools": ["disk"],
                       "state": "inactive"},
                      {"index": 17, "kbytes_total": 2097152, "kbytes_avail": 2000000, "pools": ["disk", "flash"],
                       "state": "readonly"},
                      {"index": 18, "kbytes_total": 2097152, "kbytes_avail": 2097152, "state": "nocreate",
                       "load_mib_s": 50}]}]}
STATES = {0: "active", 1: "degraded", 16: "inactive", 17: "readonly", 18: "nocreate"}


def emulate(tmp_path: Path, description=DESCRIPTION, name: str = "cluster.json", *extra: str) -> Path:
    desc = tmp_path / name
    desc.write_text(json.dumps(description) if isinstance(description, dict) else description)
    root = tmp_path / "root"
    done = iez_cli("cluster", "emulate", "--cluster", str(desc), "--root", str(root), "--no-agents", *extra)
    assert done.returncode == 0, done.stderr
    return root


def oss_states(root: Path, oss: str) -> dict[int, tuple]:
    osts = select_osts(collect_osts(read_tree((str(root / oss),))))
    return {o["index"]: (o["state"], o["kbytes_total"], o["kbytes_avail"]) for o in osts}


def test_trees_carry_the_descriptions_sizes_fill_pools_and_states(tmp_path: Path):
    root = emulate(tmp_path)
    # each OSS's tree, as its agent reads it: the OSS's own switches (inactive is the MDS's, not the OSS's)
    assert oss_states(root, "ossA") == {0: ("active", 1048576, 838861), 1: ("degraded", 1048576, 1048576)}
    assert oss_states(root, "ossB") == {16: ("active", 2097152, 1048576), 17: ("readonly", 2097152, 2000000),
                                        18: ("nocreate", 2097152, 2097152)}
    assert (root / "ossB" / "obdfilter" / "iezfs-OST0011" / "readonly").read_text() == "1\n"
    # the MDS's tree, as iez mds --lustre-params ROOT/mds reads it
    mds = LustreParamsReader.from_option(str(root / "mds")).read()
    assert mds.pools == {"disk": (16, 17), "flash": (0, 1, 17)}
    assert {i: p.state for i, p in mds.osts.items()} == {0: "active", 1: "active", 16: "inactive", 17: "active",
                                                        18: "active"}
    assert mds.osts[0].reserved_kbytes == 1024 and mds.osts[16].reserved_kbytes == 2048  # Lustre's 0.1 %
    assert mds.qos == {"maxage_s": 5, "prio_free_pct": 90, "threshold_rr_pct": 17}
    assert (root / "mds" / "lod" / "iezfs-MDT0000-mdtlov" / "pools" / "flash").read_text() == \
        "iezfs-OST0000_UUID\niezfs-OST0001_UUID\niezfs-OST0011_UUID\n"
    layout = ClusterLayout.load(root)
    assert tree_states(layout) == STATES
    # cluster.json is a cluster description other tools read: the same OSTs, states and pools
    cluster = load_cluster(root / "cluster.json")
    assert {o.index: o.state for o in cluster.osts} == STATES
    assert {o.index: o.pools for o in cluster.osts} == {0: ("flash",), 1: ("flash",), 16: ("disk",),
                                                       17: ("disk", "flash"), 18: ()}
    assert cluster.fill_cap == 0.9 and cluster.osses["ossA"].bandwidth == 800 * 2**20
    assert cluster.osts[4].load == 50 * 2**20
    assert [o.kbytes_avail for o in cluster.osts] == [838861, 1048576, 1048576, 2000000, 2097152]


LFS_DF = """UUID                   1K-blocks        Used   Available Use% Mounted on
lfs-MDT0000_UUID         2602832       10000     2592832   1% /mnt/lfs[MDT:0]
lfs-OST0000_UUID         4108388     1000000     3108388  25% /mnt/lfs[OST:0]
lfs-OST0001_UUID         4108388      100000     4008388   3% /mnt/lfs[OST:1] D
lfs-OST0002_UUID         4108388       10000     4098388   1% /mnt/lfs[OST:2] R
lfs-OST0003_UUID         4108388     2000000     2108388  49% /mnt/lfs[OST:3] N

filesystem_summary:     16433552     3110000    13323552  19% /mnt/lfs

Pools from lfs:
lfs.fast
Pool: lfs.fast
lfs-OST0000_UUID
lfs-OST0003_UUID
"""


def test_lfs_df_and_pool_list_text_is_a_description_too(tmp_path: Path):
    root = emulate(tmp_path, LFS_DF, "df.txt", "--fsname", "lfs")
    layout = ClusterLayout.load(root)
    assert layout.fsname == "lfs" and layout.oss_ids == ["oss0"]  # lfs df names no servers: 5 OSTs an OSS
    assert tree_states(layout) == {0: "active", 1: "degraded", 2: "readonly", 3: "nocreate"}
    assert layout.pools == {"fast": [0, 3]}
    assert oss_states(root, "oss0")[3] == ("nocreate", 4108388, 2108388)


def test_the_counts_mode_still_makes_equal_active_osts(tmp_path: Path):
    root = tmp_path / "root"
    done = iez_cli("cluster", "emulate", "--root", str(root), "--oss", "2", "--osts-per-oss", "2", "--ost-size", "1G",
                   "--no-agents")
    assert done.returncode == 0, done.stderr
    assert "2 OSS, 4 OSTs" in done.stdout and "all active; pools: none" in done.stdout
    assert oss_states(root, "oss1") == {2: ("active", 1048576, 1048576), 3: ("active", 1048576, 1048576)}
    assert tree_states(ClusterLayout.load(root)) == dict.fromkeys(range(4), "active")


@pytest.mark.slow
def test_an_admin_changes_states_pools_and_parameters_as_lctl_would(tmp_path: Path):
    root = emulate(tmp_path)
    sys_ = root / "ossA" / "obdfilter" / "iezfs-OST0000"

    def cluster_set(*args: str):
        done = iez_cli("cluster", "set", "--root", str(root), *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = cluster_set("--ost", "0", "--state", "degraded")
    assert "0 degraded" in out
    assert (sys_ / "degraded").read_text() == "1\n" and (sys_ / "readonly").read_text() == "0\n"
    cluster_set("--ost", "OST0001,0x11", "--state", "active")  # indices as lctl writes them
    assert (root / "ossA" / "obdfilter" / "iezfs-OST0001" / "degraded").read_text() == "0\n"
    cluster_set("--ost", "0", "--state", "inactive")
    assert (root / "mds" / "osp" / "iezfs-OST0000-osc-MDT0000" / "active").read_text() == "0\n"
    assert (sys_ / "degraded").read_text() == "0\n"  # a state is set whole: the other switches are cleared
    out = cluster_set("--param", "osp.*-OST0001-*.max_create_count=0")  # the documented way to drain an OST
    assert out.splitlines()[0] == "osp.iezfs-OST0001-osc-MDT0000.max_create_count=0"
    assert tree_states(ClusterLayout.load(root)) == {0: "inactive", 1: "nocreate", 16: "inactive", 17: "active",
                                                     18: "nocreate"}
    cluster_set("--pool", "flash", "--remove-osts", "0,1")
    cluster_set("--pool", "archive", "--add-osts", "16,18")  # pool_new + pool_add
    cluster_set("--pool", "disk", "--remove-osts", "16,17", "--destroy")
    mds = LustreParamsReader.from_option(str(root / "mds")).read()
    assert mds.pools == {"archive": (16, 18), "flash": (17,)}
    assert not (root / "mds" / "lod" / "iezfs-MDT0000-mdtlov" / "pools" / "disk").exists()
    # cluster.json follows the trees, for the tools that read it
    cluster = load_cluster(root / "cluster.json")
    assert {o.index: (o.state, o.pools) for o in cluster.osts} == {
        0: ("inactive", ()), 1: ("nocreate", ()), 16: ("inactive", ("archive",)), 17: ("active", ("flash",)),
        18: ("nocreate", ("archive",))}
    # the running emulator rewrites capacity and counters, never the switches
    Emulator(ClusterLayout.load(root)).update()
    assert (root / "mds" / "osp" / "iezfs-OST0000-osc-MDT0000" / "active").read_text() == "0\n"
    assert oss_states(root, "ossA")[1] == ("active", 1048576, 1048576)


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (("--ost", "5", "--state", "degraded"), "OST 5 is not in the emulated cluster"),
    (("--ost", "x1", "--state", "degraded"), "'x1' is not an OST index"),
    (("--ost", "0"), "--ost goes with --state, --load or --bandwidth"),
    (("--pool", "gone", "--remove-osts", "0"), "--pool gone: no such pool"),
    (("--pool", "flash", "--destroy"), "the pool still holds OSTs 0, 1, 17"),
    (("--pool", "flash",), "--pool NAME goes with"),
    (("--pool", "way-too-long-pool-name", "--add-osts", "0"), "not a Lustre pool name"),
    (("--param", "obdfilter.iezfs-OST0000.nothing=1"), "no such parameter on any emulated node"),
    (("--param", "obdfilter/../x=1"), "expected NAME=VALUE"),
    ((), "nothing to change"),
])
def test_bad_changes_are_refused_with_one_line(tmp_path: Path, args, message):
    root = emulate(tmp_path)
    before = (root / "cluster.json").read_text()
    done = iez_cli("cluster", "set", "--root", str(root), *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert (root / "cluster.json").read_text() == before


def test_set_without_an_emulated_cluster_says_how_to_make_one(tmp_path: Path):
    done = iez_cli("cluster", "set", "--root", str(tmp_path), "--ost", "0", "--state", "degraded")
    assert done.returncode == 2 and "no cluster.json" in done.stderr and "iez cluster emulate" in done.stderr


def test_a_server_id_that_cannot_name_a_tree_is_refused(tmp_path: Path):
    bad = {"oss": [{"id": "mds", "osts": [{"index": 0, "kbytes_total": 1048576, "kbytes_avail": 1048576}]}]}
    desc = tmp_path / "bad.json"
    desc.write_text(json.dumps(bad))
    done = iez_cli("cluster", "emulate", "--cluster", str(desc), "--root", str(tmp_path / "r"), "--no-agents")
    assert done.returncode == 2 and "OSS id 'mds' cannot name its tree" in done.stderr


def test_the_first_cluster_json_format_still_loads(tmp_path: Path):
    (tmp_path / "cluster.json").write_text(json.dumps({
        "root": str(tmp_path), "data": [str(tmp_path / "data")], "oss": 2, "osts_per_oss": 2, "ost_kb": 1024,
        "fsname": "iezfs", "base_used_kb": [0, 10, 20, 30]}))
    layout = ClusterLayout.load(tmp_path)
    assert [(o.index, o.oss, o.base_used_kb, o.state) for o in layout.osts] == [
        (0, "oss0", 0, "active"), (1, "oss0", 10, "active"), (2, "oss1", 20, "active"), (3, "oss1", 30, "active")]
