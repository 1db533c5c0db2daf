"""Cluster descriptions (ARCHITECTURE.md contracts): the JSON form and `lfs df` / `lfs pool_list` output."""

import json

import pytest

from iez.model import DEFAULT_FILL_CAP, ClusterState
from iez.sim.description import Defaults, DescriptionError, load_cluster, parse_cluster, parse_json, parse_lfs_df

MiB = 1 << 20

CONTRACT_EXAMPLE = {
    "fill_cap": 0.95,
    "oss": [{"id": "oss0", "bandwidth_mib_s": 600, "domain": "rack1",
             "osts": [{"index": 0, "kbytes_total": 10485760, "kbytes_avail": 2097152,
                       "bandwidth_mib_s": 200, "load_mib_s": 0, "pools": ["disk"], "state": "active"}]}],
}

# `lfs df -v` as the lfs-df(1) man page shows it, in KiB, with an MDT, status letters and an inactive OST.
LFS_DF = """\
UUID                   1K-blocks        Used   Available Use% Mounted on
testfs-MDT0000_UUID      13631488     1258291    11534336  10% /testfs[MDT:0]
testfs-OST0000_UUID    3865470976  3040870400   614187008  84% /testfs[OST:0]
testfs-OST0001_UUID    3865470976  3244032000   495452160  87% /testfs[OST:1] D
testfs-OST0002_UUID    3865470976  3221225472   597999104  84% /testfs[OST:2] DR
OST0003             : inactive device
testfs-OST0006_UUID    5798205440  5137924096   438108160  92% /testfs[OST:6]
testfs-OST000a_UUID    5798205440  5137924096   438108160  92% /testfs[OST:10] N

filesystem_summary:  23192825856 19781976064  2583855360  88% /testfs
"""

