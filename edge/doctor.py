"""`edge doctor`: first contact with a Jetson. What is here, what works, and what to fix, in one table.

Checks, in order: the platform (L4T/JetPack from /etc/nv_tegra_release, the module from the device tree), TensorRT
(version, whether the builder is there, its DLA cores, and whether its version is the one this JetPack ships),
CUDA and the GPU's compute capability, pycuda, then, where the builder is present, a tiny network (conv, ReLU,
max pooling; FP16) built by edge-build for the GPU and for each DLA core, run through edge's own TensorRT backend,
compared with ONNX Runtime (max abs difference) and timed; then the telemetry sources (jtop, tegrastats, INA3221
rails, GPU clock, DLA state), the camera devices, and the sandbox of each installed camera service
(`edge service check`). Exit 0 when nothing failed, 1 otherwise, each failure with its fix; ``--json FILE`` keeps
everything for a bug report. On a machine that is not a Jetson it says so and still checks what it can.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from edge import argtypes
from edge.lazy import available

# TensorRT release -> the JetPack that ships it (NVIDIA JetPack release notes: 5.1.x ships 8.5.2, 6.0 ships 8.6.2,
# 6.1 and 6.2 ship 10.3.0).
TENSORRT_OF_JETPACK = {"5.": "8.5.2", "6.0": "8.6.2", "6.1": "10.3.0", "6.2": "10.3.0"}
MAX_ABS_DIFF = 0.05  # FP16 engine vs FP32 ONNX Runtime on a conv of 27 taps with unit-scale inputs and weights


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail | skip
    detail: str
    fix: str = ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", type=argtypes.output_file, metavar="FILE", help="also write every result as JSON (attach it to bug reports)"
    )
    parser.add_argument("--no-build", action="store_true", help="skip building and running the tiny network")
    parser.add_argument("--no-service", action="store_true", help="skip `edge service check` of installed services")
    parser.add_argument("--root", type=Path, default=Path("/"), help=argparse.SUPPRESS)  # a fake machine, for tests


class Doctor:
    """Runs the checks; each one adds rows and never raises (a check that breaks is a failed row naming the bug)."""

    def __init__(self, root: Path = Path("/"), build: bool = True, service: bool = True) -> None:
        self.root = root
        self.build, self.service = build, service
        self.checks: List[Check] = []
        self.facts: Dict[str, Any] = {}
        self.trt: Any = None
        self.cc: Optional[str] = None

    def add(self, name: str, status: str, detail: str, fix: str = "") -> None:
        self.checks.append(Check(name, status, detail, fix))

    def run(self) -> List[Check]:
        for step in (self.platform, self.tensorrt, self.cuda, self.tiny_network, self.telemetry, self.cameras, self.services):
            try:
                step()
            except Exception as exc:  # a bug in a check must not hide the others
                self.add(step.__name__, "fail", f"the check itself broke: {type(exc).__name__}: {exc}", "report it with --json")
        return self.checks

    # -- platform -------------------------------------------------------------------------------------------------
    def platform(self) -> None:
        from edge.manifest import read_l4t

        model_file = self.root / "proc/device-tree/model"
        model = model_file.read_text(errors="replace").strip("\x00\n ") if model_file.is_file() else None
        l4t = read_l4t(self.root / "etc/nv_tegra_release")
        self.facts.update(model=model, l4t=l4t["l4t"] if l4t else None, jetpack=l4t["jetpack"] if l4t else None)
        self.facts["python"] = sys.version.split()[0]
        if l4t is None:
            self.add(
                "platform",
                "fail",
                f"not a Jetson: no /etc/nv_tegra_release ({model or 'no device-tree model'})",
                "run edge doctor on the Jetson; here edge dla, edge calib and edge-run on ONNX Runtime work",
            )
            return
        self.add("platform", "ok", f"{model or 'Jetson'}, L4T {l4t['l4t']}, JetPack {l4t['jetpack']}")

    # -- TensorRT -------------------------------------------------------------------------------------------------
    def tensorrt(self) -> None:
        if not available("tensorrt"):
            jetson = self.facts.get("l4t") is not None
            rtx = available("tensorrt_rtx")
            self.add(
                "tensorrt",
                "fail" if jetson else "skip",
                "no TensorRT Python bindings (import tensorrt)"
                + ("; TensorRT-RTX is here (GPU engines for other machines: no DLA, no INT8 calibration)" if rtx else ""),
                "sudo apt install python3-libnvinfer (it comes with JetPack)" if jetson else "",
            )
            return
        import tensorrt as trt

        self.trt = trt
        version = str(trt.__version__)
        builder = hasattr(trt, "Builder") and hasattr(trt, "OnnxParser")
        runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
        cores = int(runtime.num_DLA_cores) if hasattr(runtime, "num_DLA_cores") else 0
        self.facts.update(tensorrt=version, builder=builder, dla_cores=cores)
        detail = f"TensorRT {version}, builder {'present' if builder else 'absent (runtime only)'}, {cores} DLA core(s)"
        jp = self.facts.get("jetpack") or ""
        shipped = next((v for k, v in TENSORRT_OF_JETPACK.items() if jp.startswith(k)), None)
        if shipped and not version.startswith(shipped):
            self.add(
                "tensorrt",
                "warn",
                f"{detail}; JetPack {jp} ships TensorRT {shipped}",
                "engines built here only load on this TensorRT; use the JetPack's own python3-libnvinfer",
            )
        else:
            self.add("tensorrt", "ok", detail)

    # -- CUDA -----------------------------------------------------------------------------------------------------
    def cuda(self) -> None:
        from edge.builder.engine import cuda_version

        toolkit = cuda_version()
        self.facts["cuda"] = toolkit
        if not available("pycuda"):
            self.add("pycuda", "fail" if self.facts.get("l4t") else "skip", "pycuda is not installed", "pip install pycuda")
            return
        from edge.errors import EdgeError
        from edge.runtime.engines.cuda.memory import CudaContext

        try:
            ctx = CudaContext(0)
        except EdgeError as exc:
            self.add("cuda", "fail", str(exc), "check that this user is in the video group and the GPU driver is loaded")
            return
        self.cc = ctx.compute_capability
        self.facts.update(gpu=ctx.name, compute_capability=self.cc)
        ctx.close()
        self.add("cuda", "ok", f"{ctx.name}, compute capability {self.cc}, CUDA toolkit {toolkit or 'not found'}")

    # -- the tiny network -----------------------------------------------------------------------------------------
    def tiny_network(self) -> None:
        if not self.build:
            self.add("build", "skip", "--no-build")
            return
        if self.trt is None or not self.facts.get("builder") or self.cc is None:
            self.add("build", "skip", "needs the TensorRT builder and a GPU")
            return
        missing = [m for m in ("onnx", "onnxruntime") if not available(m)]
        if missing:
            self.add(
                "build",
                "skip",
                f"needs {' and '.join(missing)} to write and check the tiny network",
                "pip install onnx onnxruntime",
            )
            return
        cores: List[Optional[int]] = [None] + list(range(int(self.facts.get("dla_cores") or 0)))
        with tempfile.TemporaryDirectory(prefix="edge-doctor-") as tmp:
            model = write_tiny_model(Path(tmp) / "tiny.onnx")
            x = tiny_input()
            want = onnxruntime_output(model, x)
            for core in cores:
                self._build_and_run(Path(tmp), model, core, x, want)

    def _build_and_run(self, tmp: Path, model: Path, core: Optional[int], x: Any, want: Any) -> None:
        import numpy as np

        from edge.builder.config import BuildConfig, DlaConfig
        from edge.builder.engine import build
        from edge.config import ModelConfig
        from edge.errors import EdgeError
        from edge.runtime.engines.tensorrt import TensorRTBackend

        where = "GPU" if core is None else f"DLA {core}"
        engine = tmp / f"tiny-{'gpu' if core is None else f'dla{core}'}.engine"
        cfg = BuildConfig(model=ModelConfig(path=str(model), engine=str(engine)), fp16=True, dla=DlaConfig(core=core))
        t0 = time.monotonic()
        try:
            result = build(cfg)
        except EdgeError as exc:
            self.add(f"build {where}", "fail", str(exc), "rerun with edge-build --log FILE and attach the log")
            return
        seconds = time.monotonic() - t0
        on_dla = result.placement.dla_layers
        try:
            backend = TensorRTBackend(str(engine), dla_core=core, l4t_file=str(self.root / "etc/nv_tegra_release"))
        except EdgeError as exc:
            self.add(f"run {where}", "fail", f"built in {seconds:.1f} s but does not load: {exc}")
            return
        try:
            got = backend.infer({"x": x})["y"]
            times = []
            for _ in range(20):
                t = time.perf_counter()
                backend.infer({"x": x})
                times.append((time.perf_counter() - t) * 1000)
        finally:
            backend.close()
        diff = float(np.abs(got.astype(np.float64) - want).max())
        ms = float(np.median(times))
        detail = f"built in {seconds:.1f} s ({on_dla} DLA layer(s)), max |diff| vs ONNX Runtime {diff:.4f}, {ms:.2f} ms per frame"
        if diff > MAX_ABS_DIFF:
            self.add(
                f"engine {where}", "fail", detail, f"the FP16 engine differs from FP32 by more than {MAX_ABS_DIFF}; report it"
            )
        elif core is not None and on_dla == 0:
            self.add(f"engine {where}", "warn", detail, "TensorRT put nothing on the DLA; check the placement report")
        else:
            self.add(f"engine {where}", "ok", detail)

    # -- telemetry ------------------------------------------------------------------------------------------------
    def telemetry(self) -> None:
        from edge.telemetry.sampler import probe_backends
        from edge.telemetry.sysfs import SysfsBackend

        sysfs = self.root / "sys"
        found = probe_backends(sysfs_root=str(sysfs), l4t_file=str(self.root / "etc/nv_tegra_release"))
        for name, why_not in found.items():
            self.add(f"telemetry {name}", "ok" if why_not is None else "skip", "works here" if why_not is None else why_not)
        if found.get("sysfs") is None:
            backend = SysfsBackend(sysfs)
            backend.open()
            backend.read()
            time.sleep(0.05)
            s = backend.read()
            backend.close()
            rails = ", ".join(f"{k} {v / 1000:.2f} W" for k, v in s.power_mw.items()) or "none"
            self.add("INA3221 rails", "ok" if s.power_mw else "warn", rails)
            gpu = "unknown" if s.gpu_freq_mhz is None else f"{s.gpu_freq_mhz:.0f} MHz"
            self.add(
                "GPU clock",
                "ok" if s.gpu_freq_mhz is not None else "warn",
                gpu,
                "" if s.gpu_freq_mhz else "see docs/telemetry.md",
            )
            dla = ", ".join(f"{k} {'on' if v.get('online') else 'off'}" for k, v in s.dla.items()) or "no DLA device found"
            self.add("DLA state", "ok" if s.dla or not self.facts.get("dla_cores") else "warn", dla)
        elif self.facts.get("l4t"):
            self.add("telemetry", "warn", "no sysfs power monitor readable", "run as a user in the video group, or use jtop")

    # -- cameras --------------------------------------------------------------------------------------------------
    def cameras(self) -> None:
        nodes = sorted((self.root / "dev").glob("video[0-9]*"), key=lambda p: int(p.name[5:]) if p.name[5:].isdigit() else 0)
        if not nodes:
            self.add("cameras", "skip", "no /dev/videoN (USB or CSI camera) on this machine")
            return
        names = []
        for node in nodes:
            label = self.root / "sys/class/video4linux" / node.name / "name"
            names.append(f"{node.name} ({label.read_text().strip()})" if label.is_file() else node.name)
        argus = (self.root / "tmp/argus_socket").exists()
        self.add("cameras", "ok", ", ".join(names) + ("; nvargus-daemon socket present" if argus else ""))

    # -- services -------------------------------------------------------------------------------------------------
    def services(self) -> None:
        from edge.deploy.service import UNIT

        unit = self.root / "etc/systemd/system" / UNIT
        configs = sorted((self.root / "etc/edge").glob("*.yaml")) if unit.is_file() else []
        if not configs:
            self.add("service", "skip", "no edge-camera@ service installed (edge service install NAME --config FILE)")
            return
        if not self.service or self.root != Path("/"):
            self.add("service", "skip", f"installed: {', '.join(c.stem for c in configs)}; sandbox check not run")
            return
        from edge.deploy.service import check
        from edge.errors import EdgeError

        for config in configs:
            try:
                check(argparse.Namespace(name=config.stem, root=Path("/"), dry_run=False, timeout=180.0))
                self.add(f"service {config.stem}", "ok", "edge-run --check passes inside the unit's sandbox")
            except EdgeError as exc:
                self.add(f"service {config.stem}", "fail", str(exc), f"edge service check {config.stem} shows the details")


# -- the tiny network: ONNX written with onnx's helpers, fixed weights ------------------------------------------------


def write_tiny_model(path: Path) -> Path:
    """x [1,3,32,32] -> Conv 8x3x3x3 (pad 1) -> Relu -> MaxPool 2x2 -> y [1,8,16,16], opset 13."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(20261201)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.2).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "edge-doctor",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # readable by the ONNX parsers of TensorRT 8.5 and later
    from edge.outputs import write_atomic

    write_atomic(path, model.SerializeToString())
    onnx.checker.check_model(str(path))
    return path


