"""Config files, flags, errors (one line, exit 2), the key helper, the systemd unit, imports."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import zmq.auth

from agents import AgentError
from agents.config import read_config_file, resolve

from agent_support import DATA, proc_tree, run_agent  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EX8761 = DATA / "lustre-2.15-ex8761-lctl.txt"


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    errors = [line for line in lines if not line.startswith("iez-agent: warning: ")]
    assert len(errors) == 1 and errors == lines[-1:], done.stderr
    assert errors[0].startswith("iez-agent: error: ")
    return errors[0]


def test_malformed_lctl_file_exit_2_with_file_and_line(tmp_path: Path, run_agent):
    bad = tmp_path / "bad.txt"
    bad.write_text("obdfilter.fs-OST0000.kbytestotal=4108388\n"
                   "obdfilter.fs-OST0000.kbytesavail=4037172\n"
                   "obdfilter.fs-OST0000.stats=\n"
                   "snapshot_time 1.0 secs.nsecs\n"
                   "read_bytes 12 samples [bytes] 1 2 three\n")
    line = one_error_line(run_agent("--once", "--json", "--lctl-output", str(bad), "--oss-id", "oss1"))
    assert f"{bad}:5: " in line and "'three'" in line
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    line = one_error_line(run_agent("--once", "--json", "--lctl-output", str(garbage)))
    assert f"{garbage}:1: " in line


def test_missing_file_and_no_osts(tmp_path: Path, run_agent):
    line = one_error_line(run_agent("--once", "--json", "--lctl-output", str(tmp_path / "nope.txt")))
    assert line == f"iez-agent: error: cannot read lctl output {tmp_path / 'nope.txt'}: No such file or directory"
    mdt_only = tmp_path / "mdt.txt"
    mdt_only.write_text("osd-ldiskfs.fs-MDT0000.kbytestotal=2602832\nosd-ldiskfs.fs-MDT0000.kbytesavail=1\n")
    line = one_error_line(run_agent("--once", "--json", "--lctl-output", str(mdt_only)))
    assert line == f"iez-agent: error: no OSTs found in {mdt_only}"


@pytest.mark.parametrize("args, words", [
    (["--interval", "0.5"], "interval must be 1..3600 s"),
    (["--interval", "3601"], "interval must be 1..3600 s"),
    (["--interval", "soon"], "interval must be a number"),
    (["--count", "0"], "--count must be at least 1"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--mds", "mds:5555"], "must look like tcp://host:port"),
    (["--mds", "tcp://mds"], "must look like tcp://host:port"),
    (["--osts", "fs-OST0000,fs-MDT0000"], "'fs-MDT0000' is not an OST name"),
    (["--curve-secret-key", "k"], "CURVE needs both"),
    (["--source", "magic"], "invalid choice: 'magic'"),
])
def test_bad_settings(args, words, run_agent):
    line = one_error_line(run_agent("--once", "--json", "--lctl-output", str(EX8761), *args))
    assert words in line


def test_daemon_needs_an_mds_and_once_needs_an_output(run_agent):
    assert "no MDS endpoint" in one_error_line(run_agent("--lctl-output", str(EX8761)))
    assert "--once needs --json" in one_error_line(run_agent("--once", "--lctl-output", str(EX8761)))


def test_config_file_plain_and_ini_with_cli_override(tmp_path: Path):
    plain = tmp_path / "agent.conf"
    plain.write_text("# iez agent\noss_id = oss7\nmds = tcp://mds:5555\ninterval = 30  # seconds\n"
                     "osts = fs-OST0000, fs-OST0001\nlctl-output = saved.txt\ncurve_server_key = keys/mds.key\n"
                     "curve_secret_key = /etc/iez/oss7.key_secret\nroot = trees/a:/abs/b\n")
    values = read_config_file(plain)
    assert values["lctl_output"] == str(tmp_path / "saved.txt")
    assert values["curve_server_key"] == str(tmp_path / "keys" / "mds.key")
    assert values["root"] == f"{tmp_path / 'trees' / 'a'}:/abs/b"
    cfg = resolve({"interval": "5", "oss_id": None}, str(plain))
    assert (cfg.oss_id, cfg.mds, cfg.interval, cfg.osts) == ("oss7", "tcp://mds:5555", 5.0,
                                                             ("fs-OST0000", "fs-OST0001"))
    assert cfg.curve and cfg.config_file == str(plain)
    ini = tmp_path / "agent.ini"
    ini.write_text("[agent]\noss_id: oss8\nmds = tcp://10.0.0.1:6000\nsource = procfs\nfsname = scratch\n")
    cfg = resolve({}, str(ini))
    assert (cfg.oss_id, cfg.mds, cfg.source, cfg.fsname, cfg.interval) == ("oss8", "tcp://10.0.0.1:6000",
                                                                          "procfs", "scratch", 60.0)
    assert not cfg.curve


@pytest.mark.parametrize("text, words", [
    ("oss_id = a\nintervall = 5\n", ":2: unknown key 'intervall'"),
    ("[server]\nmds = tcp://a:1\n", ":1: unknown section [server]"),
    ("just words\n", ":1: expected 'key = value'"),
    ("interval = 0\n", "interval must be 1..3600"),
])
def test_config_file_errors(tmp_path: Path, text, words):
    path = tmp_path / "agent.conf"
    path.write_text(text)
    with pytest.raises(AgentError, match=words.replace("[", r"\[").replace("]", r"\]")):
        resolve({}, str(path))


def test_config_from_environment_declares_osts(tmp_path: Path, run_agent):
    conf = tmp_path / "agent.conf"
    conf.write_text(f"oss_id = from-env\nlctl_output = {EX8761}\nosts = fs-OST0001,fs-OST0007\ninterval = 2\n")
    done = run_agent("--once", "--json", env={"IEZ_AGENT_CONFIG": str(conf)})
    assert done.returncode == 0, done.stderr
    msg = json.loads(done.stdout)
    assert msg["oss_id"] == "from-env" and msg["interval_s"] == 2
    assert [o["name"] for o in msg["osts"]] == ["fs-OST0001"]
    assert done.stderr == "iez-agent: warning: declared OST fs-OST0007 not found\n"
    # flags win over the file
    done = run_agent("--once", "--json", "--oss-id", "flag", "--osts", "fs-OST0000", "--config", str(conf))
    msg = json.loads(done.stdout)
    assert msg["oss_id"] == "flag" and [o["index"] for o in msg["osts"]] == [0]
    # a missing config file named by the environment is an error
    line = one_error_line(run_agent("--once", "--json", env={"IEZ_AGENT_CONFIG": str(tmp_path / "none.conf")}))
    assert f"cannot read config file {tmp_path / 'none.conf'}" in line


def test_declared_osts_none_found(tmp_path: Path, run_agent):
    line = one_error_line(run_agent("--once", "--json", "--lctl-output", str(EX8761), "--osts", "fs-OST0009"))
    assert line == (f"iez-agent: error: no OSTs found in {EX8761} "
                    f"(declared: fs-OST0009; OSTs in the source: fs-OST0000, fs-OST0001)")


def test_fsname_selects_one_file_system(run_agent):
    done = run_agent("--once", "--json", "--lctl-output", str(DATA / "osd.txt"), "--fsname", "fs")
    assert [o["name"] for o in json.loads(done.stdout)["osts"]] == ["fs-OST0000", "fs-OST0010"]
    line = one_error_line(run_agent("--once", "--json", "--lctl-output", str(DATA / "osd.txt"), "--fsname", "exa01"))
    assert "no OSTs found" in line and "file system exa01" in line


def test_key_helpers(tmp_path: Path, run_agent):
    done = run_agent("keys", str(tmp_path / "k"), "oss1")
    assert done.returncode == 0, done.stderr
    public, secret = tmp_path / "k" / "oss1.key", tmp_path / "k" / "oss1.key_secret"
    assert done.stdout == f"public key: {public}\nsecret key: {secret}\n"
    pub, none = zmq.auth.load_certificate(public)
    pub2, sec = zmq.auth.load_certificate(secret)
    assert none is None and pub == pub2 and len(sec) == 40
    assert secret.stat().st_mode & 0o777 == 0o600
    again = run_agent("keys", str(tmp_path / "k"), "oss1")
    assert again.returncode == 2 and "exists; use --force" in again.stderr
    assert run_agent("keys", str(tmp_path / "k"), "oss1", "--force").returncode == 0
    done = subprocess.run([sys.executable, "-m", "agents.keys", str(tmp_path / "m")], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "m").glob("*.key"))) == 1 and len(list((tmp_path / "m").glob("*.key_secret"))) == 1


def test_systemd_unit():
    unit = (ROOT / "agents" / "systemd" / "iez-agent.service").read_text()
    for line in ("Type=simple", "Restart=on-failure", "Environment=IEZ_AGENT_CONFIG=/etc/iez/agent.conf",
                 "ExecStart=/opt/iez-agent/bin/iez-agent", "WantedBy=multi-user.target"):
        assert f"\n{line}\n" in unit
    # the agent-only install the administrator's guide gives puts the command where the unit starts it
    install = "python3 -m venv /opt/iez-agent && /opt/iez-agent/bin/pip install ./agents"
    assert install in unit and install in (ROOT / "docs" / "administration.md").read_text()


def test_agent_imports_only_pyzmq_and_the_standard_library():
    allowed = set(sys.stdlib_module_names) | {"zmq", "agents", "__future__"}
    for path in sorted((ROOT / "agents").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"
    # and in a fresh interpreter, loading the CLI pulls in neither pydantic nor iez
    code = ("import sys, agents.cli, agents.publisher; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'iez', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_version_and_help(run_agent):
    assert run_agent("--version").stdout.startswith("iez-agent ")
    help_text = run_agent("--help").stdout
    for flag in ("--once", "--json", "--lctl-output", "--root", "--oss-id", "--mds", "--interval", "--config",
                 "--count", "--curve-server-key", "--curve-secret-key"):
        assert flag in help_text
