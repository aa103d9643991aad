"""The tegrastats parser over the real lines in the reference, variants built from them, the child-process
backend against a stand-in that prints those lines, replay of a log, and `edge telemetry parse`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime

import pytest

from edge.errors import EdgeError, RunFailed
from edge.telemetry import cli as telemetry_cli
from edge.telemetry.replay import ReplayBackend
from edge.telemetry.tegrastats import MAX_LINE, LineParser, TegrastatsBackend, iter_file, parse_file, parse_line, parse_lines

# Verbatim from the research note shared/reference/telemetry.md, section 2.2 (L1-L3, L5-L7).
L1_AGX_XAVIER_JP4 = "RAM 14700/15692MB (lfb 3x2MB) SWAP 898/8192MB (cached 23MB) CPU [0%@1190,0%@1190,0%@1190,0%@1190,0%@1190,0%@1190,0%@1190,0%@1190] EMC_FREQ 0% GR3D_FREQ 0% AO@30C GPU@30.5C Tboard@31C Tdiode@32C AUX@30.5C CPU@31.5C thermal@30.8C PMIC@100C GPU 463/463 CPU 618/618 SOC 2936/2936 CV 0/0 VDDRQ 309/309 SYS5V 3306/3306"
L2_NANO_JP4 = "RAM 1464/3964MB (lfb 214x4MB) SWAP 0/1982MB (cached 0MB) IRAM 0/252kB(lfb 252kB) CPU [90%@1479,16%@1479,0%@1479,9%@1479] EMC_FREQ 6%@1600 GR3D_FREQ 7%@768 APE 25 PLL@28C CPU@32C PMIC@50C GPU@28.5C AO@37C thermal@30.25C POM_5V_IN 2746/2911 POM_5V_GPU 159/161 POM_5V_CPU 796/989"
L3_NANO_JP4 = "RAM 1464/3964MB (lfb 214x4MB) SWAP 0/1982MB (cached 0MB) IRAM 0/252kB(lfb 252kB) CPU [0%@1479,20%@1479,80%@1479,9%@1479] EMC_FREQ 6%@1600 GR3D_FREQ 0%@768 APE 25 PLL@28C CPU@32C PMIC@50C GPU@29C AO@36.5C thermal@30.25C POM_5V_IN 2980/2911 POM_5V_GPU 238/162 POM_5V_CPU 912/989"
L5_ORIN_NANO_JP6_ROOT = "11-15-2024 08:38:09 RAM 6185/7620MB (lfb 8x2MB) SWAP 851/3810MB (cached 1MB) CPU [15%@729,11%@729,14%@729,13%@729,11%@729,8%@729] EMC_FREQ 43%@2133 GR3D_FREQ 63%@[621] NVDEC off NVJPG off NVJPG1 off VIC off OFA off APE 200 cpu@53.968C soc2@52.437C soc0@50.75C gpu@53.343C tj@53.968C soc1@51.656C VDD_IN 12479mW/12479mW VDD_CPU_GPU_CV 4667mW/4667mW VDD_SOC 2817mW/2817mW"
L6_ORIN_NANO_JP6_USER = "06-18-2025 11:25:24 RAM 3452/7620MB (lfb 25x4MB) SWAP 1518/16384MB (cached 174MB) CPU [1%@1420,2%@1420,0%@1420,2%@1420,2%@729,1%@729] GR3D_FREQ 0% cpu@50.031C soc2@49.031C soc0@50C gpu@49.031C tj@50.25C soc1@50.25C VDD_IN 4824mW/4824mW VDD_CPU_GPU_CV 518mW/518mW VDD_SOC 1475mW/1475mW"
L7_TX2_JP4 = "RAM 3276/7859MB (lfb 5x4MB) SWAP 1626/12122MB (cached 181MB) CPU [44%@1421,49%@2031,67%@2034,17%@1420,25%@1419,8%@1420] EMC_FREQ 1%@1866 GR3D_FREQ 0%@114 APE 150 MTS fg 1% bg 1% PLL@42.5C MCPU@42.5C PMIC@50C Tboard@38C GPU@39.5C BCPU@42.5C thermal@41.3C Tdiode@39.25C VDD_SYS_GPU 182/182 VDD_SYS_SOC 730/730 VDD_4V0_WIFI 0/0 VDD_IN 5297/5297 VDD_SYS_CPU 1917/1917 VDD_SYS_DDR 1241/1241"
REAL_LINES = [L1_AGX_XAVIER_JP4, L2_NANO_JP4, L3_NANO_JP4, L5_ORIN_NANO_JP6_ROOT, L6_ORIN_NANO_JP6_USER, L7_TX2_JP4]


def test_agx_xavier_jp4_not_root_sums_all_rails():
    s = parse_line(L1_AGX_XAVIER_JP4)
    assert s.power_mw == {"GPU": 463, "CPU": 618, "SOC": 2936, "CV": 0, "VDDRQ": 309, "SYS5V": 3306}
    assert s.total_mw == 463 + 618 + 2936 + 0 + 309 + 3306 == 7632
    assert s.total_rule == "sum:GPU+CPU+SOC+CV+VDDRQ+SYS5V"
    assert (s.ram_used_mb, s.ram_total_mb) == (14700, 15692)
    assert s.cpu_util_pct == [0.0] * 8 and s.cpu_freq_mhz == [1190.0] * 8
    assert (s.emc_util_pct, s.emc_freq_mhz) == (0, None)  # not root: no @MHz
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (0, None)
    assert s.temps_c == {"AO": 30, "GPU": 30.5, "Tboard": 31, "Tdiode": 32, "AUX": 30.5, "CPU": 31.5, "thermal": 30.8}
    assert "PMIC" not in s.temps_c  # a fixed placeholder
    assert s.extras["swap_used_mb"] == 898 and s.extras["swap_total_mb"] == 8192
    assert s.dla == {} and "engines_mhz" not in s.extras


@pytest.mark.parametrize(
    "line, cpu, gpu_pct, in_mw, gpu_mw, cpu_mw, avg_in, temp_gpu, temp_ao",
    [
        (L2_NANO_JP4, [90, 16, 0, 9], 7, 2746, 159, 796, 2911, 28.5, 37),
        (L3_NANO_JP4, [0, 20, 80, 9], 0, 2980, 238, 912, 2911, 29, 36.5),
    ],
)
def test_nano_jp4_root_uses_the_input_rail(line, cpu, gpu_pct, in_mw, gpu_mw, cpu_mw, avg_in, temp_gpu, temp_ao):
    s = parse_line(line)
    assert s.power_mw == {"POM_5V_IN": in_mw, "POM_5V_GPU": gpu_mw, "POM_5V_CPU": cpu_mw}
    assert (s.total_mw, s.total_rule) == (in_mw, "POM_5V_IN")  # GPU and CPU are inside POM_5V_IN
    assert s.extras["power_avg_mw"]["POM_5V_IN"] == avg_in  # kept, never used as power
    assert s.cpu_util_pct == cpu and s.cpu_freq_mhz == [1479] * 4
    assert (s.emc_util_pct, s.emc_freq_mhz) == (6, 1600)
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (gpu_pct, 768)
    assert (s.extras["iram_used_kb"], s.extras["iram_total_kb"]) == (0, 252)
    assert s.extras["engines_mhz"] == {"APE": 25}
    assert s.temps_c["GPU"] == temp_gpu and s.temps_c["AO"] == temp_ao and s.temps_c["thermal"] == 30.25
    assert (s.ram_used_mb, s.ram_total_mb) == (1464, 3964)


def test_orin_nano_jp6_root_array_gr3d_off_engines_lowercase_temps_mw_rails():
    s = parse_line(L5_ORIN_NANO_JP6_ROOT)
    assert s.t_wall == datetime(2024, 11, 15, 8, 38, 9).timestamp()
    assert s.power_mw == {"VDD_IN": 12479, "VDD_CPU_GPU_CV": 4667, "VDD_SOC": 2817}
    assert (s.total_mw, s.total_rule) == (12479, "VDD_IN")
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (63, 621)
    assert (s.emc_util_pct, s.emc_freq_mhz) == (43, 2133)
    assert s.cpu_util_pct == [15, 11, 14, 13, 11, 8] and s.cpu_freq_mhz == [729] * 6
    assert s.extras["engines_mhz"] == {"NVDEC": None, "NVJPG": None, "NVJPG1": None, "VIC": None, "OFA": None, "APE": 200}
    assert s.temps_c == {"cpu": 53.968, "soc2": 52.437, "soc0": 50.75, "gpu": 53.343, "tj": 53.968, "soc1": 51.656}
    assert (s.ram_used_mb, s.ram_total_mb) == (6185, 7620)


def test_orin_nano_jp6_not_root_has_no_emc_and_plain_gr3d():
    s = parse_line(L6_ORIN_NANO_JP6_USER)
    assert s.t_wall == datetime(2025, 6, 18, 11, 25, 24).timestamp()
    assert (s.total_mw, s.total_rule) == (4824, "VDD_IN")
    assert s.power_mw["VDD_CPU_GPU_CV"] == 518 and s.power_mw["VDD_SOC"] == 1475
    assert (s.emc_util_pct, s.emc_freq_mhz) == (None, None)  # missing, not 0
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (0, None)
    assert s.cpu_freq_mhz == [1420, 1420, 1420, 1420, 729, 729]
    assert s.temps_c["soc0"] == 50 and s.temps_c["tj"] == 50.25


def test_tx2_jp4_input_rail_among_six_and_mts():
    s = parse_line(L7_TX2_JP4)
    assert len(s.power_mw) == 6 and s.power_mw["VDD_4V0_WIFI"] == 0 and s.power_mw["VDD_SYS_DDR"] == 1241
    assert (s.total_mw, s.total_rule) == (5297, "VDD_IN")
    assert s.cpu_freq_mhz == [1421, 2031, 2034, 1420, 1419, 1420]
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (0, 114)
    assert (s.extras["mts_fg_pct"], s.extras["mts_bg_pct"]) == (1, 1)
    assert s.temps_c["BCPU"] == 42.5 and s.temps_c["Tdiode"] == 39.25


# Variants of the real lines for the forms the reference describes but has no verbatim capture of.
def test_three_value_rails_and_two_value_temps():
    line = L5_ORIN_NANO_JP6_ROOT.replace("12479mW/12479mW", "12479mW/12000mW/13001mW").replace("cpu@53.968C", "cpu@53.968C/52.5C")
    s = parse_line(line)
    assert s.total_mw == 12479
    assert s.extras["power_third_mw"] == {"VDD_IN": 13001}
    assert s.temps_c["cpu"] == 53.968 and s.extras["temps_c_second"] == {"cpu": 52.5}


def test_per_gpc_clocks_thor_form_and_gr3d2():
    s = parse_line(L5_ORIN_NANO_JP6_ROOT.replace("63%@[621]", "63%@[612,624]"))
    assert (s.gpu_util_pct, s.gpu_freq_mhz, s.extras["gpc_freq_mhz"]) == (63, 624, [612, 624])
    s = parse_line(L5_ORIN_NANO_JP6_ROOT.replace("GR3D_FREQ 63%@[621]", "GR3D_FREQ @[1575,1575,1575]"))
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (None, 1575)
    s = parse_line(L5_ORIN_NANO_JP6_ROOT.replace("GR3D_FREQ 63%@[621]", "GR3D_FREQ 63%@621 GR3D2_FREQ 12%@306"))
    assert (s.gpu_util_pct, s.gpu_freq_mhz, s.extras["gpu2_util_pct"], s.extras["gpu2_freq_mhz"]) == (63, 621, 12, 306)


def test_dla_tokens_old_and_new_forms_and_tracking_across_lines():
    busy = L5_ORIN_NANO_JP6_ROOT.replace("APE 200", "APE 200 NVDLA0_FREQ @1600 NVENC 716 VIC_FREQ 115")
    s = parse_line(busy)
    assert s.dla == {"DLA0": {"online": True, "freq_mhz": 1600}}
    assert s.extras["engines_mhz"]["NVENC"] == 716
    s = parse_line(L5_ORIN_NANO_JP6_ROOT.replace("APE 200", "APE 200 NVDLA0 off NVDLA1 off PVA0_FREQ off"))
    assert s.dla == {"DLA0": {"online": False, "freq_mhz": None}, "DLA1": {"online": False, "freq_mhz": None}}
    # Older tegrastats drops the token when the DLA stops: after it was seen, a root line without it means off.
    parser = LineParser()
    assert parser.parse(busy, 0.0).dla["DLA0"]["online"] is True
    assert parser.parse(L5_ORIN_NANO_JP6_ROOT, 1.0).dla["DLA0"] == {"online": False, "freq_mhz": None}
    assert parser.parse(L6_ORIN_NANO_JP6_USER, 2.0).dla == {}  # a non-root line reports no engines: unknown


def test_offline_sensor_missing_mw_reordered_and_truncated():
    s = parse_line(L6_ORIN_NANO_JP6_USER.replace("soc1@50.25C", "soc1@-256C"))
    assert s.temps_c["soc1"] is None
    s = parse_line(L6_ORIN_NANO_JP6_USER.replace("mW", ""))
    assert s.power_mw == {"VDD_IN": 4824, "VDD_CPU_GPU_CV": 518, "VDD_SOC": 1475}
    tokens = L7_TX2_JP4.split(" VDD_SYS_GPU")
    s = parse_line("VDD_SYS_GPU" + tokens[1] + " " + tokens[0])
    assert (s.total_mw, s.gpu_freq_mhz, s.ram_used_mb) == (5297, 114, 3276)
    s = parse_line(L2_NANO_JP4[: L2_NANO_JP4.index(" POM_5V_IN")])
    assert (s.total_mw, s.total_rule, s.power_mw) == (None, None, {})
    assert s.gpu_util_pct == 7
    s = parse_line("RAM 1464/3964MB (lfb 214x4MB) SWAP 0/1982MB (cached 0MB) CPU [off,16%@1479,off,9%@1479]")
    assert s.cpu_util_pct == [None, 16, None, 9] and s.cpu_freq_mhz == [None, 1479, None, 1479]
    s = parse_line("RAM 1464/3964MB (lfb 214x4MB) CPU [5%,6%]@1734 EMC_FREQ 1%")
    assert s.cpu_util_pct == [5, 6] and s.cpu_freq_mhz == [1734, 1734]


def test_parse_file_skips_blank_lines_and_stamps_interval(tmp_path):
    log = tmp_path / "tegrastats.log"
    log.write_text("\n".join(REAL_LINES[:3]) + "\n\n" + L7_TX2_JP4 + "\n")
    samples = parse_file(log, interval_s=0.5)
    assert [s.t_mono for s in samples] == [0.0, 0.5, 1.0, 1.5]
    assert [s.total_mw for s in samples] == [7632, 2746, 2980, 5297]


def test_missing_log_is_a_one_line_edge_error(tmp_path):
    with pytest.raises(EdgeError, match=r"tegrastats log '.*nope.log' does not exist"):
        parse_file(tmp_path / "nope.log")
    (tmp_path / "logs").mkdir()
    with pytest.raises(EdgeError, match=r"^cannot read tegrastats log '.*logs': not a regular file \(a folder\); check"):
        parse_file(tmp_path / "logs")


def test_a_line_at_the_length_limit_is_read_whole_and_an_overlong_one_skipped_to_its_end(tmp_path):
    """Lines of up to MAX_LINE characters (newline included) are parsed whole; a longer one is skipped, also when it
    has no newline for MAX_LINE characters and what follows it on the same line looks like a tegrastats line."""
    head, rails = L7_TX2_JP4.split(" VDD_SYS_GPU")
    whole = parse_line(L7_TX2_JP4)

    def padded(length):  # spaces between two tokens, the last rail (VDD_SYS_DDR) kept at the end
        pad = length - 1 - len(L7_TX2_JP4)
        return head + " " * (pad + 1) + "VDD_SYS_GPU" + rails + "\n"

    log = tmp_path / "t.log"
    for length, totals in ((MAX_LINE, [whole.total_mw]), (MAX_LINE + 1, [])):
        line = padded(length)
        assert len(line) == length
        log.write_text(line + L2_NANO_JP4 + "\n")
        samples = list(iter_file(log))
        assert [s.total_mw for s in samples] == totals + [2746]
        if totals:
            assert samples[0].power_mw == whole.power_mw  # nothing cut off the end
    log.write_text("x" * (MAX_LINE + 5) + " " + L1_AGX_XAVIER_JP4 + "\n" + L7_TX2_JP4 + "\n")
    assert [s.total_mw for s in iter_file(log)] == [5297]
    assert [s.total_mw for s in parse_lines([" " + L1_AGX_XAVIER_JP4])] == [7632]  # the tail alone is a line


def test_a_recorded_log_is_stamped_one_second_a_line_by_default():
    assert [s.t_mono for s in parse_lines(REAL_LINES[:3])] == [0.0, 1.0, 2.0]


def test_parse_line_defaults_and_the_date_prefix():
    s = parse_line(L5_ORIN_NANO_JP6_ROOT)
    assert (s.t_mono, s.backend) == (0.0, "tegrastats")
    assert s.t_wall == datetime(2024, 11, 15, 8, 38, 9).timestamp()
    assert parse_line(L1_AGX_XAVIER_JP4).t_wall == 0.0  # JetPack 4 prints no date
    for line in REAL_LINES:  # RAM 14700/15692MB and the like are memory, never a power rail
        assert not {"RAM", "SWAP", "IRAM"} & set(parse_line(line).power_mw)


def test_cli_parse_json_prints_every_sample(tmp_path, capsys):
    log = tmp_path / "t.log"
    log.write_text("\n".join(REAL_LINES) + "\n")
    parser = argparse.ArgumentParser()
    telemetry_cli.add_arguments(parser)
    assert telemetry_cli.main(parser.parse_args(["parse", "--tegrastats", str(log), "--json"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert [d["total_mw"] for d in out] == [7632, 2746, 2980, 12479, 4824, 5297]
    assert out[3]["gpu_util_pct"] == 63 and out[3]["total_rule"] == "VDD_IN"
    assert telemetry_cli.main(parser.parse_args(["parse", "--tegrastats", str(log)])) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 6 and "12.5 W GPU 63%" in table[3]


# Takes its interval the way tegrastats does (`--interval <ms>`, its only form in NVIDIA's Jetson Linux guide) and
# refuses anything else, as a real tool would; writes to stderr, which must not reach edge-run's console.
FAKE_TEGRASTATS = """
import sys, time
if sys.argv[3:4] != ["--interval"] or not sys.argv[4:5] or not sys.argv[4].isdigit():
    sys.stderr.write("usage: tegrastats --interval <millisec>\\n")
    sys.exit(2)
