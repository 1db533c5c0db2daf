"""iez.config.Settings (issue 28 item 3): one pydantic-settings class reads every ``IEZ_*`` setting, from the
environment or a mapping alike; a value it cannot use is a ConfigError naming the variable and the value
(exit code 2); the readers that moved onto it (body limit, free space, re-trace rate, layout attribute,
inventory switch, client credentials) still honour their variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from iez import config, errors
from iez.config import ConfigError, Settings, variable


def test_every_field_is_named_by_its_variable():
    assert variable("oss_stale_s") == "IEZ_OSS_STALE_S"
    assert variable("reads") == "IEZ_API_READS"
    assert variable("client_munge_socket") == "IEZ_MUNGE_SOCKET"
    assert all(name.startswith("IEZ_") for name in config.variables())


def test_the_environment_and_a_mapping_give_the_same_settings(monkeypatch, tmp_path):
    values = {"IEZ_STATE_DIR": str(tmp_path), "IEZ_OSS_STALE_S": "240", "IEZ_API_MAX_BODY": "2M",
              "IEZ_INVENTORY": "walk", "IEZ_API_TOKEN": "", "IEZ_RETRACE_MISS_RATE": "0.25"}
    for name in config.variables():
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    from_env, from_mapping = Settings.from_env(), Settings.from_env(env=values)
    assert from_env == from_mapping
    assert (from_env.state_dir, from_env.db) == (tmp_path, str(tmp_path / "iez.db"))
    assert (from_env.oss_stale_s, from_env.api_max_body, from_env.inventory) == (240.0, 2 * 1024 * 1024, False)
    assert from_env.api_token is None  # empty counts as unset
    assert from_env.retrace_miss_rate == 0.25


def test_variables_are_exact_names():
    assert Settings.from_env(env={"iez_oss_stale_s": "5", "IEZ_OSS_STALE_S ": "5"}).oss_stale_s == 180.0


@pytest.mark.parametrize("name, value", [
    ("IEZ_OSS_STALE_S", "soon"), ("IEZ_RESERVATION_TTL_S", "0"), ("IEZ_API_READS", "sometimes"),
    ("IEZ_API_MAX_BODY", "12q"), ("IEZ_API_MIN_FREE", "-1"), ("IEZ_RETRACE_MISS_RATE", "1.5"),
    ("IEZ_INVENTORY", "maybe"), ("IEZ_OSS_STALE_S", "nan"),
])
def test_a_bad_value_names_the_variable_and_the_value_and_exits_2(name, value):
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(env={name: value})
    assert f"{name}={value!r}" in str(caught.value)
    assert isinstance(caught.value, errors.ConfigError) and errors.exit_code(caught.value) == 2


def test_defaults_that_depend_on_other_settings():
    assert Settings.from_env(env={}).reads == "open"
    assert Settings.from_env(env={"IEZ_API_USER_TOKENS": "/etc/iez/tokens"}).reads == "owner"
    assert Settings.from_env(env={"IEZ_API_MUNGE_SOCKET": "/run/munge.sock", "IEZ_API_READS": "Token"}).reads == "token"
    assert Settings.from_env(db="/tmp/cli.db", env={"IEZ_DB": "/tmp/env.db"}).with_db(None).db == "/tmp/cli.db"


def test_settings_are_read_once_until_the_cache_is_cleared(monkeypatch):
    monkeypatch.setenv("IEZ_OSS_STALE_S", "111")
    config.settings.cache_clear()
    try:
        assert config.settings().oss_stale_s == 111
        monkeypatch.setenv("IEZ_OSS_STALE_S", "222")
        assert config.settings().oss_stale_s == 111
        config.settings.cache_clear()
        assert config.settings().oss_stale_s == 222
    finally:
        config.settings.cache_clear()


def test_the_readers_moved_onto_the_class_honour_their_variables(monkeypatch):
    from iez.api.auth import client_header
    from iez.api.healthcheck import min_free_from_env
    from iez.api.limits import max_body_from_env
    from iez.layout.emulated import xattr_name
    from iez.predict.learn import retrace_threshold
    from iez.rebalance.settings import resolve

    assert max_body_from_env({"IEZ_API_MAX_BODY": "1M"}) == 1024 * 1024
    assert max_body_from_env({}) == config.DEFAULT_MAX_BODY
    assert min_free_from_env({"IEZ_API_MIN_FREE": "0"}) == 0
    assert retrace_threshold(env={"IEZ_RETRACE_MISS_RATE": "0.2"}) == 0.2
    assert xattr_name({"IEZ_LAYOUT_XATTR": "user.other"}) == "user.other" and xattr_name({}) == "user.iez.layout"
    assert client_header({"IEZ_API_USER_TOKEN": "u1"}) == {"Authorization": "Bearer u1"}
    assert client_header({"IEZ_API_TOKEN": "s", "IEZ_API_USER_TOKEN": "u1"}) == {"Authorization": "Bearer s"}
    with pytest.raises(ConfigError, match="IEZ_API_MAX_BODY"):
        max_body_from_env({"IEZ_API_MAX_BODY": "lots"})
    with pytest.raises(ValueError, match="iez-balance.toml"):  # IEZ_BALANCE_CONFIG names the file resolve() reads
        resolve(None, {}, env={"IEZ_BALANCE_CONFIG": str(Path("/nonexistent/iez-balance.toml"))})


def test_the_same_values_give_the_same_settings_object():
    first = Settings.from_env(env={"IEZ_OSS_STALE_S": "5"})
    assert Settings.from_env(env={"IEZ_OSS_STALE_S": "5", "HOME": "/elsewhere"}) is first
    assert Settings.from_env(env={"IEZ_OSS_STALE_S": "6"}).oss_stale_s == 6.0  # read again when a value changes
    assert Settings.from_env(db="/tmp/x.db", env={"IEZ_OSS_STALE_S": "5"}).db == "/tmp/x.db"
