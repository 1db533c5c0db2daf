"""``iez alloc add/show`` and ``iez db upgrade`` as an administrator runs them."""

from __future__ import annotations

import json

import pytest

from conftest import iez_cli, run_iez


@pytest.mark.slow
def test_alloc_add_then_show_prints_the_contract_shape(db):
    added = iez_cli("alloc", "add", "--db", db, "--file", "/lustre/run/a.h5", "--stripe-size", "1048576",
                    "--osts", "3,7,11")
    assert added.returncode == 0, added.stderr
    shown = iez_cli("alloc", "show", "--db", db, "--file", "/lustre/run/a.h5", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {"file": "/lustre/run/a.h5", "stripe_size": 1048576,
                                        "stripe_count": 3, "osts": [3, 7, 11]}


@pytest.mark.slow
def test_alloc_reads_the_database_from_iez_db(db):
    env = {"IEZ_DB": db}
    assert iez_cli("alloc", "add", "--file", "/lustre/e", "--stripe-size", "65536", "--osts", "2", env=env).returncode == 0
    shown = iez_cli("alloc", "show", "--file", "/lustre/e", "--json", env=env)
    assert json.loads(shown.stdout)["osts"] == [2]


def test_alloc_show_of_an_unknown_file_fails_with_one_line(db):
    shown = iez_cli("alloc", "show", "--db", db, "--file", "/lustre/none", "--json")
    assert shown.returncode == 1
    assert shown.stdout == ""
    assert shown.stderr.strip() == "iez alloc: no allocation for /lustre/none"


def test_alloc_add_refuses_bad_input_naming_it(db):
    for args, named in [
        (["--file", "rel", "--stripe-size", "65536", "--osts", "1"], "absolute"),
        (["--file", "/a", "--stripe-size", "1000", "--osts", "1"], "stripe size 1000"),
        (["--file", "/a", "--stripe-size", "65536", "--osts", "1,x"], "--osts"),
        (["--file", "/a", "--stripe-size", "65536", "--osts", "4,4"], "twice"),
    ]:
        done = iez_cli("alloc", "add", "--db", db, *args)
        assert done.returncode == 2, args
        assert named in done.stderr and "Traceback" not in done.stderr


def test_alloc_add_creates_a_fresh_sqlite_database(tmp_path):
    db = str(tmp_path / "new" / "iez.db")
    assert iez_cli("alloc", "add", "--db", db, "--file", "/l/f", "--stripe-size", "65536", "--osts", "0").returncode == 0
    assert json.loads(iez_cli("alloc", "show", "--db", db, "--file", "/l/f", "--json").stdout)["osts"] == [0]


def test_alloc_show_on_a_missing_database_names_the_upgrade_command(tmp_path):
    db = str(tmp_path / "absent.db")
    shown = iez_cli("alloc", "show", "--db", db, "--file", "/l/f")
    assert shown.returncode == 1
    assert f"run `iez db upgrade --db '{db}'`" in shown.stderr
    assert not (tmp_path / "absent.db").exists()


@pytest.mark.slow
def test_db_upgrade_builds_an_empty_database_and_is_idempotent(empty_db):
    first = iez_cli("db", "upgrade", "--db", empty_db)
    assert first.returncode == 0, first.stderr
    assert "schema revision" in first.stdout
    assert iez_cli("db", "upgrade", "--db", empty_db).returncode == 0
    current = iez_cli("db", "current", "--db", empty_db, "--json")
    assert json.loads(current.stdout)["up_to_date"] is True


@pytest.mark.slow
def test_unreachable_mariadb_is_one_line_from_the_cli():
    done = run_iez("alloc", "show", "--db", "mysql://root@127.0.0.1:1/iez", "--file", "/x")
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1
    assert "is unavailable" in done.stderr
