"""Help text: ``iez --help`` describes iez to its users; every command and option of ``iez`` and ``iez-agent``
has a help text, every option's default shows in it, and no help prints a doubled ``%%``."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from iez.cli import build_parser


def parsers(parser: argparse.ArgumentParser, path: tuple[str, ...]):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield from parsers(action.choices[choice.dest], (*path, choice.dest))


def every_parser():
    from agents.cli import build_parser as agent_parser

    yield from parsers(build_parser(), ("iez",))
    yield from parsers(agent_parser(), ("iez-agent",))


def has_default(action: argparse.Action) -> bool:
    default = action.default
    return (bool(action.option_strings) and default not in (None, False, argparse.SUPPRESS)
            and not (isinstance(default, (list, tuple)) and not default)
            and not isinstance(action, (argparse._HelpAction, argparse._VersionAction)))


ALL = list(every_parser())


def test_the_walk_covers_every_command():
    names = {" ".join(path) for path, _ in ALL}
    assert len(names) >= 30
    assert {"iez bench allocate", "iez mds", "iez status", "iez cluster emulate", "iez-agent"} <= names


@pytest.mark.parametrize("path,parser", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_commands_and_options_have_help_and_defaults(path, parser):
    assert parser.description or len(path) == 1, f"{' '.join(path)} --help says nothing of what it does"
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                assert choice.help, f"{' '.join(path)} {choice.dest}: no help"
            continue
        if action.help == argparse.SUPPRESS:
            continue
        name = "/".join(action.option_strings) or action.dest
        assert action.help, f"{' '.join(path)} {name}: no help"
        if has_default(action):
            shown = formatter._get_help_string(action) % {**vars(action), "prog": parser.prog}
            assert "default" in shown, f"{' '.join(path)} {name}: default {action.default!r} not shown"
    text = parser.format_help()
    assert "%%" not in text and "``" not in text and ":mod:" not in text, text


@pytest.mark.slow
def test_top_level_help_is_for_users():
    done = subprocess.run([sys.executable, "-m", "iez.cli", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    intro = done.stdout.split("\n\n")[1]
    assert intro.startswith("iez balances Lustre stripe placement") and "iez.commands" not in done.stdout
    assert "deploy/README.md" in done.stdout


@pytest.mark.slow
def test_bench_allocate_help_prints_percent_once():
    done = subprocess.run([sys.executable, "-m", "iez.cli", "bench", "allocate", "--help"], capture_output=True,
                          text=True)
    assert done.returncode == 0 and "10-60% full" in done.stdout and "%%" not in done.stdout
