"""jetson-stats' own code reads the same fake trees as edge's sysfs backend, and the two agree.

No Jetson here, so the trees are built by tests/test_telemetry_sysfs.py; but the second reader is not ours: it is the
installed jetson-stats (``jtop.core.power``, ``jtop.core.gpu``), the code behind jtop's service on a real board. Rail
names and channels follow the device trees NVIDIA upstreamed: AGX Orin ``tegra234-p3701.dtsi`` (1-0040 VDD_GPU_SOC,
VDD_CPU_CV, VIN_SYS_5V0; 1-0041 only VDDQ_VDD2_1V8AO, the other two channels disabled) and Orin NX/Nano ``p3767``
(1-0040 VDD_IN, VDD_CPU_GPU_CV, VDD_SOC; Jon Hunter's 2023 patch "arm64: tegra: Add power-sensors for Tegra234
boards"). The same readers also check ``FakeJtop``: its power dict is what jetson-stats returns, not what we believe.
"""

from __future__ import annotations

import pytest

from edge.telemetry.jtop_backend import sample_from_jtop
from edge.telemetry.sysfs import SysfsBackend
from tests.test_telemetry_jtop import FakeJtop
from tests.test_telemetry_sysfs import _hwmon, _write, agx_orin_tree, nano_jp4_tree

power = pytest.importorskip("jtop.core.power", reason="jetson-stats (the fleet extra) is not installed")
gpu = pytest.importorskip("jtop.core.gpu", reason="jetson-stats (the fleet extra) is not installed")


class _Jtop:
    """What jtop's client receives over its socket: ``power`` from the service's PowerService.get_status()."""

    def __init__(self, root):
        self.service = power.PowerService.__new__(power.PowerService)  # its __init__ reads /sys; the finder takes a root
        self.service._power_sensor = dict(sorted(power.find_all_i2c_power_monitor(str(root / "bus/i2c/devices")).items()))
        self.service._power_avg = {}
        self.power = {}
        self.gpu, self.engine, self.temperature, self.memory, self.cpu = {}, {}, {}, {}, {}

    def read(self):
        self.power = self.service.get_status()
        return self


def _orin_nx_tree(root, mv=(5012, 5012, 5012), ma=(1904, 700, 520)):
    _hwmon(root, "1-0040", 1, {1: ("VDD_IN", mv[0], ma[0]), 2: ("VDD_CPU_GPU_CV", mv[1], ma[1]), 3: ("VDD_SOC", mv[2], ma[2])})


def _agx_orin_upstream_tree(root):
    """AGX Orin as the mainline device tree describes it: no label at all on 1-0041's disabled channels."""
    _hwmon(root, "1-0040", 3, {1: ("VDD_GPU_SOC", 5084, 1187), 2: ("VDD_CPU_CV", 5084, 397), 3: ("VIN_SYS_5V0", 4976, 611)})
    _hwmon(root, "1-0041", 2, {1: (None, 0, 0), 2: ("VDDQ_VDD2_1V8AO", 4992, 113), 3: (None, 0, 0)})


def _rule(rule):
    """A total rule with its summed rails as a set: the order follows discovery (hwmon numbers change by boot)."""
    return (rule[:4], frozenset(rule[4:].split("+"))) if rule.startswith("sum:") else rule


@pytest.mark.parametrize(
    "build, total_rule",
    [
        (agx_orin_tree, "sum:VDD_GPU_SOC+VDD_CPU_CV+VIN_SYS_5V0+VDDQ_VDD2_1V8AO"),  # JetPack 5 'NC' labels
        (_agx_orin_upstream_tree, "sum:VDD_GPU_SOC+VDD_CPU_CV+VIN_SYS_5V0+VDDQ_VDD2_1V8AO"),
        (_orin_nx_tree, "VDD_IN"),
        (nano_jp4_tree, "POM_5V_IN"),
    ],
)
def test_edge_and_jetson_stats_read_the_same_rails_and_total(tmp_path, build, total_rule):
    build(tmp_path)
    backend = SysfsBackend(tmp_path)
    backend.open()
    ours = backend.read()
    theirs = sample_from_jtop(_Jtop(tmp_path).read())
    assert set(ours.power_mw) == set(theirs.power_mw) and len(ours.power_mw) >= 3
    for rail, mw in theirs.power_mw.items():  # jetson-stats truncates V x I to whole mW
        assert ours.power_mw[rail] == pytest.approx(mw, abs=1), rail
    assert _rule(ours.total_rule) == _rule(theirs.total_rule) == _rule(total_rule)
    assert ours.total_mw == pytest.approx(theirs.total_mw, abs=len(ours.power_mw))


def test_a_hwmon_channel_left_out_by_either_reader_is_left_out_by_both(tmp_path):
    """jetson-stats skips 'NC' labels and channel 7 (the sum of shunt voltages); so does edge."""
    agx_orin_tree(tmp_path)
    sensors = power.find_all_i2c_power_monitor(str(tmp_path / "bus/i2c/devices"))
    assert set(sensors) == {"VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"}
    backend = SysfsBackend(tmp_path)
    backend.open()
    assert set(backend.meta()["rails"]) == set(sensors)


def test_edge_picks_the_devfreq_node_jetson_stats_calls_the_gpu(tmp_path):
    agx_orin_tree(tmp_path)  # 17000000.ga10b (the GPU) and 3d00000.host1x (not a GPU) under class/devfreq
    found = gpu.find_igpu(str(tmp_path / "class/devfreq"))
    assert list(found) == ["ga10b"]
    khz = gpu.igpu_read_freq(found["ga10b"]["frq_path"])["cur"]
    backend = SysfsBackend(tmp_path)
    backend.open()
    assert backend.read().gpu_freq_mhz == khz / 1000 == 918.0


def test_fake_jtop_power_is_what_jetson_stats_returns_after_two_reads(tmp_path):
    """FakeJtop's rails (instantaneous power and jtop's running 'avg') come from jetson-stats' own get_status on an
    Orin NX tree read twice: first at lower currents, then at the ones FakeJtop holds."""
    _orin_nx_tree(tmp_path, mv=(5000, 5000, 5000), ma=(1904, 700, 520))
    jtop = _Jtop(tmp_path)
    jtop.read()
    for k, ma in ((1, 2496), (2, 900), (3, 560)):
        _write(tmp_path, f"bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1/curr{k}_input", ma)
    assert jtop.read().power == FakeJtop(0.1).power
