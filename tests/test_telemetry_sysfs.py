"""The real sysfs backend over fake trees built here: an AGX Orin (JetPack 5+ hwmon) and a Nano (JetPack 4 iio).

The trees are fake (no Jetson here) but their names are not ours: the GPU devfreq node and its device-tree name come
from jetson-stats (``jtop/core/gpu.py``: gv11b, gp10b, ga10b, gb10b, gpu; ``/sys/devices/17000000.ga10b`` in its
nvpmodel test data), the DLA devices and their host1x parents from NVIDIA's ``jetson_clocks`` (host1x_get_node:
``platform/13e10000.host1x`` on T194, ``platform/13e40000.host1x`` on T234, ``platform/bus@0/13e00000.host1x``)."""

from __future__ import annotations

import os
import shutil

import pytest

from edge.telemetry.backend import TelemetryUnavailable
from edge.telemetry.sysfs import SysfsBackend


def _write(root, rel, value):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")
    return path


def _hwmon(root, device, number, channels):
    """An ina3221 hwmon under the i2c driver, linked from class/hwmon and bus/i2c/devices like the kernel does. The
    device folder's own ``name`` is ``ina3221`` as on a real AGX Orin (alumet-dev/alumet#212); jetson-stats finds the
    monitor by it. A channel whose label is None is one the device tree disables: the driver writes no label."""
    dev = f"bus/i2c/drivers/ina3221/{device}"
    hw = f"{dev}/hwmon/hwmon{number}"
    _write(root, f"{dev}/name", "ina3221")
    _write(root, f"{hw}/name", "ina3221")
    (root / "bus/i2c/devices").mkdir(parents=True, exist_ok=True)
    os.symlink(root / dev, root / f"bus/i2c/devices/{device}")
    for k, (label, mv, ma) in channels.items():
        if label is not None:
            _write(root, f"{hw}/in{k}_label", label)
        _write(root, f"{hw}/in{k}_input", mv)
        _write(root, f"{hw}/curr{k}_input", ma)
    _write(root, f"{hw}/in7_label", "sum of shunt voltages")
    _write(root, f"{hw}/in7_input", 999)
    (root / "class/hwmon").mkdir(parents=True, exist_ok=True)
    os.symlink(root / hw, root / f"class/hwmon/hwmon{number}")
    return root / hw


T234_JP5 = "devices/platform/13e40000.host1x"


def agx_orin_tree(root, first_hwmon=1, host1x=T234_JP5):
    # A non-INA hwmon that must be ignored even though it sorts first.
    _write(root, "class/hwmon/hwmon0/name", "cpu_thermal")
    _write(root, "class/hwmon/hwmon0/in1_label", "VDD_IN")
    a = _hwmon(
        root,
        "1-0040",
        first_hwmon,
        {1: ("VDD_GPU_SOC", 5000, 1200), 2: ("VDD_CPU_CV", 5000, 400), 3: ("VIN_SYS_5V0", 5000, 600)},
    )
    _hwmon(root, "1-0041", first_hwmon + 1, {1: ("NC", 0, 0), 2: ("VDDQ_VDD2_1V8AO", 5000, 100), 3: ("NC", 0, 0)})
    _write(root, "devices/platform/gpu.0/load", 437)
    _write(root, "class/devfreq/17000000.ga10b/device/of_node/name", "ga10b")
    _write(root, "class/devfreq/17000000.ga10b/cur_freq", 918000000)
    _write(root, "class/devfreq/3d00000.host1x/device/of_node/name", "host1x")
    _write(root, "class/devfreq/3d00000.host1x/cur_freq", 1)
    for i, (kind, milli) in enumerate([("cpu-thermal", 48500), ("gpu-thermal", 47250), ("cv0-thermal", -256000)]):
        _write(root, f"devices/virtual/thermal/thermal_zone{i}/type", kind)
        _write(root, f"devices/virtual/thermal/thermal_zone{i}/temp", milli)
    _write(root, f"{host1x}/15880000.nvdla0/power/runtime_status", "active")
    _write(root, f"{host1x}/15880000.nvdla0/power/runtime_active_time", 1000)
    _write(root, f"{host1x}/158c0000.nvdla1/power/runtime_status", "suspended")
    return a


