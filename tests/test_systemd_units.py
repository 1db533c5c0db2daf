"""The shipped unit files: they start commands this iez accepts, from the paths deploy/README.md installs to,
and ``systemd-analyze verify`` passes on them once installed as it says (in a scratch root: the iez user made by
systemd-sysusers there, the binaries in /opt/iez and /opt/iez-agent, the units in /etc/systemd/system).
systemd-analyze and systemd-sysusers come with the Debian package systemd (scripts/test installs it)."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
import sys
import site as sitepkg
import venv
from pathlib import Path

import pytest

from iez.cli import build_parser

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
UNITS = sorted([*ROOT.glob("deploy/systemd/*.service"), *ROOT.glob("agents/systemd/*.service")])
DAEMONS = {"iez-mds.service", "iez-api.service", "iez-agent.service", "iez-balance.service"}
GUIDE = (ROOT / "deploy" / "README.md").read_text()


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(path)
    return parser


def commands(path: Path) -> list[list[str]]:
    service = unit(path)["Service"]
    return [shlex.split(service[key]) for key in ("ExecStartPre", "ExecStart") if key in service]


def test_every_daemon_has_a_unit_and_the_upgrade_is_its_own():
    assert {p.name for p in UNITS} == DAEMONS | {"iez-db-upgrade.service"}


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_unit_commands_parse(path):
    service = unit(path)["Service"]
    if path.name in DAEMONS:
        assert service.get("Restart") == "on-failure"
    for argv in commands(path):
        argv = [a for a in argv if not a.startswith("$")]  # $VARS come from the env file
        program = Path(argv[0]).name
        if program == "iez":
            assert argv[0] == "/opt/iez/bin/iez"
            args = build_parser().parse_args(argv[1:])
            assert callable(args.handler)
        else:
            assert argv[0] == "/opt/iez-agent/bin/iez-agent"
            from agents.cli import build_parser as agent_parser

            agent_parser().parse_args(argv[1:])
        assert f"/{program}" in GUIDE  # the guide says where each binary comes from


def test_upgrades_are_deliberate():
    """No daemon migrates the DB at start (README: upgrades are deliberate); the upgrade unit is never enabled."""
    for path in UNITS:
        for argv in commands(path):
            if path.name != "iez-db-upgrade.service":
                assert argv[1:3] != ["db", "upgrade"], path.name
    upgrade = unit(ROOT / "deploy" / "systemd" / "iez-db-upgrade.service")
    assert upgrade["Service"]["Type"] == "oneshot" and "Install" not in upgrade
    assert "systemctl start iez-db-upgrade" in GUIDE


def test_mds_unit_runs_with_keys_and_metrics_as_documented():
    argv = shlex.split(unit(ROOT / "deploy" / "systemd" / "iez-mds.service")["Service"]["ExecStart"])
    args = build_parser().parse_args([a for a in argv[1:] if not a.startswith("$")])
    assert not args.insecure and args.curve_secret_key and args.curve_authorized
    assert args.metrics_bind == "127.0.0.1:9555" and "127.0.0.1:9555" in GUIDE
    assert str(args.curve_secret_key) in GUIDE and str(args.curve_authorized) in GUIDE


def test_sample_settings_are_what_the_services_read(tmp_path):
    """deploy/etc/agent.conf is read by the agent's own parser; iez.env names the settings iez reads."""
    from agents.config import read_config_file

    values = read_config_file(ROOT / "deploy" / "etc" / "agent.conf")
    assert {"oss_id", "mds", "interval", "curve_server_key", "curve_secret_key"} <= set(values)
    env = dict(line.split("=", 1) for line in (ROOT / "deploy" / "etc" / "iez.env").read_text().splitlines()
               if line and not line.startswith("#"))
    assert {"IEZ_DB", "IEZ_API_TOKEN", "IEZ_MDS_ARGS", "IEZ_API_ARGS"} <= set(env)
    from iez.config import Settings

    settings = Settings.from_env(env={k: v for k, v in env.items() if v})
    assert settings.db.startswith("mysql://") and settings.api_token
    from iez.rebalance.settings import resolve

    balance = resolve(str(ROOT / "deploy" / "etc" / "balance.toml"), {})
    assert balance.root == "/lustre/fs" and (balance.high_water, balance.low_water, balance.share) == (0.85, 0.8, 0.3)
    assert "IEZ_BALANCE_ARGS" in env


