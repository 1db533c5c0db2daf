"""``iez-agent``: the OSS agent daemon.

    iez-agent --mds tcp://mds1:5555 [--mds tcp://mds2:5555] [--interval 60] [--oss-id oss1] [--config FILE]
    iez-agent --once --json --lctl-output saved.txt --oss-id oss1
    iez-agent keys DIR [NAME]

Every interval it reads the OSTs of this OSS (capacity, read/write byte counters and
the state switches degraded, readonly and no_precreate), the CPU and memory
utilisation of the host, and publishes one message (schema ``iez.oss-stats`` v2,
agents/SCHEMA.md) to the MDS. ``--once`` reads once;
``--json`` prints each message on stdout as one JSON line. Settings come from
``--config FILE`` or ``$IEZ_AGENT_CONFIG``; flags override them. Errors print one
line on stderr and exit with status 2. SIGTERM and SIGINT stop it cleanly (status 0).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

from agents import AgentError, __version__
from agents.config import DEFAULT_INTERVAL_S, SOURCES, AgentConfig, resolve
from agents.host import CpuMeter, mem_percent
from agents.lctl import collect_osts
from agents.message import LimitError, Sequencer, build_message, encode, job_entries, select_osts
from agents.procfs import make_source

__all__ = ["Collector", "main", "run"]

CONNECT_WAIT_S = 2.0  # longest wait for the MDS handshake before the first message
ONCE_CONNECT_WAIT_S = 5.0  # --once/--count: no handshake by then is an error (nothing would be published)
FINAL_LINGER_MS = 1000  # after --count/--once, time given to the last message
#: An MDS endpoint with no handshake for this many report intervals (and at least SILENT_MIN_S) is warned about.
SILENT_INTERVALS = 3
SILENT_MIN_S = 10.0


def _say(message: str) -> None:
    print(f"iez-agent: {message}", file=sys.stderr, flush=True)


class Collector:
    """Reads the source and the host and builds one message per call."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        self.source = make_source(cfg.source, lctl_output=cfg.lctl_output, roots=cfg.root, lctl=cfg.lctl)
        self.cpu = CpuMeter(cfg.proc_stat)
        self.seq = Sequencer()
        self._warned: set[str] = set()

    def warn(self, message: str) -> None:
        if message not in self._warned:  # say each thing once, not every interval
            self._warned.add(message)
            _say(f"warning: {message}")

    def read_osts(self) -> list[dict]:
        readings = collect_osts(self.source.read(), warn=self.warn)
        self.readings = readings  # job_stats are published from them (collect)
        osts = select_osts(readings, wanted=self.cfg.osts, fsname=self.cfg.fsname, warn=self.warn)
        if not osts:
            detail = []
            if self.cfg.osts:
                detail.append(f"declared: {', '.join(self.cfg.osts)}")
            if self.cfg.fsname:
                detail.append(f"file system {self.cfg.fsname}")
            if readings:
                detail.append(f"OSTs in the source: {', '.join(sorted(readings))}")
            extra = f" ({'; '.join(detail)})" if detail else ""
            raise AgentError(f"no OSTs found in {self.source.describe()}{extra}")
        return osts

    def collect(self) -> dict:
        cpu = self.cpu.sample()  # the first call samples a 0.1 s window
        sample_time = time.time()
        osts = self.read_osts()
        mem = mem_percent(self.cfg.meminfo)
        return build_message(oss_id=self.cfg.oss_id, host=self.cfg.host, seq=self.seq.next(),
                             sample_time=sample_time, interval_s=self.cfg.interval, cpu_pct=cpu,
                             mem_pct=mem, osts=osts, source=self.source.kind,
                             job_stats=job_entries(self.readings, osts))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise AgentError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="iez-agent", description="OSS agent of iez: publishes OST capacity, I/O counters and "
                                              "states and host CPU/memory utilisation to the MDS over ZeroMQ.",
                epilog="'iez-agent keys DIR [NAME]' creates a CURVE key pair. Message schema: agents/SCHEMA.md.")
    p.add_argument("--version", action="version", version=f"iez-agent {__version__}")
    run = p.add_argument_group("running")
    run.add_argument("--once", action="store_true", help="read and send (or print) one message, then exit")
    run.add_argument("--json", action="store_true", help="print each message on stdout as one JSON line")
    run.add_argument("--count", type=int, metavar="N", help="stop after N messages")
    run.add_argument("--config", metavar="FILE", help="config file (default: $IEZ_AGENT_CONFIG)")
    run.add_argument("--oss-id", metavar="ID", help="identifier of this OSS (default: short host name)")
    run.add_argument("--host", metavar="NAME", help="host name put in messages (default: this host's)")
    run.add_argument("--mds", metavar="tcp://HOST:PORT", action="append",
                     help="MDS endpoint to publish to; repeat it (or give a comma list) for the active MDS service "
                          "and its standbys: each gets every message on its own socket, and one that is down never "
                          "holds the others up")
    run.add_argument("--interval", metavar="S", help=f"seconds between messages, 1..3600 "
                                                     f"(default {DEFAULT_INTERVAL_S:g})")
    run.add_argument("--sndhwm", metavar="N", help="messages queued for a slow MDS (default 8)")
    src = p.add_argument_group("where OST statistics come from")
    src.add_argument("--source", choices=SOURCES, help="default auto: --lctl-output, else --root, else lctl "
                                                       "when on PATH, else the default roots")
    src.add_argument("--lctl-output", metavar="FILE", help="saved 'lctl get_param' text")
    src.add_argument("--root", metavar="DIR", action="append",
                     help="parameter tree(s), colon-separated or repeated (default /proc/fs/lustre:/sys/fs/lustre)")
    src.add_argument("--lctl", metavar="PROGRAM", help="lctl program to run (default: lctl on PATH)")
    src.add_argument("--osts", metavar="LIST", help="OSTs of this OSS, e.g. fs-OST0000,fs-OST0001 (default: all)")
    src.add_argument("--fsname", metavar="NAME", help="only OSTs of this file system")
    src.add_argument("--proc-stat", metavar="FILE", help="CPU statistics (default /proc/stat)")
    src.add_argument("--meminfo", metavar="FILE", help="memory statistics (default /proc/meminfo)")
    run.add_argument("--tbf-rules", metavar="FILE",
                     help="NRS TBF rules to keep in force on this OSS (iez shares rules --json), applied at "
                          "start and whenever the file changes: lctl set_param on a server, the tree under "
                          "--root on an emulated OSS")
    sec = p.add_argument_group("CURVE authentication and encryption")
    sec.add_argument("--curve-server-key", metavar="FILE", help="the MDS's public key (zmq certificate)")
    sec.add_argument("--curve-secret-key", metavar="FILE", help="this agent's secret key (zmq certificate)")
    return p