def test_agx_orin_rails_found_by_label_and_summed(tmp_path):
    agx_orin_tree(tmp_path)
    backend = SysfsBackend(tmp_path)
    backend.open()
    s = backend.read()
    assert s.volt_mv["VDD_GPU_SOC"] == 5000 and s.curr_ma["VDD_GPU_SOC"] == 1200
    assert s.power_mw == {"VDD_GPU_SOC": 6000.0, "VDD_CPU_CV": 2000.0, "VIN_SYS_5V0": 3000.0, "VDDQ_VDD2_1V8AO": 500.0}
    assert "NC" not in s.power_mw  # disabled channels and the in7 sum are not rails
    assert (s.total_mw, s.total_rule) == (11500.0, "sum:VDD_GPU_SOC+VDD_CPU_CV+VIN_SYS_5V0+VDDQ_VDD2_1V8AO")
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (43.7, 918.0)
    assert s.temps_c == {"cpu": 48.5, "gpu": 47.25, "cv0": None}
    assert s.dla["DLA0"]["online"] is True and s.dla["DLA1"] == {"online": False, "freq_mhz": None}
    assert "active_frac" not in s.dla["DLA0"]  # needs two reads


def test_hwmon_number_does_not_matter_and_files_are_reread(tmp_path):
    hw = agx_orin_tree(tmp_path, first_hwmon=7)
    backend = SysfsBackend(tmp_path)
    backend.open()
    assert backend.read().power_mw["VDD_GPU_SOC"] == 6000.0
    (hw / "curr1_input").write_text("2400\n")  # load rises
    (tmp_path / "devices/platform/gpu.0/load").write_text("1000\n")
    active = tmp_path / T234_JP5 / "15880000.nvdla0/power/runtime_active_time"
    active.write_text("1010\n")
    s = backend.read()
    assert s.power_mw["VDD_GPU_SOC"] == 12000.0 and s.total_mw == 17500.0
    assert s.gpu_util_pct == 100.0
    assert 0.0 <= s.dla["DLA0"]["active_frac"] <= 1.0


def test_missing_and_unreadable_files_become_none(tmp_path):
    hw = agx_orin_tree(tmp_path)
    backend = SysfsBackend(tmp_path)
    backend.open()
    (tmp_path / "devices/platform/gpu.0/load").unlink()
    (hw / "curr2_input").unlink()
    s = backend.read()
    assert s.gpu_util_pct is None
    assert "VDD_CPU_CV" not in s.power_mw and s.volt_mv["VDD_CPU_CV"] == 5000
    assert s.total_mw == 9500.0


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied_is_reported(tmp_path):
    agx_orin_tree(tmp_path)
    hw_files = list(tmp_path.glob("bus/i2c/drivers/ina3221/*/hwmon/hwmon*/in[1-3]_input"))
    for f in hw_files:
        f.chmod(0)
    with pytest.raises(TelemetryUnavailable, match="none is readable"):
        SysfsBackend(tmp_path).open()


def nano_jp4_tree(root):
    """A Nano on JetPack 4: the ina3221x driver's iio device, with its own power files."""
    dev = "bus/i2c/drivers/ina3221x/6-0040"
    _write(root, f"{dev}/name", "ina3221x")
    (root / "bus/i2c/devices").mkdir(parents=True, exist_ok=True)
    (root / "bus/i2c/devices/6-0040").symlink_to(root / dev)
    for n, (name, mv, ma, mw) in enumerate(
        [("POM_5V_IN", 5080, 540, 2746), ("POM_5V_GPU", 5080, 31, 159), ("POM_5V_CPU", 5080, 157, 796)]
    ):
        _write(root, f"{dev}/iio:device0/rail_name_{n}", name)
        _write(root, f"{dev}/iio:device0/in_voltage{n}_input", mv)
        _write(root, f"{dev}/iio:device0/in_current{n}_input", ma)
        _write(root, f"{dev}/iio:device0/in_power{n}_input", mw)


def test_nano_jp4_iio_power_files_and_input_rail(tmp_path):
    nano_jp4_tree(tmp_path)
    _write(tmp_path, "devices/gpu.0/load", 70)
    _write(tmp_path, "class/devfreq/57000000.gpu/device/of_node/name", "gpu")
    _write(tmp_path, "class/devfreq/57000000.gpu/cur_freq", 768000000)
    backend = SysfsBackend(tmp_path)
    backend.open()
    s = backend.read()
    assert s.power_mw == {"POM_5V_IN": 2746, "POM_5V_GPU": 159, "POM_5V_CPU": 796}  # the driver's power file
    assert (s.total_mw, s.total_rule) == (2746, "POM_5V_IN")
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (7.0, 768.0)
    assert s.dla == {}
    assert backend.meta()["rails"]["POM_5V_IN"].endswith("iio:device0")


