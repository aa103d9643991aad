"""tegrastats: a pure line parser and a backend that runs ``tegrastats --interval <ms>`` as a child process.

The parser handles every layout seen across JetPack 4-7: an optional ``MM-DD-YYYY HH:MM:SS`` prefix, tokens in
any order and present or not (root-only EMC/GR3D clocks and engines), rails as ``cur/avg`` in plain mW, with
``mW`` units, or with a third value, ``GR3D_FREQ`` as ``X%``, ``X%@MHz``, ``X%@[f0,f1]`` or ``@[f,...]``, engines
as ``NAME MHz``/``NAME_FREQ @MHz``/``NAME off`` and, from L4T R36.4, active engines as ``NAME X%@MHz`` (``NVENC
79%@166 ... VIC 36%@115`` on an AGX Orin, R36.4.4: github.com/lesomnus/tegra-exporter, receiver/tegrastatsreceiver
tests), and temperatures with one or two values or ``-256`` (offline). Only the first rail value is used as power;
the second is tegrastats' running average since it started. Older lines give a DLA's clock or ``off`` only; the
R36.4 form also gives its load, kept as ``util_pct``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Set

from edge.errors import EdgeError, RunFailed
from edge.telemetry.backend import Backend, TelemetryUnavailable
from edge.telemetry.sample import Sample, total_power

_DATE = re.compile(r"^\s*(\d\d-\d\d-\d{4} \d\d:\d\d:\d\d)\s+")
_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_SWAP = re.compile(r"\bSWAP (\d+)/(\d+)MB")
_IRAM = re.compile(r"\bIRAM (\d+)/(\d+)kB")
_CPU = re.compile(r"\bCPU \[([^\]]*)\](?:@(\d+))?")
_CPU_CORE = re.compile(r"^(\d+)%(?:@(\d+))?$")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%(?:@(\d+))?")
# GR3D2_FREQ is the second GPU entry early JetPack 5 printed on Orin; Thor prints no percentage at all.
_GR3D = re.compile(r"\bGR3D(2?)_FREQ (?:(\d+)%)?(?:@(?:\[([\d,]+)\]|(\d+)))?")
_ENGINE = re.compile(
    r"\b(APE|VIC|OFA|MSENC|SE|CVNAS|NVENC\d?|NVDEC\d?|NVJPG\d?|PVA\d|NVDLA\d)(?:_FREQ)? (off|(?:(\d+)%@)?@?(\d+))(?=\s|$)"
)
_MTS = re.compile(r"\bMTS fg (\d+)% bg (\d+)%")
_TEMP = re.compile(r"(?<![\w%])([A-Za-z]\w*)@(-?\d+(?:\.\d+)?)C(?:/(-?\d+(?:\.\d+)?)C)?")
# RAM, SWAP and IRAM never match: their second number carries MB or kB.
_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]*) (\d+)(?:mW)?/(\d+)(?:mW)?(?:/(\d+)(?:mW)?)?(?=\s|$)")
_OFFLINE_C = -256.0
# PMIC reports a fixed placeholder temperature (jtop hides it too).
_HIDDEN_TEMPS = {"PMIC"}


def parse_line(line: str, t_mono: float = 0.0, backend: str = "tegrastats") -> Sample:
    """Parse one tegrastats line. ``t_wall`` comes from the date prefix when there is one, else it is 0."""
    date = _DATE.match(line)
    try:
        t_wall = datetime.strptime(date.group(1), "%m-%d-%Y %H:%M:%S").timestamp() if date else 0.0
    except (ValueError, OverflowError, OSError):  # 13-45-2024 25:61:00: a damaged line keeps its readings
        t_wall = 0.0
    s = Sample(t_mono=t_mono, t_wall=t_wall, backend=backend)
    extras: Dict[str, Any] = {}

    m = _RAM.search(line)
    if m:
        s.ram_used_mb, s.ram_total_mb = float(m.group(1)), float(m.group(2))
    m = _SWAP.search(line)
    if m:
        extras["swap_used_mb"], extras["swap_total_mb"] = float(m.group(1)), float(m.group(2))
    m = _IRAM.search(line)
    if m:
        extras["iram_used_kb"], extras["iram_total_kb"] = float(m.group(1)), float(m.group(2))

    m = _CPU.search(line)
    if m:
        shared_freq = float(m.group(2)) if m.group(2) else None  # the old TX1 form: [x%,y%]@MHz
        for core in m.group(1).split(","):
            c = _CPU_CORE.match(core.strip())
            if c is None:  # "off"
                s.cpu_util_pct.append(None)
                s.cpu_freq_mhz.append(None)
            else:
                s.cpu_util_pct.append(float(c.group(1)))
                s.cpu_freq_mhz.append(float(c.group(2)) if c.group(2) else shared_freq)

    m = _EMC.search(line)
    if m:
        s.emc_util_pct = float(m.group(1))
        s.emc_freq_mhz = float(m.group(2)) if m.group(2) else None

    for m in _GR3D.finditer(line):
        util = float(m.group(2)) if m.group(2) else None
        gpcs = [float(f) for f in m.group(3).split(",")] if m.group(3) else []
        freq = max(gpcs) if gpcs else (float(m.group(4)) if m.group(4) else None)
        if m.group(1):
            extras["gpu2_util_pct"], extras["gpu2_freq_mhz"] = util, freq
        else:
            s.gpu_util_pct, s.gpu_freq_mhz = util, freq
            if len(gpcs) > 1:
                extras["gpc_freq_mhz"] = gpcs

    engines: Dict[str, Optional[float]] = {}
    loads: Dict[str, float] = {}
    for m in _ENGINE.finditer(line):
        name = m.group(1)
        engines[name] = None if m.group(2) == "off" else float(m.group(4))
        if m.group(3) is not None:
            loads[name] = float(m.group(3))
    for name, mhz in engines.items():
        if name.startswith("NVDLA"):
            state: Dict[str, Any] = {"online": mhz is not None, "freq_mhz": mhz}
            if name in loads:
                state["util_pct"] = loads[name]
            s.dla["DLA" + name[5:]] = state
    if engines:
        extras["engines_mhz"] = {k: v for k, v in engines.items() if not k.startswith("NVDLA")}
    if any(not k.startswith("NVDLA") for k in loads):
        extras["engines_util_pct"] = {k: v for k, v in loads.items() if not k.startswith("NVDLA")}

    m = _MTS.search(line)
    if m:
        extras["mts_fg_pct"], extras["mts_bg_pct"] = float(m.group(1)), float(m.group(2))

    second_temps: Dict[str, Optional[float]] = {}
    for m in _TEMP.finditer(line):
        name = m.group(1)
        if name in _HIDDEN_TEMPS:
            continue
        s.temps_c[name] = _celsius(m.group(2))
        if m.group(3) is not None:
            second_temps[name] = _celsius(m.group(3))
    if second_temps:
        extras["temps_c_second"] = second_temps

    avg: Dict[str, float] = {}
    third: Dict[str, float] = {}
    for m in _RAIL.finditer(line):
        name = m.group(1)
        s.power_mw[name] = float(m.group(2))
        avg[name] = float(m.group(3))
        if m.group(4) is not None:
            third[name] = float(m.group(4))
    if avg:
        extras["power_avg_mw"] = avg  # kept for reference only: a running average since tegrastats started
    if third:
        extras["power_third_mw"] = third  # meaning unconfirmed (JetPack 7)
    s.total_mw, s.total_rule = total_power(s.power_mw)
    s.extras = extras
    return s


def _celsius(text: str) -> Optional[float]:
    value = float(text)
    return None if value <= _OFFLINE_C else value


class LineParser:
    """Parses a stream of lines, carrying what one line alone cannot tell.

    Older tegrastats prints a DLA token only while the DLA runs, and only as root. Once a DLA has been seen, a
    later line that reports engines (so it is a root line) but not that DLA means the DLA is off.
    """

    def __init__(self, backend: str = "tegrastats") -> None:
        self.backend = backend
        self._seen_dla: Set[str] = set()

    def parse(self, line: str, t_mono: float) -> Sample:
        s = parse_line(line, t_mono=t_mono, backend=self.backend)
        self._seen_dla.update(s.dla)
        if "engines_mhz" in s.extras:
            for name in self._seen_dla - set(s.dla):
                s.dla[name] = {"online": False, "freq_mhz": None}
        return s


def looks_like_tegrastats(line: str) -> bool:
    """Every tegrastats line since L4T 28 carries RAM and CPU; anything else is not one of its lines."""
    return _RAM.search(line) is not None and "CPU [" in line


# A line longer than this is not tegrastats output (real lines are a few hundred characters).
MAX_LINE = 16 * 1024


def parse_lines(lines: Iterable[str], interval_s: float = 1.0) -> Iterator[Sample]:
    """Parse a recorded log; lines that are not tegrastats lines are skipped and line i gets ``t_mono = i * interval_s``."""
    parser = LineParser()
    i = 0
    for line in lines:
        if len(line) <= MAX_LINE and looks_like_tegrastats(line):
            yield parser.parse(line, t_mono=i * interval_s)
            i += 1


def iter_file(path: str | Path, interval_s: float = 1.0) -> Iterator[Sample]:
    """Stream the samples of a tegrastats log file (``tegrastats --logfile``) in constant memory."""
    from edge.inputs import open_regular

    p = Path(path)
    try:
        f = open(open_regular(p), encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise EdgeError(f"tegrastats log '{p}' does not exist; pass a file written by tegrastats --logfile") from None
    except OSError as exc:
        raise EdgeError(f"cannot read tegrastats log '{p}': {exc.strerror}; check the path and its permissions") from None
    with f:
        try:
            yield from parse_lines((line[: MAX_LINE + 1] for line in _bounded_lines(f)), interval_s)
        except OSError as exc:
            raise EdgeError(f"cannot read tegrastats log '{p}': {exc.strerror or exc}") from None


def _bounded_lines(f: Any) -> Iterator[str]:
    """Lines of at most MAX_LINE + 1 characters, however long the file's lines are (a file without newlines)."""
    while True:
        line = f.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE and not line.endswith("\n"):
            while True:  # skip the rest of an overlong line
                rest = f.readline(MAX_LINE)
                if not rest or rest.endswith("\n"):
                    break
        yield line


