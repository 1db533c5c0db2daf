"""The error tree (iez/errors.py): every exception class of iez is in it, its one table covers every branch,
and the ``iez`` command and the REST API answer with the table's exit code and HTTP status."""

from __future__ import annotations

import argparse
import importlib
import inspect
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import agents
import iez
from agents import AgentError
from conftest import fresh_db, run_iez
from iez import errors
from iez.errors import TABLE, ConfigError, IezError, Infeasible, InputError, NotFound, StorageUnavailable

BRANCHES = (InputError, NotFound, Infeasible, StorageUnavailable, ConfigError)


def modules(package) -> list:
    """Every module of ``package``, imported: found as files, so directories without an ``__init__.py``
    (``iez/sim``) count too (a module that needs an absent optional dependency is skipped)."""
    root = Path(package.__file__).parent
    found = [package]
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if "migrations" in parts:  # Alembic's scripts run only under Alembic
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        try:
            found.append(importlib.import_module(".".join(parts)))
        except ImportError:
            continue
    return found


def exception_classes(package) -> list[type]:
    """The exception classes (not warnings) defined at the top level of ``package``'s modules."""
    return sorted({cls for module in modules(package) for _, cls in inspect.getmembers(module, inspect.isclass)
                   if issubclass(cls, BaseException) and not issubclass(cls, Warning)
                   and cls.__module__ == module.__name__}, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_every_exception_class_of_iez_is_in_the_tree():
    classes = exception_classes(iez)
    assert len(classes) >= 30  # the introspection finds them (a broken walk would pass vacuously)
    outside = [f"{c.__module__}.{c.__qualname__}{tuple(b.__name__ for b in c.__bases__)}"
               for c in classes if not issubclass(c, IezError)]
    assert not outside, f"derive these from a branch of iez.errors: {outside}"


def test_every_exception_class_of_the_agent_is_under_its_root():
    # agents/ is a distribution of its own (pyzmq and the standard library only): it cannot import iez, so its
    # root is agents.AgentError; the MDS catches that where it reads an agent's output.
    classes = exception_classes(agents)
    assert AgentError in classes and len(classes) >= 3
    assert [c.__name__ for c in classes if not issubclass(c, AgentError)] == []


def test_the_table_covers_every_branch_and_the_classes_carry_it():
    branches = {cls for cls in vars(errors).values()
                if inspect.isclass(cls) and issubclass(cls, IezError) and cls.__module__ == errors.__name__}
    assert branches == set(TABLE) == {IezError, *BRANCHES}
    for cls, (code, status) in TABLE.items():
        assert (cls.exit_code, cls.http_status) == (code, status)
        assert 1 <= code <= 125 and 400 <= status <= 599
    assert len({TABLE[b] for b in BRANCHES}) == len(BRANCHES)  # no two branches answer alike
    for cls in exception_classes(iez):  # each class answers its branch's code and status
        branch = errors.branch(cls.__new__(cls))
        assert branch in TABLE and cls.exit_code == TABLE[branch][0] and cls.http_status == TABLE[branch][1]


def test_re_rooted_classes_keep_the_bases_their_callers_catch():
    from iez.allocate import AllocationError
    from iez.config import ConfigError as SettingError
    from iez.db import DatabaseUnavailable
    from iez.db.requests import NotFound as NoSuchApp
    from iez.maps import MapError

    assert issubclass(AllocationError, Infeasible) and issubclass(AllocationError, ValueError)
    assert issubclass(DatabaseUnavailable, StorageUnavailable) and issubclass(DatabaseUnavailable, OSError)
    assert issubclass(NoSuchApp, NotFound) and issubclass(NoSuchApp, LookupError)
    assert issubclass(MapError, InputError) and issubclass(MapError, ValueError)
    assert issubclass(SettingError, ConfigError) and issubclass(SettingError, ValueError)


@pytest.mark.slow
def test_a_command_given_bad_input_exits_with_the_tables_code_and_one_line(tmp_path):
    bad = tmp_path / "cluster.json"
    bad.write_text('{"oss": [\n')
    done = run_iez("simulate", "--cluster", str(bad), "--scenario", "paper-ior-fpp-sc8-8", "--policy", "rr")
    assert done.returncode == TABLE[InputError][0] == 2
    assert done.stderr.splitlines() == [f"iez simulate: error: {bad}: line 2 column 1: not valid JSON "
                                        f"(Expecting value)"]
    assert done.stdout == ""


def test_the_cli_maps_each_branch_through_the_table(monkeypatch, capsys):
    # The top-level handler itself, with a sub-command's handler raising each branch in turn.
    from iez import cli

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    for cls in (IezError, *BRANCHES):
        def handler(_args, cls=cls):
            raise cls(f"{cls.__name__} happened")

        monkeypatch.setattr(parser, "parse_args", lambda argv, h=handler: argparse.Namespace(handler=h, command="x"))
        assert cli.main([]) == TABLE[cls][0]
        assert capsys.readouterr().err == f"iez x: error: {cls.__name__} happened\n"


@pytest.fixture
def client(tmp_path) -> TestClient:
    from iez.api.app import create_app
    from iez.config import Settings

    db = fresh_db("sqlite", tmp_path, "errors")
    app = create_app(Settings.from_env(env={"IEZ_DB": db, "IEZ_STATE_DIR": str(tmp_path),
                                            "IEZ_API_READS": "open"}))
    by_name = {cls.__name__: cls for cls in (IezError, *BRANCHES)}

    @app.get("/test/raise/{name}")
    def raise_branch(name: str) -> dict:
        raise by_name[name](f"{name} here")

    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def test_a_route_raising_each_branch_answers_the_tables_status(client):
    for cls in (IezError, *BRANCHES):
        answer = client.get(f"/test/raise/{cls.__name__}")
        assert answer.status_code == TABLE[cls][1], cls
        assert answer.json() == {"detail": f"{cls.__name__} here"}
        assert ("retry-after" in answer.headers) == (cls is StorageUnavailable)


def test_a_real_route_answers_not_found_from_the_table(client):
    answer = client.get("/v1/apps/no-such-app")
    assert answer.status_code == TABLE[NotFound][1] == 404
    assert answer.json()["detail"] == "no application named 'no-such-app'"