POOL_LIST = """\
Pool: testfs.flash
testfs-OST0000_UUID
testfs-OST000a_UUID
Pool: testfs.disk
testfs-OST0001_UUID
testfs-OST0006_UUID
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_contract_example_reads_with_bandwidths_in_bytes_per_second(tmp_path):
    cluster = load_cluster(write(tmp_path, "c.json", json.dumps(CONTRACT_EXAMPLE)))
    (ost,) = cluster.osts
    assert isinstance(cluster, ClusterState) and cluster.fill_cap == 0.95
    assert (ost.index, ost.oss_id, ost.kbytes_total, ost.kbytes_avail) == (0, "oss0", 10485760, 2097152)
    assert ost.bandwidth == 200 * MiB and ost.load == 0 and ost.pools == ("disk",) and ost.state == "active"
    oss = cluster.osses["oss0"]
    assert oss.bandwidth == 600 * MiB and oss.domain == "rack1"


def test_left_out_fields_take_the_documented_defaults():
    cluster = parse_json(json.dumps({"oss": [{"id": "a", "osts": [
        {"index": 3, "kbytes_total": 1000, "kbytes_avail": 400}]}]}))
    (ost,) = cluster.osts
    assert cluster.fill_cap == DEFAULT_FILL_CAP == 0.95
    assert ost.bandwidth == 200 * MiB and ost.load == 0 and ost.state == "active" and ost.pools == ()
    assert cluster.osses["a"].bandwidth == 600 * MiB and cluster.osses["a"].domain == "a"


def test_defaults_can_come_from_the_caller_and_loads_and_states_carry_through():
    doc = {"oss": [{"id": "a", "cpu_pct": 40, "osts": [
        {"index": 0, "kbytes_total": 1000, "kbytes_avail": 400, "load_mib_s": 150, "state": "degraded"},
        {"index": 1, "kbytes_total": 1000, "kbytes_avail": 400, "bandwidth_mib_s": 500, "pools": ["x", "y"]}]}]}
    cluster = parse_json(json.dumps(doc), defaults=Defaults(ost_bandwidth=300 * MiB, oss_bandwidth=900 * MiB))
    first, second = cluster.osts
    assert first.bandwidth == 300 * MiB and first.load == 150 * MiB and first.state == "degraded"
    assert first.usable_bandwidth == 150 * MiB
    assert second.bandwidth == 500 * MiB and second.pools == ("x", "y")
    assert cluster.osses["a"].bandwidth == 900 * MiB and cluster.osses["a"].cpu_pct == 40


@pytest.mark.parametrize("doc, message", [
    ('{"oss": [', "line 1 column 10: not valid JSON"),
    ('{\n"oss": []\n}', "\"oss\" must be a non-empty list"),
    ('[1, 2]', "expected an object"),
    ('{"fill_cap": 1.5, "oss": [{"id": "a", "osts": []}]}', "fill_cap=1.5 is outside (0, 1]"),
    ('{"oss": [{"osts": []}]}', "oss[0].id: required"),
    ('{"oss": [{"id": "a", "osts": [{"index": 0, "kbytes_total": 10}]}]}', "oss[0].osts[0].kbytes_avail: required"),
    ('{"oss": [{"id": "a", "osts": [{"index": 0, "kbytes_total": 10, "kbytes_avail": 20}]}]}',
     "oss[0].osts[0]: OST 0: kbytes_avail=20 is outside 0..kbytes_total=10"),
    ('{"oss": [{"id": "a", "osts": [{"index": 0, "kbytes_total": 10, "kbytes_avail": 5, "state": "broken"}]}]}',
     "oss[0].osts[0].state: 'broken' is not one of active, degraded"),
    ('{"oss": [{"id": "a", "osts": [{"index": 0, "kbytes_total": "10", "kbytes_avail": 5}]}]}',
     "oss[0].osts[0].kbytes_total: expected a whole number, got '10'"),
    ('{"oss": [{"id": "a", "osts": [{"index": 0, "kbytes_total": 10, "kbytes_avail": 5, "load_mib_s": -1}]}]}',
     "oss[0].osts[0].load_mib_s: -1 is negative"),
    ('{"oss": [{"id": "a", "osts": [{"index": 0, "kbytes_total": 10, "kbytes_avail": 5, "bandwith_mib_s": 9}]}]}',
     "oss[0].osts[0].bandwith_mib_s: unknown key; did you mean 'bandwidth_mib_s'?"),
    ('{"oss": [{"id": "a", "osts": [{"index": 0, "kbytes_total": 10, "kbytes_avail": 5}]},'
     ' {"id": "b", "osts": [{"index": 0, "kbytes_total": 10, "kbytes_avail": 5}]}]}',
     "oss[1].osts[0].index: OST 0 is already oss[0].osts[0]"),
    ('{"oss": [{"id": "a", "osts": [{"index": 0, "kbytes_total": 10, "kbytes_avail": 5, "pools": "disk"}]}]}',
     "oss[0].osts[0].pools: must be a list of pool names"),
])
def test_bad_json_names_the_file_and_the_line_or_field(doc, message):
    with pytest.raises(DescriptionError) as err:
        parse_cluster(doc, "site.json")
    assert str(err.value).startswith("site.json: ") and message in str(err.value)


def test_unknown_keys_that_are_not_misspellings_are_ignored_so_the_format_can_grow():
    doc = dict(CONTRACT_EXAMPLE, comment="rack A", reserved_mb_low=1024)
    assert len(parse_json(json.dumps(doc)).osts) == 1


def test_lfs_df_gives_capacity_free_space_states_and_skips_mdts_and_inactive_devices():
    cluster = parse_lfs_df(LFS_DF, "df.txt", Defaults(osts_per_oss=2))
    assert [o.index for o in cluster.osts] == [0, 1, 2, 6, 10]
    first = cluster.osts[0]
    assert (first.kbytes_total, first.kbytes_avail, first.state) == (3865470976, 614187008, "active")
    assert [o.state for o in cluster.osts] == ["active", "degraded", "readonly", "active", "nocreate"]
    # lfs df does not name servers: consecutive indices are grouped, bandwidths are the defaults.
    assert [o.oss_id for o in cluster.osts] == ["oss0", "oss0", "oss1", "oss1", "oss2"]
    assert all(o.bandwidth == 200 * MiB for o in cluster.osts)
    assert all(s.bandwidth == 600 * MiB for s in cluster.osses.values())
    assert cluster.fill_cap == 0.95


def test_lfs_pool_list_after_lfs_df_gives_pool_membership(tmp_path):
    cluster = load_cluster(write(tmp_path, "df.txt", LFS_DF + "\n" + POOL_LIST))
    pools = {o.index: o.pools for o in cluster.osts}
    assert pools == {0: ("flash",), 1: ("disk",), 2: (), 6: ("disk",), 10: ("flash",)}


def test_human_readable_lfs_df_is_read_in_binary_units():
    text = ("UUID                       bytes        Used   Available Use% Mounted on\n"
            "users-MDT0000_UUID        815.8M        3.1M      810.6M   1% /users[MDT:0]\n"
            "users-OST0000_UUID          2.6G      660.0M        2.0G  25% /users[OST:0]\n"
            "users-OST0001_UUID          2.5T        3.0M        2.5T   1% /users[OST:1]\n\n"
            "filesystem_summary:         5.2G      663.0M        4.6G  13% /users\n")
    first, second = parse_cluster(text, "h.txt").osts
    assert first.kbytes_total == int(2.6 * (1 << 20)) and first.kbytes_avail == 2 * (1 << 20)
    assert second.kbytes_total == int(2.5 * (1 << 30))


@pytest.mark.parametrize("text, message", [
    ("UUID 1K-blocks Used Available Use% Mounted on\nfs-OST0000_UUID 100 10 lots 10% /fs[OST:0]\n",
     "line 2: available 'lots' is not a number of KiB"),
    ("UUID Inodes IUsed IFree IUse% Mounted on\n", "line 1: this is `lfs df -i`"),
    ("fs-OST0000_UUID 100 10 90 10% /fs[OST:0]\n", "line 1: OST line before the 'UUID 1K-blocks ...' header"),
    ("UUID 1K-blocks Used Available Use% Mounted on\nfs-MDT0000_UUID 100 10 90 10% /fs[MDT:0]\n", "no OST lines"),
    ("UUID 1K-blocks Used Available Use% Mounted on\nfs-OST0000_UUID 100 10 90 10% /fs[OST:0]\n"
     "fs-OST0000_UUID 100 10 90 10% /fs[OST:0]\n", "line 3: OST 0 already listed on line 2"),
    ("UUID 1K-blocks Used Available Use% Mounted on\nfs-OST0000_UUID 100 10 90 10% /fs[OST:0]\n"
     "Pool: fs.flash\nfs-OST0007_UUID\n", "`lfs pool_list` names OST 7 (OST0007), which `lfs df` does not list"),
    ("UUID 1K-blocks Used Available Use% Mounted on\nfs-OST0000_UUID 100 10 90 10% /fs[OST:0]\nrubbish here\n",
     "line 3: not an `lfs df` line"),
    ("hello\n", "neither a JSON cluster description"),
])
def test_bad_lfs_df_names_the_file_and_line(text, message):
    with pytest.raises(DescriptionError) as err:
        parse_cluster(text, "df.txt")
    assert str(err.value).startswith("df.txt") and message in str(err.value)


def test_a_cluster_written_as_json_reads_back_unchanged():
    from iez.sim.description import to_json
    from iez.sim.scenarios import SCENARIOS

    cluster, _ = SCENARIOS["hetbw-congested-1"].cluster.build()
    again = parse_json(json.dumps(to_json(cluster)))
    assert again.osts == cluster.osts and again.osses == cluster.osses and again.fill_cap == cluster.fill_cap
