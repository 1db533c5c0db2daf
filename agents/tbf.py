"""NRS TBF rules on this OSS: the rules ``iez shares rules --json`` computed for it, put in force.

On a Lustre server the agent runs ``lctl set_param ost.OSS.ost_io.nrs_policies="tbf jobid"`` and, per rule,
``stop`` then ``start NAME jobid={PATTERN} rate=R`` (a rule that no longer appears is stopped). On an
emulated OSS (``--root``) it writes the same into ``ROOT/ost/OSS/ost_io/nrs_policies`` and
``nrs_tbf_rule``, where the emulated bandwidth reads them. The rules are applied when the file changes
(and at start); a file that cannot be read or holds no rule for this OSS changes nothing and is said
once. Self-contained: the agent does not need the iez package on an OSS.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
from pathlib import Path

from agents import AgentError

log = logging.getLogger("iez.agent")

_NAME = re.compile(r"^\w{1,15}$")
_JOBID = re.compile(r"^[^{}\s]{1,128}$")


def load(path: str | Path, oss_id: str) -> list[dict]:
    """This OSS's rules from the JSON ``iez shares rules --json`` prints: [{name, jobid, rate}]."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as err:
        raise AgentError(f"cannot read the TBF rules {path}: {err.strerror}") from None
    except ValueError as err:
        raise AgentError(f"{path}: not JSON ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list):
        raise AgentError(f'{path}: expected {{"rules": [{{"oss", "name", "jobid", "rate"}}, ...]}} '
                         "(iez shares rules --json)")
    mine = []
    for n, rule in enumerate(doc["rules"]):
        if not isinstance(rule, dict):
            raise AgentError(f"{path}: rules[{n}] is not an object")
        if rule.get("oss") != oss_id:
            continue
        name, jobid, rate = rule.get("name"), rule.get("jobid"), rule.get("rate")
        if not isinstance(name, str) or not _NAME.match(name):
            raise AgentError(f"{path}: rules[{n}].name {name!r}: 1-15 letters, digits or '_'")
        if not isinstance(jobid, str) or not _JOBID.match(jobid):
            raise AgentError(f"{path}: rules[{n}].jobid {jobid!r}: no spaces or braces")
        if isinstance(rate, bool) or not isinstance(rate, int) or not 1 <= rate <= 10_000_000:
            raise AgentError(f"{path}: rules[{n}].rate {rate!r}: RPCs per second from 1")
        mine.append({"name": name, "jobid": jobid, "rate": rate})
    return mine


def start_line(rule: dict) -> str:
    return f"start {rule['name']} jobid={{{rule['jobid']}}} rate={rule['rate']}"


def write_tree(root: str | Path, rules: list[dict]) -> Path:
    """An emulated OSS: the policy and the rules in its tree, each file replaced atomically."""
    d = Path(root) / "ost" / "OSS" / "ost_io"
    d.mkdir(parents=True, exist_ok=True)
    for name, text in (("nrs_policies", "tbf jobid\n"), ("nrs_tbf_rule", "".join(start_line(r) + "\n" for r in rules))):
        tmp = d / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, d / name)
    return d


def apply_lctl(rules: list[dict], previous: list[dict], lctl: str = "lctl") -> None:
    """A Lustre server: TBF policy on, rules that went away stopped, each rule restarted with its rate."""
    def set_param(value: str, check: bool = True) -> None:
        done = subprocess.run([lctl, "set_param", value], capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise AgentError(f"lctl set_param {value} failed: {(done.stderr or done.stdout).strip()[:200]}")

    set_param('ost.OSS.ost_io.nrs_policies=tbf jobid')
    names = {r["name"] for r in rules}
    for old in previous:
        if old["name"] not in names:
            set_param(f"ost.OSS.ost_io.nrs_tbf_rule=stop {old['name']}", check=False)
    for rule in rules:
        set_param(f"ost.OSS.ost_io.nrs_tbf_rule=stop {rule['name']}", check=False)  # absent the first time
        set_param(f"ost.OSS.ost_io.nrs_tbf_rule={start_line(rule)}")


class TbfRules:
    """Watches the rules file and applies this OSS's rules when it changes."""

    def __init__(self, path: str | Path, oss_id: str, root: str | Path | None = None, lctl: str = "lctl"):
        self.path, self.oss_id, self.root, self.lctl = Path(path), oss_id, root, lctl
        self._seen: tuple | None = None
        self._applied: list[dict] = []
        self._said: str | None = None

    def refresh(self) -> bool:
        """Applies the rules if the file changed since the last call; True when it applied them."""
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
        if stamp == self._seen:
            return False
        self._seen = stamp
        try:
            rules = load(self.path, self.oss_id)
            if self.root is not None:
                write_tree(self.root, rules)
            else:
                apply_lctl(rules, self._applied, self.lctl)
        except AgentError as err:
            if str(err) != self._said:
                log.warning("TBF rules not applied: %s", err)
                self._said = str(err)
            return False
        self._applied = rules
        self._said = None
        log.info("TBF rules applied on %s: %s", self.oss_id, ", ".join(start_line(r) for r in rules) or "none")
        return True
