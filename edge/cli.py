"""`edge <command>` and the named entry points (`edge-run`).

Each command lives in its own module with ``add_arguments(parser)`` and ``main(args) -> int``; those
modules import nothing heavy at the top, so ``--help`` is instant. An ``EdgeError`` becomes one line on
stderr and its exit status (2 for bad input); no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import NoReturn

from edge import __version__, stoppable
from edge.errors import LEVELS, guard, one_line, setup_logging

# name -> (module, one-line help). A command is a module; adding one is a row here.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("edge.runtime.cli", "run the camera pipeline: source -> preprocess -> infer -> postprocess -> sinks"),
    "build": ("edge.builder.cli", "build a TensorRT engine (GPU or DLA, FP16/INT8) with its manifest and placement report"),
    "assets": ("edge.assets", "list or fetch the pinned demo and benchmark models and clips"),
    "calib": (
        "edge.calib.cli",
        "INT8 calibration with ONNX Runtime: TensorRT calibration cache, Q/DQ ONNX, accuracy report",
    ),
    "dla": ("edge.dla.cli", "predict DLA vs GPU placement of an ONNX model, offline (no Jetson needed)"),
    "deploy": (
        "edge.deploy.cli",
        "copy an engine, its manifest and a config to a Jetson over SSH: verify, swap, restart, roll back",
    ),
    "service": ("edge.deploy.service", "install and enable the edge-camera@NAME systemd service"),
    "telemetry": ("edge.telemetry.cli", "parse tegrastats logs and probe which telemetry backends work here"),
    "report": ("edge.telemetry.report_cli", "write report.html with PNG plots for a finished run folder"),
    "doctor": (
        "edge.doctor",
        "check a Jetson: JetPack, TensorRT, CUDA, a tiny engine on the GPU and each DLA, telemetry, cameras, services",
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line (the usage is one --help away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    """`edge` with every command as a subparser (the docs test parses the documented commands with it)."""
    top = _Parser(prog="edge", description="Vision models on NVIDIA Jetson with TensorRT and the DLA.")
    top.add_argument("--version", action="version", version=f"edge {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        mod = importlib.import_module(module)
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod.add_arguments(p)
        _add_log_level(p)
        p.set_defaults(_main=mod.main, _prog=f"edge {name}")
    return top


def entry_parser(command: str, prog: str) -> argparse.ArgumentParser:
    """The parser of a named entry point (`edge-run` is `edge run`)."""
    module, help_text = COMMANDS[command]
    mod = importlib.import_module(module)
    p = _Parser(prog=prog, description=help_text)
    p.add_argument("--version", action="version", version=f"{prog} (edge) {__version__}")
    mod.add_arguments(p)
    _add_log_level(p)
    p.set_defaults(_main=mod.main, _prog=prog)
    return p


def _add_log_level(p: argparse.ArgumentParser) -> None:
    """Every command takes --log-level (the guard's "run with --log-level debug" must always work)."""
    if "--log-level" not in p._option_string_actions:
        p.add_argument("--log-level", choices=LEVELS, default="info", help="how much to log (debug shows tracebacks)")


def _run(args: argparse.Namespace) -> int:
    setup_logging(args._prog.replace(" ", "-"), getattr(args, "log_level", None))
    return stoppable.finish(guard(args._prog, args._main, args))


def _escaping_output() -> None:
    """Text that cannot be encoded (a file name holding non-UTF-8 bytes, under a strict UTF-8 stdout) prints escaped
    instead of ending the run with UnicodeEncodeError after its work is done."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    _escaping_output()
    return _run(parser().parse_args(argv))


def _entry(command: str, prog: str) -> Callable[[list[str] | None], int]:
    def run(argv: list[str] | None = None) -> int:
        _escaping_output()
        return _run(entry_parser(command, prog).parse_args(argv))

    return run


run_main = _entry("run", "edge-run")
build_main = _entry("build", "edge-build")

if __name__ == "__main__":
    sys.exit(main())
