"""jtop: the real jetson-stats client failing because no service runs, `auto` falling back, and the mapping
of jtop's documented data shapes (4.x/7.x) through a fake client."""

from __future__ import annotations

import os
import time

import pytest

from edge.errors import RunFailed
from edge.telemetry.backend import TelemetryUnavailable
from edge.telemetry.jtop_backend import JtopBackend, sample_from_jtop
from edge.telemetry.sampler import open_sampler

try:
    import jtop

    _JTOP_IMPORT_ERROR = None
except ImportError as exc:  # jetson-stats is an optional extra
    jtop = None
    _JTOP_IMPORT_ERROR = str(exc)

needs_jtop = pytest.mark.skipif(
    jtop is None, reason=f"jetson-stats cannot be imported ({_JTOP_IMPORT_ERROR}); pip install jetson-stats"
)


# /etc/nv_tegra_release of JetPack 6.2 (L4T 36.4.3), as the Jetson writes it
JETSON_L4T = "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025\n"


@needs_jtop
def test_real_client_without_service_passes_jtops_advice_on_a_jetson_only(tmp_path):
    """jtop's own message says `sudo jtop --install-service`: right on a Jetson, wrong anywhere else."""
    if os.path.exists("/run/jtop.sock"):
        pytest.skip("a jtop service socket exists here; this test is for machines without one")
    l4t = tmp_path / "nv_tegra_release"
    l4t.write_text(JETSON_L4T)
    backend = JtopBackend(interval_s=0.1, l4t_file=str(l4t))  # the real jtop.jtop class
    with pytest.raises(TelemetryUnavailable, match=r"jtop: The jtop\.service is not active"):
        backend.open()
    backend = JtopBackend(interval_s=0.1, l4t_file=str(tmp_path / "absent"))
    with pytest.raises(TelemetryUnavailable) as info:
        backend.open()
    assert str(info.value) == f"jtop: not a Jetson (no {tmp_path / 'absent'}): jtop's service runs on a Jetson with JetPack"


@needs_jtop
def test_auto_skips_jtop_and_says_why(tmp_path):
    if os.path.exists("/run/jtop.sock"):
        pytest.skip("a jtop service socket exists here; this test is for machines without one")
    l4t = tmp_path / "nv_tegra_release"
    l4t.write_text(JETSON_L4T)
    sampler = open_sampler("auto", 0.1, sysfs_root=tmp_path, l4t_file=str(l4t), tegrastats_cmd=["edge-no-such-tegrastats"])
    try:
        assert sampler.backend_name in ("nvml", "none")
        assert "jtop skipped (jtop: The jtop.service is not active" in sampler.choice_reason
        assert "tegrastats skipped ('edge-no-such-tegrastats' is not on PATH" in sampler.choice_reason
        assert "sysfs skipped (no INA3221 power monitor" in sampler.choice_reason
    finally:
        sampler.stop()


class FakeJtop:
    """The parts of jtop.jtop the backend uses, holding data in the shapes of jetson-stats (core/*.py)."""

    def __init__(self, interval, fail_start=None):
        self.interval_user = interval
        self.interval = 1.0  # another client (an open jtop GUI) set the shared service period
        self.observers = []
        self.fail_start = fail_start
        self.running = False
        self.closed = False
        # What jetson-stats' own PowerService returns (test_telemetry_jetson_stats.py checks it): no 'type' in a rail,
        # 'avg' is its running mean, and the input rail moves from 'rail' to 'tot' with its name.
        self.power = {
            "rail": {
                "VDD_CPU_GPU_CV": {"volt": 5000, "curr": 900, "power": 4500, "online": True, "avg": 4000},
                "VDD_SOC": {"volt": 5000, "curr": 560, "power": 2800, "online": True, "avg": 2700},
            },
            "tot": {"volt": 5000, "curr": 2496, "power": 12480, "online": True, "avg": 11000, "name": "VDD_IN"},
        }
        self.gpu = {
            "gpu": {
                "type": "integrated",
                "status": {"railgate": False, "tpc_pg_mask": False, "3d_scaling": True, "load": 63.0},
                "freq": {"governor": "nvhost_podgov", "cur": 621000, "min": 306000, "max": 624750, "GPC": [621000]},
            }
        }
        self.engine = {
            "APE": {"APE": {"online": True, "cur": 200000}},
            "DLA0": {"DLA0_CORE": {"online": True, "cur": 1600000, "max": 1600000, "min": 0}},
            "DLA1": {"DLA1_CORE": {"online": False, "cur": 0}},
        }
        self.temperature = {
            "cpu": {"online": True, "temp": 53.968},
            "cv0": {"online": False, "temp": -256},
        }
        self.memory = {
            "RAM": {"tot": 7802880, "used": 6333440, "free": 100, "shared": 1000},
            "EMC": {"online": True, "val": 43, "cur": 2133000, "max": 3199000, "min": 204000},
        }
        self.cpu = {
            "total": {"user": 10, "nice": 0, "system": 5, "idle": 85},
            "cpu": [
                {"online": True, "user": 10, "nice": 0, "system": 5, "idle": 85, "freq": {"cur": 729600}},
                {"online": False, "freq": {"cur": 0}},
            ],
        }

    def attach(self, fn):
        self.observers.append(fn)

    def start(self):
        if self.fail_start:
            raise self.fail_start
        self.running = True

    def push(self):  # what jtop's reader thread does on every service update
        for fn in self.observers:
            fn(self)

    def ok(self, spin=False):
        return self.running

    def close(self):
        self.closed = True
        self.running = False