def test_balance_unit_reads_its_config_and_serves_metrics_as_documented():
    argv = shlex.split(unit(ROOT / "deploy" / "systemd" / "iez-balance.service")["Service"]["ExecStart"])
    args = build_parser().parse_args([a for a in argv[1:] if not a.startswith("$")])
    assert args.config == "/etc/iez/balance.toml" and not args.once and not args.dry_run
    assert args.metrics_bind == "127.0.0.1:9556" and "127.0.0.1:9556" in GUIDE and "/etc/iez/balance.toml" in GUIDE


def console_script(bin_dir: Path, name: str, module: str) -> None:
    """The entry point pip writes (``from MODULE import main``), run by the venv's own python."""
    path = bin_dir / name
    path.write_text(f"#!{bin_dir / 'python'}\nimport sys\nfrom {module} import main\nsys.exit(main())\n")
    path.chmod(0o755)


def test_systemd_analyze_verify_passes_once_installed_as_documented(tmp_path):
    root = tmp_path / "root"
    # the iez user and group (deploy/README.md step 1), in the scratch root only
    (root / "etc").mkdir(parents=True)
    subprocess.run(["systemd-sysusers", f"--root={root}", str(ROOT / "deploy" / "sysusers.d" / "iez.conf")],
                   check=True, capture_output=True)
    passwd = (root / "etc" / "passwd").read_text()
    assert any(line.startswith("iez:") and line.endswith(":/var/lib/iez:/usr/sbin/nologin")
               for line in passwd.splitlines())
    assert any(line.startswith("iez:") for line in (root / "etc" / "group").read_text().splitlines())
    # /opt/iez and /opt/iez-agent: virtual environments whose iez and iez-agent run this source tree
    for prefix, name, module in (("opt/iez", "iez", "iez.cli"), ("opt/iez", "iez-agent", "agents.cli"),
                                 ("opt/iez-agent", "iez-agent", "agents.cli")):
        if not (root / prefix / "bin" / "python").exists():
            venv.EnvBuilder(system_site_packages=True, symlinks=True, with_pip=False).create(root / prefix)
            site = subprocess.run([str(root / prefix / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  capture_output=True, text=True, check=True).stdout.strip()
            # this source tree, and the packages of the Python running the tests: inside a virtual environment
            # (the README's way on Debian) the scratch venv's base Python does not have them
            Path(site, "iez-source.pth").write_text("".join(f"{p}\n" for p in [ROOT, *sitepkg.getsitepackages()]))
        console_script(root / prefix / "bin", name, module)
    for prefix, name in (("opt/iez", "iez"), ("opt/iez-agent", "iez-agent")):
        done = subprocess.run([str(root / prefix / "bin" / name), "--help"], capture_output=True, text=True,
                              env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        assert done.returncode == 0, done.stderr
    # the units, settings and systemd's own units (sysinit.target and the rest the verify loads)
    system = root / "etc" / "systemd" / "system"
    system.mkdir(parents=True)
    for path in UNITS:
        shutil.copy(path, system / path.name)
    (root / "etc" / "iez").mkdir()
    shutil.copy(ROOT / "deploy" / "etc" / "iez.env", root / "etc" / "iez" / "iez.env")
    shutil.copy(ROOT / "deploy" / "etc" / "agent.conf", root / "etc" / "iez" / "agent.conf")
    shutil.copy(ROOT / "deploy" / "etc" / "balance.toml", root / "etc" / "iez" / "balance.toml")
    shutil.copytree("/usr/lib/systemd/system", root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    done = subprocess.run(["systemd-analyze", "verify", f"--root={root}", "--man=no",
                           *sorted(p.name for p in UNITS)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr.strip(), done.stdout + done.stderr


def test_systemd_analyze_verify_catches_a_missing_binary(tmp_path):
    """The verify above can fail: without /opt/iez in the root it names the command."""
    root = tmp_path / "root"
    system = root / "etc" / "systemd" / "system"
    system.mkdir(parents=True)
    shutil.copy(ROOT / "deploy" / "systemd" / "iez-mds.service", system)
    shutil.copytree("/usr/lib/systemd/system", root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    done = subprocess.run(["systemd-analyze", "verify", f"--root={root}", "iez-mds.service"],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "/opt/iez/bin/iez" in done.stdout + done.stderr