def test_no_power_monitor_is_unavailable_with_reason(tmp_path):
    _write(tmp_path, "class/hwmon/hwmon0/name", "coretemp")
    with pytest.raises(TelemetryUnavailable, match="no INA3221 power monitor"):
        SysfsBackend(tmp_path).open()


@pytest.mark.parametrize(
    "node, of_name, mhz",
    [("17000000.ga10b", "ga10b", 918.0), ("17000000.gv11b", "gv11b", 1377.0), ("17000000.gp10b", "gp10b", 1300.5)],
)
def test_gpu_clock_from_the_devfreq_node_named_after_the_gpu(tmp_path, node, of_name, mhz):
    """Orin, Xavier and TX2 name their GPU's device-tree node ga10b, gv11b, gp10b; none is called "gpu"."""
    agx_orin_tree(tmp_path)
    for f in (tmp_path / "class/devfreq").glob("17000000.*"):
        shutil.rmtree(f)
    (tmp_path / "devices/platform/gpu.0/load").unlink()
    _write(tmp_path, f"class/devfreq/{node}/device/of_node/name", of_name + "\x00")  # device-tree strings end in NUL
    _write(tmp_path, f"class/devfreq/{node}/cur_freq", int(mhz * 1e6))
    _write(tmp_path, f"class/devfreq/{node}/device/load", 512)
    backend = SysfsBackend(tmp_path)
    backend.open()
    s = backend.read()
    assert (s.gpu_freq_mhz, s.gpu_util_pct) == (mhz, 51.2)
    assert backend.meta()["gpu_freq"].endswith(f"{node}/cur_freq")


@pytest.mark.parametrize(
    "host1x",
    ["devices/platform/13e10000.host1x", "devices/platform/13e40000.host1x", "devices/platform/bus@0/13e00000.host1x"],
)
def test_dla_state_under_each_host1x_node_jetson_clocks_knows(tmp_path, host1x):
    agx_orin_tree(tmp_path, host1x=host1x)
    backend = SysfsBackend(tmp_path)
    backend.open()
    s = backend.read()
    assert s.dla["DLA0"]["online"] is True and s.dla["DLA1"]["online"] is False


def test_dla_active_fraction_is_active_ms_over_elapsed_time(tmp_path, monkeypatch):
    """runtime_active_time counts milliseconds (the kernel's runtime-PM accounting); 500 ms more over 1 s of reads is
    half the time active, 1500 ms more over 2 s is 0.75, a counter that did not move is 0, and more than the elapsed
    time (a counter read between two clocks) is capped at 1."""
    from edge.telemetry import sysfs

    agx_orin_tree(tmp_path)
    active = tmp_path / T234_JP5 / "15880000.nvdla0/power/runtime_active_time"
    clock = iter([100.0, 101.0, 103.0, 104.0, 105.0])
    monkeypatch.setattr(sysfs.time, "monotonic", lambda: next(clock))
    backend = SysfsBackend(tmp_path)
    backend.open()
    fracs = []
    for ms in (1000, 1500, 3000, 3000, 6000):
        active.write_text(f"{ms}\n")
        s = backend.read()
        fracs.append(s.dla["DLA0"].get("active_frac"))
    assert fracs == [None, 0.5, 0.75, 0.0, 1.0]
    assert s.t_mono == 105.0  # the sample's time is the read's


def test_the_gpu_is_the_devfreq_node_named_for_it_whatever_sorts_first(tmp_path):
    """jetson-stats' find_igpu rule: a known name, or one containing "gpu" (lower case); other devfreq devices are
    skipped even when they sort first."""
    agx_orin_tree(tmp_path)
    shutil.rmtree(tmp_path / "class/devfreq/17000000.ga10b")
    _write(tmp_path, "class/devfreq/15340000.vic/device/of_node/name", "vic")  # sorts before the GPU
    _write(tmp_path, "class/devfreq/15340000.vic/cur_freq", 115000000)
    _write(tmp_path, "class/devfreq/17000000.nvgpu/device/of_node/name", "NVGPU\x00")
    _write(tmp_path, "class/devfreq/17000000.nvgpu/cur_freq", 624750000)
    backend = SysfsBackend(tmp_path)
    backend.open()
    assert backend.read().gpu_freq_mhz == 624.75
    assert backend.meta()["gpu_freq"] == str(tmp_path / "class/devfreq/17000000.nvgpu/cur_freq")


