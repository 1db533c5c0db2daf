"""Every ``IEZ_*`` variable the code reads is documented, and every documented one is read (issue 28 item 3:
one definition of each fact). The Python packages, the preload library and the Slurm plugin are scanned for
the names they pass to ``os.environ``/``getenv``; docs/configuration.md and placement_lib/README.md's table
are the documentation."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = re.compile(r"[\"'](IEZ_[A-Z0-9_]+)[\"']")
DOCS = (REPO / "docs" / "configuration.md", REPO / "placement_lib" / "README.md")


def read_by_code() -> dict[str, str]:
    """Variable -> the first file naming it as a string; the fields of :class:`iez.config.Settings` are read by
    it (iez/config.py, whose lists name every variable, is not counted as a reader of the others)."""
    from iez.config import variables

    found: dict[str, str] = dict.fromkeys(variables(), "iez/config.py (Settings)")
    sources = [*(REPO / "iez").rglob("*.py"), *(REPO / "agents").rglob("*.py"),
               *(REPO / "placement_lib" / "src").glob("*.c"), REPO / "placement_lib" / "spank_iez.c"]
    for path in sorted(set(sources) - {REPO / "iez" / "config.py"}):
        for name in NAME.findall(path.read_text(errors="replace")):
            found.setdefault(name, str(path.relative_to(REPO)))
    return found


def documented() -> set[str]:
    return {name for doc in DOCS for name in re.findall(r"\bIEZ_[A-Z0-9_]+", doc.read_text())}


def test_every_variable_the_code_reads_is_documented():
    missing = {name: where for name, where in read_by_code().items() if name not in documented()}
    assert not missing, f"document these in docs/configuration.md (name: where it is read): {missing}"


def test_every_documented_variable_is_read_somewhere():
    notebooks = " ".join(p.read_text() for p in (REPO / "notebooks").glob("*.ipynb"))
    stale = {name for name in documented() - set(read_by_code()) if name not in notebooks}
    assert not stale, f"documented but read by nothing (renamed or removed?): {sorted(stale)}"


# One place lists every variable: the fields of iez.config.Settings, and iez/config.py's lists of the ones
# that are not settings of a service. docs/configuration.md's tables are generated from that module.

def listed_by_config() -> set[str]:
    from iez import config

    return {*config.variables(), *config.PROCESS_VARIABLES, *config.AGENT_VARIABLES, *config.LIBRARY_VARIABLES}


def generated_part() -> str:
    from iez.config import TABLE_BEGIN, TABLE_END

    text = DOCS[0].read_text()
    assert TABLE_BEGIN in text and TABLE_END in text, "docs/configuration.md lost its generated tables' markers"
    return text[text.index(TABLE_BEGIN):text.index(TABLE_END) + len(TABLE_END)]


def settings_rows() -> dict[str, str]:
    """The first generated table (the settings): variable -> its meaning."""
    table = generated_part().split("\n\n")[1]
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    return {row[0].strip("| `"): row[-1].rstrip(" |") for row in rows}


def test_every_field_has_a_row_and_every_row_names_a_field():
    from iez.config import variables

    rows, fields = settings_rows(), variables()
    assert not set(fields) - set(rows), f"fields without a row in docs/configuration.md: {set(fields) - set(rows)}"
    assert not set(rows) - set(fields), f"rows naming no field of iez.config.Settings: {set(rows) - set(fields)}"
    assert rows == fields, "a row's meaning differs from its field's description: run python -m iez.config"


def test_the_docs_tables_are_the_generated_ones():
    from iez.config import markdown

    assert generated_part() == markdown(), ("docs/configuration.md's tables differ from iez/config.py: paste "
                                            "the output of `python -m iez.config` between the markers")


def test_every_field_is_described():
    from iez.config import Settings

    assert [name for name, info in Settings.model_fields.items() if not (info.description or "").strip()] == []


def test_every_variable_the_code_reads_is_listed_in_iez_config():
    missing = {name: where for name, where in read_by_code().items() if name not in listed_by_config()}
    assert not missing, ("make these fields of iez.config.Settings, or list them in iez/config.py's "
                         f"PROCESS_VARIABLES, AGENT_VARIABLES or LIBRARY_VARIABLES: {missing}")


def test_every_field_is_used_somewhere():
    from iez.config import Settings

    code = " ".join(p.read_text() for p in (REPO / "iez").rglob("*.py") if p.name != "config.py")
    unused = [name for name in Settings.model_fields if f".{name}" not in code]
    assert not unused, f"fields of iez.config.Settings that no code reads (remove them?): {unused}"


def test_every_variable_iez_config_lists_is_read_somewhere():
    stale = listed_by_config() - set(read_by_code())
    assert not stale, f"listed in iez/config.py but read by nothing (renamed or removed?): {sorted(stale)}"
