"""``edge report RUN_DIR``: write report.html with PNG plots into a finished run's folder."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the folder a run wrote results.jsonl / telemetry.jsonl to")
    parser.add_argument("--frames", default="results.jsonl", help="per-frame JSONL inside RUN_DIR (default results.jsonl)")


def main(args: argparse.Namespace) -> int:
    from edge.telemetry.report import write_report  # pulls in matplotlib only when a report is made

    print(write_report(args.run_dir, frames_name=args.frames))
    return 0