def test_meta_names_where_each_value_is_read(tmp_path):
    agx_orin_tree(tmp_path)
    backend = SysfsBackend(tmp_path)
    backend.open()
    first, second = str(tmp_path / "class/hwmon/hwmon1"), str(tmp_path / "class/hwmon/hwmon2")  # found through class/
    assert backend.meta() == {
        "root": str(tmp_path),
        "rails": {"VDD_GPU_SOC": first, "VDD_CPU_CV": first, "VIN_SYS_5V0": first, "VDDQ_VDD2_1V8AO": second},
        "gpu_load": str(tmp_path / "devices/platform/gpu.0/load"),
        "gpu_freq": str(tmp_path / "class/devfreq/17000000.ga10b/cur_freq"),
    }
    (tmp_path / "devices/platform/gpu.0/load").unlink()
    shutil.rmtree(tmp_path / "class/devfreq/17000000.ga10b")
    bare = SysfsBackend(tmp_path)
    bare.open()
    assert (bare.meta()["gpu_load"], bare.meta()["gpu_freq"]) == (None, None)
    assert SysfsBackend().root == SysfsBackend("/sys").root  # the kernel's mount point by default


def test_rails_whose_files_are_all_missing_are_named(tmp_path):
    hw = agx_orin_tree(tmp_path)
    for f in tmp_path.glob("bus/i2c/drivers/ina3221/*/hwmon/hwmon*/in[1-3]_input"):
        f.unlink()
    with pytest.raises(TelemetryUnavailable) as err:
        SysfsBackend(tmp_path).open()
    assert str(err.value) == (
        f"INA3221 rails found under {tmp_path} but none is readable (VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0, "
        "VDDQ_VDD2_1V8AO); check permissions"
    )
    assert hw.exists()


def test_no_power_monitor_names_the_reason_in_full(tmp_path):
    with pytest.raises(TelemetryUnavailable) as err:
        SysfsBackend(tmp_path).open()
    assert str(err.value) == (
        f"no INA3221 power monitor under {tmp_path} (no hwmon named ina3221, no ina3221x device); this is not a Jetson "
        "module with power monitors"
    )


def test_thermal_zone_names_as_tegrastats_prints_them(tmp_path):
    """Xavier on JetPack 4 names zones like Tboard_tegra and Tdiode_tegra, printed by tegrastats as Tboard@ and Tdiode@
    (the AGX Xavier line in test_telemetry_tegrastats); jetson-stats cuts a zone's type at its first "-", else "_"."""
    agx_orin_tree(tmp_path)
    for i, kind in enumerate(["Tboard_tegra", "Tdiode_tegra", "AO-therm"], start=3):
        _write(tmp_path, f"devices/virtual/thermal/thermal_zone{i}/type", kind)
        _write(tmp_path, f"devices/virtual/thermal/thermal_zone{i}/temp", 31000 + i)
    backend = SysfsBackend(tmp_path)
    backend.open()
    temps = backend.read().temps_c
    assert (temps["Tboard"], temps["Tdiode"], temps["AO"]) == (31.003, 31.004, 31.005)


def test_a_dla_seen_under_two_host1x_paths_is_one_dla(tmp_path):
    """The JetPack 5 and 6 paths of the host1x node may both exist (one a link to the other): DLA0 is read once."""
    agx_orin_tree(tmp_path)
    jp6 = tmp_path / "devices/platform/bus@0/13e00000.host1x"
    jp6.parent.mkdir(parents=True)
    jp6.symlink_to(tmp_path / T234_JP5)
    backend = SysfsBackend(tmp_path)
    backend.open()
    assert [name for name, _ in backend._dlas] == ["DLA0", "DLA1"]


def test_jetpack_4_channels_without_a_rail_are_skipped(tmp_path):
    nano_jp4_tree(tmp_path)
    dev = tmp_path / "bus/i2c/drivers/ina3221x/6-0040/iio:device0"
    (dev / "rail_name_2").write_text("NC\n")
    backend = SysfsBackend(tmp_path)
    backend.open()
    assert list(backend.read().power_mw) == ["POM_5V_IN", "POM_5V_GPU"]
    (dev / "rail_name_1").unlink()
    backend = SysfsBackend(tmp_path)
    backend.open()
    assert list(backend.read().power_mw) == ["POM_5V_IN"]
