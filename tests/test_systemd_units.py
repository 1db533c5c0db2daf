"""The shipped unit files start commands this iez accepts (a typo there only shows on a server at boot)."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import pytest

from iez.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
UNITS = sorted([*ROOT.glob("deploy/systemd/*.service"), *ROOT.glob("agents/systemd/*.service")])


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(path)
    return parser


def test_every_daemon_has_a_unit():
    assert {p.name for p in UNITS} == {"iez-mds.service", "iez-api.service", "iez-agent.service"}


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_unit_commands_parse(path):
    service = unit(path)["Service"]
    assert service.get("Restart") == "on-failure"
    for key in ("ExecStartPre", "ExecStart"):
        if key not in service:
            continue
        argv = [a for a in shlex.split(service[key]) if not a.startswith("$")]  # $VARS come from the env file
        program = Path(argv[0]).name
        if program == "iez":
            args = build_parser().parse_args(argv[1:])
            assert callable(args.handler)
        else:
            assert program == "iez-agent"
            from agents.cli import build_parser as agent_parser

            agent_parser().parse_args(argv[1:])
