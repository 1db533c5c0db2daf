"""``iez shares``: applications' shares of every OSS as Lustre NRS TBF rules (:mod:`iez.shares`).

    iez shares rules --shares FILE --cluster FILE [--json]

prints, per OSS, the ``lctl set_param ost.OSS.ost_io.nrs_tbf_rule="start ..."`` commands that enforce the
shares there (``--json``: the rules, which ``iez-agent --tbf-rules FILE`` applies on each OSS, or writes
into an emulated OSS's tree, where the emulated bandwidth honours them).
"""

from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    parser = subparsers.add_parser("shares", help="applications' shares of the OSSs as Lustre NRS TBF rules")
    actions = parser.add_subparsers(dest="shares_action", metavar="ACTION", required=True)
    rules = actions.add_parser(
        "rules", help="the NRS TBF rules that enforce a shares file on each OSS",
        description="Compute one NRS TBF rule per application per OSS from a shares file (JSON: "
        '{"rpc_size": BYTES, "jobid": "{app}.*", "shares": [{"app": NAME, "share": F} | {"app": NAME, '
        '"weight": W}]}) and each OSS\'s bandwidth in a cluster description: rate = bytes/s over the RPC size. '
        "A share is a cap (fraction of each OSS); weights divide what the caps leave.")
    rules.add_argument("--shares", required=True, metavar="FILE", help="the shares file (JSON)")
    rules.add_argument("--cluster", required=True, metavar="FILE",
                       help="cluster description (JSON, lfs df text, or an emulated ROOT/cluster.json)")
    rules.add_argument("--json", action="store_true",
                       help='print {"rpc_size", "rules": [{"oss", "name", "jobid", "rate", "bytes_per_s"}]}, '
                            "the file iez-agent --tbf-rules reads")
    rules.set_defaults(handler=_rules)


def _rules(args: argparse.Namespace) -> int:
    from iez.shares import load, oss_bandwidths
    from iez.sim.description import load_cluster

    shares = load(args.shares)
    cluster = load_cluster(args.cluster)
    rules = shares.rules(oss_bandwidths(cluster))
    if args.json:
        print(json.dumps({"rpc_size": shares.rpc_size, "rules": [
            {"oss": r.oss, "name": r.name, "jobid": r.jobid, "rate": r.rate, "bytes_per_s": round(r.bytes_per_s)}
            for r in rules]}, indent=1))
        return 0
    current = None
    for r in rules:
        if r.oss != current:
            current = r.oss
            print(f"# on {r.oss}:\nlctl set_param ost.OSS.ost_io.nrs_policies=\"tbf jobid\"")
        print(f"{r.lctl()}   # {r.bytes_per_s / 1048576:.0f} MiB/s")
    return 0
