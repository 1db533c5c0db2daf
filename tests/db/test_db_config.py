"""IEZ_DB / --db: one setting names the database, in the forms ARCHITECTURE.md gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from iez.config import ConfigError, Settings, database_url


def test_default_database_is_iez_db_under_the_state_dir(tmp_path):
    settings = Settings.from_env(env={"IEZ_STATE_DIR": str(tmp_path)})
    assert settings.db == str(tmp_path / "iez.db")
    assert settings.db_url.drivername == "sqlite"
    assert settings.db_url.database == str(tmp_path / "iez.db")


def test_state_dir_defaults_to_local_state(monkeypatch):
    settings = Settings.from_env(env={})
    assert settings.db == str(Path("~/.local/state/iez/iez.db").expanduser())


def test_command_line_db_wins_over_environment(tmp_path):
    settings = Settings.from_env(db="/tmp/cli.db", env={"IEZ_DB": "/tmp/env.db"})
    assert settings.db == "/tmp/cli.db"
    assert Settings.from_env(env={"IEZ_DB": "/tmp/env.db"}).db == "/tmp/env.db"


def test_plain_path_is_an_absolute_sqlite_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = database_url("state/iez.db")
    assert url.drivername == "sqlite" and url.database == str(tmp_path / "state" / "iez.db")


def test_mysql_url_goes_through_mysqlclient_in_utf8mb4():
    url = database_url("mysql://iez:secret@db.example:3307/iez")
    assert url.drivername == "mysql+mysqldb"
    assert (url.username, url.password, url.host, url.port, url.database) == ("iez", "secret", "db.example", 3307, "iez")
    assert url.query["charset"] == "utf8mb4"


@pytest.mark.parametrize("bad, named", [
    ("postgres://x@h/db", "use a file path or mysql://"),
    ("mysql://root@localhost", "names no database"),
    ("sqlite:///:memory:", "shared by every process"),
])
def test_unusable_db_values_are_refused_with_the_reason(bad, named):
    with pytest.raises(ConfigError, match=named):
        database_url(bad)


def test_api_settings_are_validated():
    with pytest.raises(ConfigError, match="IEZ_API_READS"):
        Settings.from_env(env={"IEZ_API_READS": "sometimes"})
    with pytest.raises(ConfigError, match="IEZ_OSS_STALE_S"):
        Settings.from_env(env={"IEZ_OSS_STALE_S": "-3"})
    settings = Settings.from_env(env={"IEZ_API_TOKEN": "t", "IEZ_API_READS": "token"})
    assert (settings.api_token, settings.reads) == ("t", "token")