sys.stderr.write("stand-in tegrastats: a warning on stderr\\n")
sys.stderr.flush()
lines = open(sys.argv[1]).read().splitlines()
for line in lines:
    print(line, flush=True)
    time.sleep(int(sys.argv[4]) / 1000)
sys.stdout.write("RAM 1/2MB partial line with no newline")
sys.stdout.flush()
sys.exit(int(sys.argv[2]))
"""


def _stand_in(tmp_path, lines, rc=0):
    log = tmp_path / "recorded.log"
    log.write_text("\n".join(lines) + "\n")
    script = tmp_path / "fake_tegrastats.py"
    script.write_text(FAKE_TEGRASTATS)
    return [sys.executable, str(script), str(log), str(rc)]


def test_backend_reads_a_stand_in_process_until_it_exits(tmp_path, capfd):
    backend = TegrastatsBackend(interval_s=0.02, cmd=_stand_in(tmp_path, REAL_LINES, rc=3))
    backend.open()
    totals = []
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            try:
                s = backend.read()
            except RunFailed as exc:
                assert "status 3 after 6 lines" in str(exc)  # the partial last line was not counted
                break
            if s is not None:
                assert s.backend == "tegrastats" and abs(s.t_mono - time.monotonic()) < 5
                totals.append(s.total_mw)
            time.sleep(0.005)
        else:
            pytest.fail("the stand-in never exited")
    finally:
        backend.close()
    assert totals and set(totals) <= {7632, 2746, 2980, 12479, 4824, 5297} and totals[-1] == 5297
    assert backend.meta()["interval_ms"] == 20
    assert "stand-in tegrastats" not in capfd.readouterr().err  # the child's stderr goes nowhere


def test_backend_close_stops_a_running_child(tmp_path):
    """close() ends a tegrastats that would print for 120 s more, by SIGTERM (SIGKILL only after 2 s)."""
    import signal

    backend = TegrastatsBackend(interval_s=0.1, cmd=_stand_in(tmp_path, REAL_LINES * 200))
    backend.open()
    deadline = time.monotonic() + 10
    while backend.read() is None:  # running and printing
        assert time.monotonic() < deadline, "the stand-in printed nothing"
        time.sleep(0.02)
    backend.close()
    assert backend._proc.returncode == -signal.SIGTERM  # not -SIGKILL: it ended within the 2 s SIGTERM allows
    # Nothing left behind: the reader thread has ended and the pipe is closed (no descriptor leaks per restart).
    assert not backend._reader.is_alive() and backend._proc.stdout.closed


def test_replay_of_a_tegrastats_log(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("\n".join(REAL_LINES) + "\n")
    backend = ReplayBackend(log)
    backend.open()
    got = [backend.read() for _ in range(7)]
    assert [s.total_mw for s in got[:6]] == [7632, 2746, 2980, 12479, 4824, 5297] and got[6] is None
    assert got[0].backend == "replay:tegrastats" and got[5].extras["t_recorded"] == 5.0


# Verbatim from an AGX Orin on L4T R36.4.4 (JetPack 6.2), in the tests of github.com/lesomnus/tegra-exporter
# (receiver/tegrastatsreceiver): active engines print as NAME X%@MHz.
L8_AGX_ORIN_R36_4_4 = "05-09-2026 18:42:06 RAM 18207/62841MB (lfb 466x4MB) SWAP 86/31420MB (cached 0MB) CPU [14%@2188,5%@2112,8%@2035,14%@2201,46%@1267,47%@1267,2%@1267,10%@1267,4%@1036,5%@1036,6%@1036,10%@1036] EMC_FREQ 3%@2133 GR3D_FREQ 0%@[0,0] NVENC 79%@166 NVDEC off NVJPG off NVJPG1 off VIC 36%@115 OFA off NVDLA0 off NVDLA1 off PVA0_FREQ off APE 174 cpu@52.562C soc2@48.437C soc0@49.093C tj@52.562C soc1@49.656C VDD_GPU_SOC 2412mW/2412mW VDD_CPU_CV 1607mW/1607mW VIN_SYS_5V0 4707mW/4707mW"
# Verbatim from an AGX Orin on JetPack 7.2 (L4T R39.2), jetson-stats' jtop/tests/test_06_tegra_parse.py.
L9_AGX_ORIN_JP7 = "07-25-2026 09:08:28 RAM 20642/62817MB (lfb 1x2MB) CPU [23%@2201,10%@2201,4%@2201,14%@2201,30%@2201,18%@2201,10%@2201,10%@2201,33%@2201,7%@2201,5%@2201,27%@2201] EMC_FREQ 3%@3199 GR3D_FREQ 12%@[1300,1300] NVENC0 off NVDEC0 off NVJPG0 off NVJPG1 off VIC off OFA off NVDLA0 off NVDLA1 off PVA0_FREQ off APE 174 cpu@52.968C/52.968C soc2@48.406C/48.406C soc0@49.531C/49.531C gpu@47.625C/47.625C VDD_GPU_SOC 5139mW/5139mW/5139mW VDD_CPU_CV 3268mW/3268mW/3268mW VIN_SYS_5V0 5500mW/5500mW/5500mW"


def test_r36_4_active_engines_as_load_at_clock():
    """tegra-exporter's own expectations for this line: VIC 36 % at 115 MHz, NVENC 79 % at 166 MHz, APE 174."""
    s = parse_line(L8_AGX_ORIN_R36_4_4)
    assert s.extras["engines_mhz"]["VIC"] == 115 and s.extras["engines_mhz"]["NVENC"] == 166
    assert s.extras["engines_mhz"]["APE"] == 174 and s.extras["engines_mhz"]["NVDEC"] is None
    assert s.extras["engines_util_pct"] == {"NVENC": 79, "VIC": 36}
    assert s.dla == {"DLA0": {"online": False, "freq_mhz": None}, "DLA1": {"online": False, "freq_mhz": None}}
    assert (s.emc_util_pct, s.emc_freq_mhz) == (3, 2133) and (s.gpu_util_pct, s.gpu_freq_mhz) == (0, 0)
    assert s.power_mw == {"VDD_GPU_SOC": 2412, "VDD_CPU_CV": 1607, "VIN_SYS_5V0": 4707}


