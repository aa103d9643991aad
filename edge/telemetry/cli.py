"""``edge telemetry parse --tegrastats FILE [--json]`` and ``edge telemetry probe``.

``parse`` prints one line per tegrastats line (power, GPU, DLA), or with ``--json`` a JSON list of samples.
``probe`` says which backends work on this machine and why the others do not, the same reasons ``auto`` logs.
"""

from __future__ import annotations

import argparse
import json
import sys

from edge import argtypes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    parse = sub.add_parser("parse", help="parse a tegrastats log and print the samples")
    parse.add_argument("--tegrastats", required=True, metavar="FILE", help="a log written by tegrastats (--logfile)")
    parse.add_argument("--json", action="store_true", help="print a JSON list of samples instead of a table")
    parse.add_argument(
        "--interval-ms",
        type=argtypes.positive_float,
        default=1000.0,
        help="the log's line period, for t_mono (tegrastats' default: 1000)",
    )
    probe = sub.add_parser("probe", help="say which telemetry backends work here, and why the others do not")
    probe.add_argument("--sysfs-root", default="/sys", help="sysfs mount point (default /sys)")


def main(args: argparse.Namespace) -> int:
    # Imported here so `edge --help` stays instant.
    from edge.errors import EdgeError
    from edge.outputs import strict_json
    from edge.telemetry.sampler import probe_backends
    from edge.telemetry.status import format_status
    from edge.telemetry.tegrastats import iter_file

    if args.action == "parse":
        # Streamed: a 100 MB log prints as it is read, in constant memory (--json writes one JSON list).
        n = 0
        if args.json:
            sys.stdout.write("[")
        for n, s in enumerate(iter_file(args.tegrastats, interval_s=args.interval_ms / 1000.0), 1):
            if args.json:
                sys.stdout.write(("\n" if n == 1 else ",\n") + json.dumps(strict_json(s.to_dict())))
            else:
                ram = f" RAM {s.ram_used_mb:.0f}/{s.ram_total_mb:.0f} MB" if s.ram_total_mb else ""
                print(f"{n - 1:5d} {format_status(s)}{ram}  total={s.total_rule}")
        if args.json:
            sys.stdout.write("\n]\n" if n else "]\n")
        if n == 0:
            raise EdgeError(
                f"{args.tegrastats}: no tegrastats lines (RAM ... CPU [...]); pass a file written by tegrastats --logfile"
            )
        return 0
    for name, why_not in probe_backends(sysfs_root=args.sysfs_root).items():
        print(f"{name:11s} {'ok' if why_not is None else 'no: ' + why_not}")
    return 0