def tiny_input() -> Any:
    import numpy as np

    return np.random.default_rng(7).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)


def onnxruntime_output(model: Path, x: Any) -> Any:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0].astype("float64")


# -- output ---------------------------------------------------------------------------------------------------------

_MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "skip": "-"}


def render(checks: List[Check]) -> List[str]:
    width = max((len(c.name) for c in checks), default=10)
    lines = [f"{'check':{width}}  {'status':6}  detail", "-" * (width + 60)]
    for c in checks:
        lines.append(f"{c.name:{width}}  {_MARK[c.status]:6}  {c.detail}")
    failed = [c for c in checks if c.status == "fail"]
    warned = [c for c in checks if c.status == "warn"]
    lines.append("")
    lines.append(f"{len(checks)} checks: {len(failed)} failed, {len(warned)} warnings")
    lines += [f"fix {c.name}: {c.fix}" for c in failed + warned if c.fix]
    return lines


def main(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    from edge import __version__
    from edge.outputs import check_outputs, write_json
    from edge.redact import redact_data

    if args.json:
        check_outputs({"--json": Path(args.json)}, {})
    doctor = Doctor(args.root, build=not args.no_build, service=not args.no_service)
    checks = doctor.run()
    for line in render(checks):
        out(line)
    if args.json:
        data = {"edge": __version__, "facts": doctor.facts, "checks": [asdict(c) for c in checks]}
        write_json(Path(args.json), redact_data(data))
        out(f"wrote {args.json}: attach it to bug reports")
    return 1 if any(c.status == "fail" for c in checks) else 0