def _settings(args: argparse.Namespace) -> dict[str, object]:
    return {
        "oss_id": args.oss_id, "host": args.host, "mds": ",".join(args.mds) if args.mds else None, "interval": args.interval,
        "sndhwm": args.sndhwm, "source": args.source, "lctl_output": args.lctl_output,
        "root": ":".join(args.root) if args.root else None, "lctl": args.lctl, "osts": args.osts,
        "fsname": args.fsname, "proc_stat": args.proc_stat, "meminfo": args.meminfo,
        "curve_server_key": args.curve_server_key, "curve_secret_key": args.curve_secret_key,
    }


def run(cfg: AgentConfig, *, once: bool = False, json_out: bool = False, count: int | None = None,
        tbf_rules: str | None = None) -> int:
    """Collect and publish until stopped (or after ``count`` messages, or once)."""
    from agents.publisher import Publishers  # pyzmq is loaded only when publishing

    if not once and not cfg.mds:
        raise AgentError("no MDS endpoint: give --mds tcp://HOST:PORT (or mds= in the config file), "
                         "or use --once --json to print one message")
    if once and not cfg.mds and not json_out:
        raise AgentError("--once needs --json (print the message) or --mds (publish it)")
    limit = 1 if once else count
    collector = Collector(cfg)
    tbf = None
    if tbf_rules:
        from agents.tbf import TbfRules

        kind = collector.source.kind
        if kind == "file":
            raise AgentError("--tbf-rules needs a live OSS (lctl) or an emulated one (--root), not saved lctl text")
        first = cfg.root.split(":")[0] if kind == "procfs" and cfg.root else ""
        # an emulated OSS's tree takes the rules as files; a server's own /proc or /sys through lctl
        root = first if first and not first.startswith(("/proc/", "/sys/")) else None
        tbf = TbfRules(tbf_rules, cfg.oss_id, root=root, lctl=cfg.lctl or "lctl")
    if cfg.mds:
        collector.read_osts()  # a bad source fails now, before any connection attempt
    stop = threading.Event()
    previous: dict[signal.Signals, signal._HANDLER] = {}  # typeshed's name for what signal.signal returns
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    publisher = None
    finished = False
    try:
        if cfg.mds and cfg.curve:
            _check_key_name(cfg)
        if cfg.mds:
            publisher = Publishers(cfg.endpoints, server_key_file=cfg.curve_server_key,
                                   secret_key_file=cfg.curve_secret_key, sndhwm=cfg.sndhwm, log=_say)
            if not once:
                _say(f"publishing to {cfg.mds} every {cfg.interval:g} s as {cfg.oss_id} "
                     f"(OSTs from {collector.source.kind}{', CURVE' if cfg.curve else ''})")
            wait_s = ONCE_CONNECT_WAIT_S if limit else min(CONNECT_WAIT_S, cfg.interval)
            publisher.wait(wait_s, stop.is_set, until_connected=True)
            if limit and not publisher.connected and not stop.is_set():
                # a PUB socket drops what it cannot deliver: say so instead of exiting 0 having published nothing
                raise AgentError(f"no MDS answered at {cfg.mds} within {wait_s:g} s"
                                 + (f" ({publisher.problem})" if publisher.problem else "")
                                 + ": nothing was published")
        sent = attempts = 0
        next_due = time.monotonic()
        while not stop.is_set():
            attempts += 1
            if tbf is not None:
                tbf.refresh()  # the rules file changed (or this is the start): put its rules in force
            try:
                message = collector.collect()
                data = encode(message)
            except LimitError:
                raise  # the MDS would drop every message from now on: stop loudly (status 2)
            except AgentError as err:
                if attempts == 1:
                    raise  # a setup problem: report it and exit 2
                _say(f"warning: skipped a message: {err}")
                message = None
            if message is not None:
                if json_out:
                    print(json.dumps(message, separators=(",", ":")), flush=True)
                if publisher is not None:
                    for endpoint in publisher.send(data):  # the endpoints that had to drop it
                        publisher.dropped(endpoint)
                    publisher.check_silence(max(SILENT_MIN_S, SILENT_INTERVALS * cfg.interval), SILENT_INTERVALS)
                sent += 1
                if limit and sent >= limit:
                    finished = True
                    break
            next_due += cfg.interval
            now = time.monotonic()
            if next_due < now:  # fell behind (a slow lctl): skip missed beats
                next_due = now
            if publisher is not None:
                publisher.wait(next_due - now, stop.is_set)
            else:
                stop.wait(next_due - now)
    finally:
        if publisher is not None:
            publisher.close(FINAL_LINGER_MS if finished else 0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0


def _check_key_name(cfg: AgentConfig) -> None:
    """Warn when the secret key is named for another OSS: the MDS takes a key's messages only for the OSS its
    public key file is named after (OSS_ID.key, ``iez-agent keys DIR OSS_ID``), so the handshake succeeds and
    every message is dropped (as wrong_key) - on a one-way PUB socket the agent would never hear of it."""
    from pathlib import Path

    if not cfg.curve_secret_key:  # called with CURVE on (cfg.curve), so never
        return
    name = Path(cfg.curve_secret_key).name
    if not name.endswith(".key_secret"):
        return
    key_oss = name[: -len(".key_secret")]
    if key_oss != cfg.oss_id:
        _say(f"warning: the secret key {cfg.curve_secret_key} is named for OSS {key_oss!r} but this agent reports "
             f"as {cfg.oss_id!r}: the MDS takes a key's messages only for the OSS its public key is named after "
             f"({key_oss}.key), so every message would be dropped; give this OSS's own key "
             f"(iez-agent keys DIR {cfg.oss_id}) or --oss-id {key_oss}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["keys"]:
        from agents.keys import main as keys_main
        return keys_main(argv[1:], prog="iez-agent keys")
    try:
        args = build_parser().parse_args(argv)
        if args.count is not None and args.count < 1:
            raise AgentError(f"--count must be at least 1, got {args.count}")
        cfg = resolve(_settings(args), args.config)
        return run(cfg, once=args.once, json_out=args.json, count=args.count, tbf_rules=args.tbf_rules)
    except AgentError as err:
        print(f"iez-agent: error: {err}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