def test_an_active_dla_in_the_r36_4_form_is_online_with_its_load():
    """No published line shows a busy DLA in this form; the NVDLA token is written the way R36.4 writes NVENC/VIC."""
    s = parse_line(L8_AGX_ORIN_R36_4_4.replace("NVDLA0 off", "NVDLA0 87%@1600"))
    assert s.dla["DLA0"] == {"online": True, "freq_mhz": 1600.0, "util_pct": 87.0}
    assert s.dla["DLA1"]["online"] is False
    assert s.extras["engines_util_pct"] == {"NVENC": 79, "VIC": 36}  # the DLA's load is under dla, not twice


def test_jetpack_7_numbered_engines_off():
    s = parse_line(L9_AGX_ORIN_JP7)
    assert s.dla == {"DLA0": {"online": False, "freq_mhz": None}, "DLA1": {"online": False, "freq_mhz": None}}
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (12, 1300)  # jetson-stats: {'val': 12, 'frq': 1300000}
    assert s.extras["engines_mhz"]["NVENC0"] is None and s.extras["engines_mhz"]["APE"] == 174


# An AGX Orin 64 GB with the DLA at work (`sudo tegrastats --interval 100`), verbatim from the README of
# github.com/Muxindawang/jetson_dla_tutorial at 57494883 (quoted as a measurement; the README says NVDLA0_FREQ is the
# DLA clock in MHz). The only published line with a busy DLA found: the clock, and no load, as in older tegrastats.
L10_AGX_ORIN_DLA_BUSY = "11-21-2025 08:49:48 RAM 13983/62780MB (lfb 424x4MB) SWAP 126/31390MB (cached 0MB) CPU [90%@2201,100%@2201,100%@2201,100%@2201,100%@2201,100%@2201,100%@2201,100%@2201,100%@2201,100%@2201,100%@2201,100%@2201] EMC_FREQ 1%@2133 GR3D_FREQ 14%@[407,407] VIC_FREQ 115 NVDLA0_FREQ @1600 APE 174 CV0@73.625C CPU@77.281C Tboard@62C SOC2@70C Tdiode@62.25C SOC0@69.531C CV1@72.5C GPU@69.125C tj@77.281C SOC1@68.968C CV2@67.25C VDD_GPU_SOC 3150mW/2971mW VDD_CPU_CV 14312mW/12415mW VIN_SYS_5V0 4968mW/5048mW VDDQ_VDD2_1V8AO 1091mW/1091mW"


def test_a_published_line_with_the_dla_at_work():
    s = parse_line(L10_AGX_ORIN_DLA_BUSY)
    assert s.dla == {"DLA0": {"online": True, "freq_mhz": 1600}}  # DLA1 is not printed at all: unknown, not off
    assert (s.gpu_util_pct, s.gpu_freq_mhz) == (14, 407) and (s.emc_util_pct, s.emc_freq_mhz) == (1, 2133)
    assert s.power_mw == {"VDD_GPU_SOC": 3150, "VDD_CPU_CV": 14312, "VIN_SYS_5V0": 4968, "VDDQ_VDD2_1V8AO": 1091}
    assert (s.total_mw, s.total_rule) == (3150 + 14312 + 4968 + 1091, "sum:VDD_GPU_SOC+VDD_CPU_CV+VIN_SYS_5V0+VDDQ_VDD2_1V8AO")
    assert s.cpu_util_pct == [90] + [100] * 11 and s.temps_c["tj"] == 77.281