def test_mapping_uses_instantaneous_power_and_named_total():
    s = sample_from_jtop(FakeJtop(0.1))
    assert s.power_mw == {"VDD_CPU_GPU_CV": 4500.0, "VDD_SOC": 2800.0, "VDD_IN": 12480.0}  # not 'avg'
    assert (s.total_mw, s.total_rule) == (12480.0, "VDD_IN")
    assert s.volt_mv["VDD_SOC"] == 5000 and s.curr_ma["VDD_SOC"] == 560
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (63.0, 621.0)
    assert s.dla == {"DLA0": {"online": True, "freq_mhz": 1600.0}, "DLA1": {"online": False, "freq_mhz": None}}
    assert s.temps_c == {"cpu": 53.968, "cv0": None}
    assert s.ram_total_mb == pytest.approx(7620.0) and s.ram_used_mb == pytest.approx(6185.0)
    assert (s.emc_util_pct, s.emc_freq_mhz) == (43.0, 2133.0)
    assert s.cpu_util_pct == [15.0, None] and s.cpu_freq_mhz == [729.6, None]


def test_mapping_sums_rails_when_jtop_has_no_input_rail():
    fake = FakeJtop(0.1)
    fake.power = {
        "rail": {
            "VDD_GPU_SOC": {"online": True, "volt": 5000, "curr": 1200, "power": 6000, "avg": 6000},
            "VDD_CPU_CV": {"online": True, "volt": 5000, "curr": 400, "power": 2000, "avg": 2000},
        },
        "tot": {"power": 8000, "avg": 8000},
    }
    s = sample_from_jtop(fake)
    assert (s.total_mw, s.total_rule) == (8000.0, "sum:VDD_GPU_SOC+VDD_CPU_CV")


def test_backend_reads_updates_records_the_shared_interval_and_closes():
    fake = FakeJtop(0.1)
    backend = JtopBackend(0.1, factory=lambda interval: fake)
    backend.open()
    assert backend.read() is None  # no update yet
    fake.push()
    assert backend.read().total_mw == 12480.0
    assert backend.read() is None  # each update is returned once
    meta = backend.meta()
    assert meta["interval_requested_s"] == 0.1 and meta["interval_service_s"] == 1.0
    fake.running = False  # the service went away
    with pytest.raises(RunFailed, match="jtop stopped"):
        backend.read()
    backend.close()
    assert fake.closed


def test_version_mismatch_from_start_is_unavailable(tmp_path):
    err = Exception("Mismatch version jtop service: [4.2.2] and client: [4.2.1]. Please run:\n\nsudo pip3 install ...")
    l4t = tmp_path / "nv_tegra_release"
    l4t.write_text(JETSON_L4T)
    backend = JtopBackend(0.1, factory=lambda interval: FakeJtop(interval, fail_start=err), l4t_file=str(l4t))
    with pytest.raises(
        TelemetryUnavailable, match=r"Mismatch version jtop service: \[4\.2\.2\] and client: \[4\.2\.1\]\. Please run: sudo"
    ):
        backend.open()


def test_sampler_keeps_going_with_jtop_at_the_service_period():
    fake = FakeJtop(0.01)
    sampler = open_sampler("jtop", 0.01, jtop_factory=lambda interval: fake).start()
    try:
        for _ in range(3):
            fake.push()
            time.sleep(0.05)
    finally:
        sampler.stop()
    assert 1 <= len(sampler.samples()) <= 3 and fake.closed
