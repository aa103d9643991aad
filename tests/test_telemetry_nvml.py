"""NVML: a scripted pynvml stand-in, the real pynvml where no driver is loaded, and (GPU machine) a real load."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from edge.telemetry.backend import TelemetryUnavailable
from edge.telemetry.energy import energy_summary
from edge.telemetry.nvml import NvmlBackend


class FakeNvml:
    """The pynvml calls the backend makes, with scripted values and an energy counter that grows."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    NVML_CLOCK_GRAPHICS, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 2, 0

    def __init__(self, power_supported=True):
        self.power_supported = power_supported
        self.energy = 1_000_000
        self.shutdowns = 0

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetName(self, h):
        return b"Fake GPU"

    def nvmlDeviceGetPowerUsage(self, h):
        if not self.power_supported:
            raise self.NVMLError_NotSupported("Not Supported")
        return 250_000

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.energy += 25_000
        return self.energy

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return {0: 1980, 2: 2619}[kind]

    def nvmlDeviceGetTemperature(self, h, sensor):
        raise self.NVMLError_NotSupported("Not Supported")

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=80 * 2**30, used=2 * 2**30, free=78 * 2**30)


def test_reads_every_field_and_tolerates_unsupported_ones():
    nv = FakeNvml()
    backend = NvmlBackend(0, nvml=nv)
    backend.open()
    s = backend.read()
    assert (s.total_mw, s.total_rule, s.power_mw) == (250_000.0, "nvml:GPU", {"GPU": 250_000.0})
    assert s.energy_mj == 1_025_000.0
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (97.0, 1980.0)
    assert s.extras["mem_util_pct"] == 40.0 and s.extras["mem_freq_mhz"] == 2619.0
    assert s.temps_c == {}  # NotSupported -> left out, not 0
    assert s.extras["gpu_mem_used_mb"] == 2048.0
    assert backend.meta() == {"gpu_index": 0, "gpu_name": "Fake GPU"}
    backend.close()
    backend.close()
    assert nv.shutdowns == 1


def test_loaded_but_no_power_is_unavailable_like_on_a_jetson():
    nv = FakeNvml(power_supported=False)
    with pytest.raises(TelemetryUnavailable, match="gives no power reading"):
        NvmlBackend(0, nvml=nv).open()
    assert nv.shutdowns == 1


def test_energy_summary_prefers_the_counter():
    nv = FakeNvml()
    backend = NvmlBackend(0, nvml=nv)
    backend.open()
    samples = []
    for i in range(5):
        s = backend.read()
        s.t_mono = float(i)  # 25 J per second on the counter, 250 W on the power reading
        samples.append(s)
    summary = energy_summary(samples, [(0.0, 4.0)] * 4)
    assert summary["energy_source"] == "nvml_counter"
    assert summary["energy_j"] == pytest.approx(100.0) and summary["energy_trapezoid_j"] == pytest.approx(1000.0)
    assert summary["energy_mj_per_frame"] == pytest.approx(25_000.0)


def test_real_pynvml_without_driver_is_unavailable():
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is loaded here; the GPU test covers this machine")
    with pytest.raises(TelemetryUnavailable, match="nvml: cannot initialise"):
        NvmlBackend(0).open()


@pytest.mark.gpu
def test_real_gpu_under_load_reports_power_energy_and_load():
    torch = pytest.importorskip("torch", reason="the load generator needs torch with CUDA")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU")
    from edge.telemetry.sampler import open_sampler

    sampler = open_sampler("nvml", 0.1).start()
    a = torch.randn(8192, 8192, device="cuda")
    t_start = time.monotonic()
    while time.monotonic() - t_start < 4.0:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    t_end = time.monotonic()
    sampler.stop()
    summary = energy_summary(sampler.samples(), [(t_start, t_end)])
    print("NVML under load:", {k: summary[k] for k in ("power_w", "energy_j", "energy_trapezoid_j", "gpu_load_mean", "samples")})
    assert summary["energy_source"] == "nvml_counter"
    assert summary["power_w"]["mean"] > 50 and summary["gpu_load_mean"] > 50
    # counter and trapezoid agree to within the power reading's 1 s averaging at the edges
    assert summary["energy_j"] == pytest.approx(summary["energy_trapezoid_j"], rel=0.35)
