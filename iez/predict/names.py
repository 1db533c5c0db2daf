"""File names of the next run: infer the template the application names its files by, and extrapolate it.

A name splits into literal text and digit fields (``FPP1-Part00000003-of-00000008.data``
is ``FPP`` 1 ``-Part`` 00000003 ``-of-`` 00000008 ``.data``); names with the same
literal text share a *skeleton*. For each skeleton, every digit field must be
explained, over every observed name of that skeleton, by one rule (the first
that fits, in this order):

- ``literal``: the same text everywhere (``FPP1``, ``-of-00000008`` in runs of one size);
- ``rank``: the request's MPI rank plus a constant (``Part00000003`` for rank 3);
- ``ranks``: the run's number of ranks plus a constant (``-of-00000008`` when run sizes vary);
- ``run``: ``a + b × run index`` with ``b ≠ 0`` (a run or checkpoint counter; needs two runs);
- ``position``: the request's position in its run plus a constant;
- ``per-position``: at each position the same text in every run (each position seen
  in two runs or more, unless there is only one run);
- ``per-position-run``: at each position ``a + b × run index``.

Zero padding is kept: a field whose observed texts all have one length is
written with that width (``%08d``); fields of varying length are not padded.

When there are several runs, a skeleton seen in only one of them (a file
the other runs did not write) is not trusted to recur.

A predicted request takes the skeleton of the last run's request at its
position and fills each field by its rule, with the predicted rank and run
index. When a field fits no rule (a time stamp, a process id, random
letters that change the skeleton between runs), a value would be negative,
or two requests would get one name, the name is not predicted: the
request's ``file`` is None and it is never stored — a name is never
invented.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

_DIGITS = re.compile(r"[0-9]+")

Skeleton = tuple[str, ...]


def split(name: str) -> tuple[Skeleton, tuple[str, ...]]:
    """``(literal parts, digit fields)``; there is one more literal part than fields."""
    return tuple(_DIGITS.split(name)), tuple(_DIGITS.findall(name))


@dataclass(frozen=True)
class Observation:
    run: int  # index of the run in the series, 0 first
    position: int  # index of the request in its run
    rank: int
    ranks: int  # ranks of its run (distinct ranks >= 0; the run length when none)
    fields: tuple[str, ...]


@dataclass(frozen=True)
class Rule:
    kind: str
    width: int = 0
    text: str = ""
    offset: int = 0
    step: int = 0
    per_position: dict = field(default_factory=dict, compare=False, hash=False)

    def value(self, run: int, position: int, rank: int, ranks: int) -> str | None:
        if self.kind == "literal":
            return self.text
        if self.kind == "rank":
            number = rank + self.offset
        elif self.kind == "ranks":
            number = ranks + self.offset
        elif self.kind == "run":
            number = self.offset + self.step * run
        elif self.kind == "position":
            number = position + self.offset
        elif self.kind == "per-position":
            return self.per_position.get(position)
        elif self.kind == "per-position-run":
            if position not in self.per_position:
                return None
            offset, step = self.per_position[position]
            number = offset + step * run
        else:  # pragma: no cover - every kind is listed above
            return None
        if number < 0:
            return None
        text = str(number)
        return text.zfill(self.width) if self.width else text


def _width(texts: Sequence[str]) -> int:
    lengths = {len(t) for t in texts}
    return lengths.pop() if len(lengths) == 1 else 0


def _constant_offset(pairs: Sequence[tuple[int, int]]) -> int | None:
    """``c`` with ``value == base + c`` for every ``(base, value)``, or None."""
    offsets = {value - base for base, value in pairs}
    return offsets.pop() if len(offsets) == 1 else None


def _linear_in_run(points: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """``(a, b)`` with ``value == a + b × run``, b a non-zero whole number, from ``(run, value)`` points."""
    runs = sorted({r for r, _ in points})
    if len(runs) < 2:
        return None
    by_run: dict[int, int] = {}
    for r, v in points:
        if by_run.setdefault(r, v) != v:
            return None
    (r0, v0), (r1, v1) = (runs[0], by_run[runs[0]]), (runs[1], by_run[runs[1]])
    step, rest = divmod(v1 - v0, r1 - r0)
    if rest or step == 0:
        return None
    offset = v0 - step * r0
    return (offset, step) if all(v == offset + step * r for r, v in by_run.items()) else None


def _rule(obs: Sequence[Observation], j: int, runs: int) -> Rule | None:
    texts = [o.fields[j] for o in obs]
    values = [int(t) for t in texts]
    width = _width(texts)
    if len(set(texts)) == 1:
        return Rule("literal", text=texts[0])
    offset = _constant_offset([(o.rank, v) for o, v in zip(obs, values)])
    if offset is not None and all(o.rank >= 0 for o in obs):
        return Rule("rank", width, offset=offset)
    offset = _constant_offset([(o.ranks, v) for o, v in zip(obs, values)])
    if offset is not None:
        return Rule("ranks", width, offset=offset)
    line = _linear_in_run([(o.run, v) for o, v in zip(obs, values)])
    if line is not None:
        return Rule("run", width, offset=line[0], step=line[1])
    offset = _constant_offset([(o.position, v) for o, v in zip(obs, values)])
    if offset is not None:
        return Rule("position", width, offset=offset)
    by_position: dict[int, list[Observation]] = {}
    for o in obs:
        by_position.setdefault(o.position, []).append(o)
    seen_twice = runs < 2 or all(len({o.run for o in group}) >= 2 for group in by_position.values())
    if seen_twice and all(len({o.fields[j] for o in group}) == 1 for group in by_position.values()):
        return Rule("per-position", width, per_position={p: g[0].fields[j] for p, g in by_position.items()})
    lines = {p: _linear_in_run([(o.run, int(o.fields[j])) for o in g]) for p, g in by_position.items()}
    if all(line is not None for line in lines.values()):
        return Rule("per-position-run", width, per_position=lines)
    return None


@dataclass(frozen=True)
class Template:
    skeleton: Skeleton
    rules: tuple[Rule, ...]

    def name(self, run: int, position: int, rank: int, ranks: int) -> str | None:
        parts = [self.skeleton[0]]
        for rule, literal in zip(self.rules, self.skeleton[1:]):
            value = rule.value(run, position, rank, ranks)
            if value is None:
                return None
            parts += [value, literal]
        return "".join(parts)

    def describe(self) -> str:
        out = [self.skeleton[0]]
        for rule, literal in zip(self.rules, self.skeleton[1:]):
            if rule.kind == "literal":
                out.append(rule.text)
            else:
                pad = f":0{rule.width}" if rule.width else ""
                out.append("{" + rule.kind + pad + "}")
            out.append(literal)
        return "".join(out)


def _ranks_of(ranks: Sequence[int]) -> int:
    distinct = {r for r in ranks if r >= 0}
    return len(distinct) if distinct else len(ranks)


class NameModel:
    """Templates learnt from the names of several runs (each a list of ``(name, rank)`` in series order)."""

    def __init__(self, runs: Sequence[Sequence[tuple[str | None, int]]]):
        self.runs = len(runs)
        by_skeleton: dict[Skeleton, list[Observation]] = {}
        for r, run in enumerate(runs):
            ranks = _ranks_of([rank for _, rank in run])
            for position, (name, rank) in enumerate(run):
                if name is None:
                    continue
                skeleton, fields = split(name)
                by_skeleton.setdefault(skeleton, []).append(Observation(r, position, rank, ranks, fields))
        self.templates: dict[Skeleton, Template | None] = {}
        for skeleton, obs in by_skeleton.items():
            if self.runs >= 2 and len({o.run for o in obs}) < 2:  # seen in one run of several: may not recur
                self.templates[skeleton] = None
                continue
            rules = [_rule(obs, j, self.runs) for j in range(len(skeleton) - 1)]
            found = [r for r in rules if r is not None]
            self.templates[skeleton] = Template(skeleton, tuple(found)) if len(found) == len(rules) else None
        last = runs[-1] if runs else []
        self.last_skeletons = [split(name)[0] if name is not None else None for name, _ in last]

    def predict(self, ranks: Sequence[int]) -> list[str | None]:
        """Names of the next run's requests, given their predicted ranks; None where no name can be predicted."""
        run, total = self.runs, _ranks_of(ranks)
        names: list[str | None] = []
        for position, rank in enumerate(ranks):
            skeleton = self.last_skeletons[position] if position < len(self.last_skeletons) else None
            template = self.templates.get(skeleton) if skeleton is not None else None
            names.append(template.name(run, position, int(rank), total) if template else None)
        seen: dict[str, int] = {}
        for i, name in enumerate(names):
            if name is None:
                continue
            if name in seen:  # two requests, one name: neither is trusted
                names[seen[name]] = None
                names[i] = None
            else:
                seen[name] = i
        return names

    def describe(self) -> list[str]:
        return sorted(t.describe() for t in self.templates.values() if t is not None)


def predict_names(runs: Sequence[Sequence[tuple[str | None, int]]], ranks: Sequence[int]) -> list[str | None]:
    return NameModel(runs).predict(ranks)