def parse_file(path: str | Path, interval_s: float = 1.0) -> List[Sample]:
    """All samples of a tegrastats log file; EdgeError when it has none (it is not a tegrastats log)."""
    samples = list(iter_file(path, interval_s))
    if not samples:
        raise EdgeError(f"'{path}' has no tegrastats lines (RAM ... CPU [...]); pass a file written by tegrastats --logfile")
    return samples


class TegrastatsBackend(Backend):
    """Runs tegrastats as a child and parses its stdout on a reader thread; ``read()`` returns the newest line.

    ``cmd`` is injectable so tests can run a stand-in that prints recorded lines.
    """

    name = "tegrastats"

    def __init__(self, interval_s: float = 0.1, cmd: Sequence[str] = ("tegrastats",)) -> None:
        self.interval_s = interval_s
        self.cmd = list(cmd)
        self._proc: Optional[subprocess.Popen[str]] = None
        self._reader: Optional[threading.Thread] = None
        self._latest: Optional[Sample] = None
        self._lines = 0
        self._lock = threading.Lock()

    def open(self) -> None:
        if shutil.which(self.cmd[0]) is None:
            raise TelemetryUnavailable(f"'{self.cmd[0]}' is not on PATH (it ships with JetPack on a Jetson)")
        argv = self.cmd + ["--interval", str(self._interval_ms)]
        try:
            self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        except OSError as exc:
            raise TelemetryUnavailable(f"cannot start {' '.join(argv)}: {exc.strerror}") from None
        self._reader = threading.Thread(target=self._read_stdout, name="tegrastats-reader", daemon=True)
        self._reader.start()

    def _read_stdout(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        parser = LineParser(self.name)
        for line in self._proc.stdout:
            if not line.endswith("\n"):  # a partial last line from a child that was killed mid-write
                break
            if line.strip():
                sample = parser.parse(line, t_mono=time.monotonic())
                sample.t_wall = time.time()
                with self._lock:
                    self._latest = sample
                    self._lines += 1

    def read(self) -> Optional[Sample]:
        with self._lock:
            sample, self._latest = self._latest, None
        if sample is None and self._proc is not None and self._proc.poll() is not None:
            raise RunFailed(f"tegrastats exited with status {self._proc.returncode} after {self._lines} lines")
        return sample

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=2)
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()

    def meta(self) -> Dict[str, Any]:
        return {"cmd": self.cmd, "interval_ms": self._interval_ms}

    @property
    def _interval_ms(self) -> int:
        return max(1, round(self.interval_s * 1000))
