"""Storage only stores (issue 28 item 5): SQL statement text is written in ``iez/db`` and nowhere else.

Every string literal in ``iez/`` and ``agents/`` (docstrings aside, which may name a statement) is searched for
the shape of an SQL statement; one found outside the DB layer fails, naming its file and line. Code that needs
the database calls a function of :mod:`iez.db` that takes a connection or engine and returns plain values.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("iez", "agents")
DB_LAYER = "iez/db/"
#: Paths (prefixes) left out of the search, with their reason; none now (the file inventory's statements went
#: to ``iez/db/inventory.py``).
KNOWN_EXCEPTIONS: dict[str, str] = {}

STATEMENT = re.compile(
    r"\b(SELECT\s+\S|INSERT\s+(OR\s+[A-Z]+\s+)?INTO\b|UPDATE\s+\w+\s+SET\b|DELETE\s+FROM\b"
    r"|(CREATE|DROP)\s+(TABLE|INDEX|VIEW)\b|ALTER\s+TABLE\b|PRAGMA\s+\w|SHOW\s+(VARIABLES|TABLES|STATUS)\b"
    r"|SET\s+STATEMENT\b)")
KEYWORD = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|PRAGMA|SHOW|SET)\b")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def sql_outside_db_layer(root: Path = ROOT) -> list[str]:
    """``file:line: text`` of each SQL statement literal outside the DB layer and the known exceptions."""
    found = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name.startswith(DB_LAYER) or any(name.startswith(e) for e in KNOWN_EXCEPTIONS):
                continue
            source = path.read_text(encoding="utf-8")
            if not KEYWORD.search(source):  # only files naming a statement's keyword are parsed
                continue
            tree = ast.parse(source, filename=name)
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                        and STATEMENT.search(node.value)):
                    found.append(f"{name}:{node.lineno}: {node.value.strip()[:80]!r}")
    return sorted(found)


def test_sql_statements_are_written_only_in_the_db_layer():
    found = sql_outside_db_layer()
    assert not found, ("SQL statement text outside iez/db (move it into a module of iez/db that takes a "
                       "connection or engine and returns plain values):\n" + "\n".join(found))


def test_the_guard_finds_a_statement_and_names_its_file_and_line(tmp_path):
    (tmp_path / "iez" / "db").mkdir(parents=True)
    (tmp_path / "agents").mkdir()
    (tmp_path / "iez" / "db" / "fine.py").write_text('Q = "SELECT 1 FROM t"\n')
    (tmp_path / "agents" / "bad.py").write_text(
        '"""Docstrings may say SELECT x FROM t."""\n\n'
        'def f(conn):\n    return conn.execute(\n'
        '        "UPDATE osts SET state = ? "\n        "WHERE ost_index = ?")\n')
    assert sql_outside_db_layer(tmp_path) == ["agents/bad.py:5: 'UPDATE osts SET state = ? WHERE ost_index = ?'"]
