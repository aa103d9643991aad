"""GPU machine tests of the TensorRT backend's CUDA side: pycuda buffers and streams, the preprocessing kernel
against the CPU reference on real frames, overlap of consecutive frames on a CUDA-event timeline, and an
end-to-end edge-run.

No TensorRT engine can execute on the GPU machine, so two stand-ins replace TensorRT's runtime objects, and only
those: ``SpinStandInContext`` (GPU work of a known length on the frame's stream, for the timeline) and
``OnnxRuntimeStandInContext`` (reads the input device buffer, runs the ONNX model with ONNX Runtime, writes the
output device buffers). The manifest gate, buffers, streams, events, the kernel, the pipeline, postprocessing and
sinks are the real code.
"""

from __future__ import annotations

import json
import types
import warnings

import numpy as np
import pytest

from edge.manifest import sha256_file, write_manifest
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec

pytestmark = pytest.mark.gpu

SIZES = [(720, 528), (1280, 720), (1920, 1080), (3840, 2160), (300, 200)]
SPECS = {
    "demo nhwc [-1,1] fp32 letterbox": PreprocessSpec(256, 256, layout="nhwc", scale=1 / 127.5, offset=-1.0),
    "nchw [0,1] fp32 stretch": PreprocessSpec(640, 384, resize="stretch"),
    "nchw imagenet fp16 letterbox": PreprocessSpec(
        224, 224, dtype="float16", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)
    ),
    "nhwc uint8 bgr pad 114": PreprocessSpec(320, 320, layout="nhwc", dtype="uint8", color="bgr", pad_value=114),
}


def test_pinned_and_device_buffers_round_trip_on_two_streams(cuda_ctx):
    from edge.runtime.engines.cuda.memory import HostDeviceBuffer, driver

    cuda = driver()
    with cuda_ctx.active():
        streams = [cuda.Stream(), cuda.Stream()]
        bufs = [HostDeviceBuffer((1, 3, 512, 512), np.float32) for _ in streams]
        back = [HostDeviceBuffer((1, 3, 512, 512), np.float32) for _ in streams]
        try:
            assert all(isinstance(b.host.base, cuda.HostAllocation) for b in bufs)  # page-locked, so copies are async
            for i, (b, r, s) in enumerate(zip(bufs, back, streams)):
                b.host[:] = np.arange(b.host.size, dtype=np.float32).reshape(b.host.shape) + i
                b.upload(s)
                cuda.memcpy_dtod_async(r.device, b.device, b.nbytes, s)
                r.download(s)
            for s in streams:
                s.synchronize()
            for b, r in zip(bufs, back):
                np.testing.assert_array_equal(r.host, b.host)
        finally:
            for b in bufs + back:
                b.free()


def _gpu_preprocess(cuda_ctx, spec: PreprocessSpec, frame: np.ndarray) -> np.ndarray:
    from edge.runtime.engines.cuda.memory import HostDeviceBuffer, driver
    from edge.runtime.engines.cuda.preprocess import FrameInput, GpuPreprocessor

    cuda = driver()
    pre = GpuPreprocessor(spec, cuda_ctx)
    with cuda_ctx.active():
        stream = cuda.Stream()
        out = HostDeviceBuffer(spec.input_shape, np.dtype(spec.dtype))
        fin = FrameInput()
        pre.prepare(frame, fin)
        pre.enqueue(frame, fin, out.ptr, stream)
        out.download(stream)
        stream.synchronize()
        result = out.host.copy()
        out.free()
        fin.free()
        pre.free()
    return result


@pytest.mark.parametrize("name", list(SPECS))
def test_kernel_matches_the_cpu_reference_on_real_frames(cuda_ctx, megamind_frames, name):
    import cv2

    spec = SPECS[name]
    cpu = Preprocessor(spec)
    a, _ = spec.channel_affine()
    level = float(np.abs(a).max()) if spec.dtype != "uint8" else 1.0  # one intensity step in output units
    for index, frame in megamind_frames.items():
        for w, h in SIZES:
            if name != "nchw [0,1] fp32 stretch" and (w, h) == (300, 200):
                continue  # the upscaled case below is judged in [0, 1] units
            real = frame if (w, h) == frame.shape[1::-1] else cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA)
            want = cpu(real)[0].astype(np.float64)
            got = _gpu_preprocess(cuda_ctx, spec, real).astype(np.float64)
            assert got.shape == want.shape
            diff = np.abs(got - want)
            exact = float((diff == 0).mean())
            print(
                f"{name}: frame {index} at {w}x{h}: max |diff| {diff.max():.6f} ({diff.max() / level:.2f} levels), exact {exact:.4%}"
            )
            tol = 1 / 255 if spec.dtype != "uint8" else 1.0
            assert diff.max() <= tol + (2e-3 if spec.dtype == "float16" else 1e-6), (index, w, h)


def _engine_with_manifest(tmp_path, payload: bytes, trt_version: str, cc: str):
    engine = tmp_path / "standin.engine"
    engine.write_bytes(payload)
    write_manifest(
        engine,
        {
            "manifest_version": 1,
            "engine": {"file": engine.name, "sha256": sha256_file(engine), "size": len(payload)},
            "tensorrt": {"version": trt_version},
            "device": {"gpu_name": "stand-in", "compute_capability": cc, "l4t": None, "jetpack": None},
            "dla": {"core": None, "gpu_fallback": True},
            "io": [],
        },
    )
    return engine


def standin_tensorrt(tensors, make_context) -> types.ModuleType:
    """A stand-in for the TensorRT runtime module: an engine that reports ``tensors`` {name: (is_input, shape,
    numpy dtype)} and execution contexts from ``make_context(engine_bytes)``."""
    trt = types.ModuleType("tensorrt")
    trt.__version__ = "stand-in"
    names = {"float32": "FLOAT", "float16": "HALF", "int32": "INT32", "int8": "INT8", "uint8": "UINT8"}
    trt.DataType = types.SimpleNamespace(**{n: n for n in ("FLOAT", "HALF", "INT8", "INT32", "UINT8", "BOOL")})
    trt.TensorIOMode = types.SimpleNamespace(INPUT="INPUT", OUTPUT="OUTPUT")

    class Logger:
        WARNING = 2

        def __init__(self, level):
            pass

    class Engine:
        def __init__(self, data):
            self.data = data
            self.num_io_tensors = len(tensors)

        def get_tensor_name(self, i):
            return list(tensors)[i]

        def get_tensor_mode(self, name):
            return "INPUT" if tensors[name][0] else "OUTPUT"

        def get_tensor_shape(self, name):
            return tensors[name][1]

        def get_tensor_dtype(self, name):
            return names[np.dtype(tensors[name][2]).name]

        def create_execution_context(self):
            return make_context(self.data)

    class Runtime:
        num_DLA_cores = 0
        DLA_core = -1

        def __init__(self, logger):
            pass

        def deserialize_cuda_engine(self, data):
            return Engine(data)

    trt.Logger, trt.Runtime = Logger, Runtime
    return trt


class _BindingsMixin:
    def __init__(self):
        self.addresses = {}

    def set_input_shape(self, name, shape):
        return True

    def get_tensor_shape(self, name):
        return self.shapes[name]

    def set_tensor_address(self, name, ptr):
        self.addresses[name] = ptr
        return True  # pyCore.cpp: set_tensor_address returns bool in 8.5.2, 8.6.1 and 10.3.0


class SpinStandInContext(_BindingsMixin):
    """Stand-in for IExecutionContext: on the frame's stream, spins for a fixed number of GPU cycles (the
    "inference"), then copies the input to the output, so upload/compute/download have known, visible lengths. It
    leaves most of the GPU idle, so two frames' "inference" may also run side by side; a real engine fills the GPU,
    and there the gain is one frame's transfers and CPU staging running under another frame's compute."""

    def __init__(self, shapes, cycles):
        import cupy

        super().__init__()
        self.shapes, self.cycles, self.cupy = shapes, cycles, cupy
        self.kernel = cupy.RawKernel(
            r"""extern "C" __global__ void spin_copy(const float* x, float* y, long long n, long long cycles) {
                long long t0 = clock64();
                while (clock64() - t0 < cycles) {}
                for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] = x[i];
            }""",
            "spin_copy",
        )

    def execute_async_v3(self, stream_handle):
        cp = self.cupy
        n = int(np.prod(self.shapes["x"]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # CuPy 14 prefers Stream.from_external
            stream = cp.cuda.ExternalStream(stream_handle)
        with stream:
            self.kernel(
                (264,),
                (256,),
                (np.uint64(self.addresses["x"]), np.uint64(self.addresses["y"]), np.int64(n), np.int64(self.cycles)),
            )
        return True


def test_two_buffer_sets_overlap_upload_compute_and_download(cuda_ctx, tmp_path, monkeypatch):
    pytest.importorskip("cupy", reason="the timeline's stand-in compute kernel is launched with CuPy")
    import sys

    from edge.runtime.engines.tensorrt import TensorRTBackend

    shape = (1, 2, 1024, 1024)  # 8 MiB each way: uploads and downloads long enough to see on the timeline
    shapes = {"x": shape, "y": shape}
    trt = standin_tensorrt(
        {"x": (True, shape, np.float32), "y": (False, shape, np.float32)}, lambda data: SpinStandInContext(shapes, 10_000_000)
    )
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    engine = _engine_with_manifest(tmp_path, b"stand-in plan", "stand-in", cuda_ctx.compute_capability)
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    results = {}
    for sets in (1, 2):
        backend = TensorRTBackend(str(engine), buffer_sets=sets)
        try:
            backend.infer(feeds)  # warm-up
            jobs = [backend.submit(feeds) for _ in range(12)]
            outs = [backend.collect(j) for j in jobs]
            np.testing.assert_array_equal(outs[-1]["y"], feeds["x"])
            tl = [j.timeline for j in jobs]
        finally:
            backend.close()
        wall = tl[-1]["done"] - tl[0]["start"]
        results[sets] = (wall, gpu_overlap_ms(tl), transfer_under_compute_ms(tl))
        up = np.mean([t["uploaded"] - t["start"] for t in tl[1:]])
        comp = np.mean([t["computed"] - t["uploaded"] for t in tl[1:]])
        down = np.mean([t["done"] - t["computed"] for t in tl[1:]])
        print(
            f"{sets} buffer set(s): 12 frames in {wall:.2f} ms on the GPU timeline; per frame upload {up:.2f} / compute "
            f"{comp:.2f} / download {down:.2f} ms; stages of different frames overlapping: {results[sets][1]:.2f} ms, "
            f"of which transfers under another frame's compute: {results[sets][2]:.2f} ms"
        )
    (wall1, overlap1, under1), (wall2, overlap2, under2) = results[1], results[2]
    assert overlap1 == 0.0 and under1 == 0.0  # one set: strictly one frame after another
    assert overlap2 > 1.0 and under2 > 0.0  # two sets: stages of consecutive frames run at the same time
    assert wall2 < 0.85 * wall1  # and the next frame's CPU staging hides under this frame's GPU work


def _intervals(tl):
    """(frame, kind, begin, end) of each frame's upload, compute and download on the GPU timeline."""
    kinds = (("upload", "start", "uploaded"), ("compute", "uploaded", "computed"), ("download", "computed", "done"))
    return [(i, kind, t[a], t[b]) for i, t in enumerate(tl) for kind, a, b in kinds]


def gpu_overlap_ms(tl) -> float:
    """Time during which stages of two different frames are both in progress."""
    iv = _intervals(tl)
    return sum(
        max(0.0, min(e1, e2) - max(b1, b2)) for n, (f1, _, b1, e1) in enumerate(iv) for f2, _, b2, e2 in iv[n + 1 :] if f1 != f2
    )


def transfer_under_compute_ms(tl) -> float:
    """Time during which one frame's upload or download runs while another frame computes."""
    iv = _intervals(tl)
    computes = [(f, b, e) for f, k, b, e in iv if k == "compute"]
    return sum(max(0.0, min(e, ce) - max(b, cb)) for f, k, b, e in iv if k != "compute" for cf, cb, ce in computes if cf != f)


class OnnxRuntimeStandInContext(_BindingsMixin):
    """Stand-in for IExecutionContext: waits for the frame's stream, reads the input device buffer, runs the ONNX
    model with ONNX Runtime on the CPU and writes the output device buffers. (TensorRT engines cannot execute on
    the GPU machine; this is the only part of the run that is not the real code path.)"""

    def __init__(self, onnx_bytes, tensors):
        import onnxruntime as ort

        from edge.runtime.engines.cuda.memory import driver

        super().__init__()
        self.cuda = driver()
        self.session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
        self.tensors = tensors
        self.shapes = {n: t[1] for n, t in tensors.items()}

    def execute_async_v3(self, stream_handle):
        cuda = self.cuda
        feeds = {}
        cuda.Context.synchronize()  # the upload (and the preprocessing kernel) on this frame's stream are done
        for name, (is_input, shape, dtype) in self.tensors.items():
            if is_input:
                feeds[name] = np.empty(shape, dtype)
                cuda.memcpy_dtoh(feeds[name], self.addresses[name])
        outs = self.session.run(None, feeds)
        for out, meta in zip(outs, self.session.get_outputs()):
            cuda.memcpy_htod(self.addresses[meta.name], np.ascontiguousarray(out, self.tensors[meta.name][2]))
        return True


def test_edge_run_end_to_end_with_gpu_preprocessing_and_the_onnxruntime_stand_in(cuda_ctx, tmp_path, monkeypatch, demo_model):
    import sys

    import onnxruntime as ort

    from edge.config import load_config
    from edge.runtime.runner import run
    from tests.conftest import DEMO_CONFIG

    session = ort.InferenceSession(str(demo_model), providers=["CPUExecutionProvider"])
    tensors = {t.name: (True, tuple(t.shape), np.float32) for t in session.get_inputs()}
    tensors.update({t.name: (False, tuple(t.shape), np.float32) for t in session.get_outputs()})
    payload = demo_model.read_bytes()  # the stand-in "plan" is the ONNX model the stand-in context runs
    trt = standin_tensorrt(tensors, lambda data: OnnxRuntimeStandInContext(data, tensors))
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    engine = _engine_with_manifest(tmp_path, payload, "stand-in", cuda_ctx.compute_capability)

    results = {}
    for name, values in {
        "tensorrt": {"model.engine": str(engine), "backend": "tensorrt", "preprocess": "gpu"},
        "onnxruntime": {"device": "cpu"},
    }.items():
        out = tmp_path / f"{name}.jsonl"
        summary = tmp_path / f"{name}.json"
        cfg = load_config(
            DEMO_CONFIG,
            values={
                **values,
                "pipeline.frames": 90,
                "sinks.results": str(out),
                "sinks.summary_json": str(summary),
                "telemetry.backend": "none",
            },
        )
        assert run(cfg) == 0
        results[name] = ([json.loads(line) for line in out.read_text().splitlines()], json.loads(summary.read_text()))
    trt_lines, trt_summary = results["tensorrt"]
    ort_lines, _ = results["onnxruntime"]
    assert trt_summary["backend"] == "tensorrt" and trt_summary["device"] == "cuda:0" and trt_summary["dla_core"] is None
    assert trt_summary["preprocess"] == "gpu" and trt_summary["engine"]["buffer_sets"] == 2
    # Issue 16: frames decoded into page-locked ring buffers (uploaded: the H200 is a discrete GPU), all handed back.
    assert trt_summary["engine"]["frame_memory"] == "pinned" and trt_summary["frame_buffers"]["memory"] == "pinned"
    assert trt_summary["frame_buffers"]["in_use"] == 0 and trt_summary["frame_buffers"]["allocations"] < 90
    print("stand-in run:", trt_summary["fps"], "fps;", trt_summary["engine"])
    assert len(trt_lines) == len(ort_lines) == 90
    faces = 0
    for a, b in zip(trt_lines, ort_lines):
        assert a["frame"] == b["frame"] and len(a["detections"]) == len(b["detections"])
        for da, db in zip(a["detections"], b["detections"]):
            np.testing.assert_allclose(da["box"], db["box"], atol=0.5)
            faces += 1
    assert faces > 0  # the clip has a face: the comparison was not vacuous


def test_gpu_preprocess_refuses_an_engine_input_of_another_type(cuda_ctx, tmp_path, monkeypatch):
    import sys

    from edge.errors import EdgeError
    from edge.runtime.engines.tensorrt import TensorRTBackend

    tensors = {"x": (True, (1, 256, 256, 3), np.float16), "y": (False, (1, 10), np.float32)}
    monkeypatch.setitem(
        sys.modules,
        "tensorrt",
        standin_tensorrt(tensors, lambda data: SpinStandInContext({n: t[1] for n, t in tensors.items()}, 0)),
    )
    engine = _engine_with_manifest(tmp_path, b"plan", "stand-in", cuda_ctx.compute_capability)
    backend = TensorRTBackend(str(engine))
    try:
        assert backend.inputs == [TensorInfo("x", (1, 256, 256, 3), np.dtype(np.float16))]
        with pytest.raises(EdgeError, match=r"preprocess: gpu writes float32 \[1, 256, 256, 3\] but engine input 'x' is float16"):
            backend.use_gpu_preprocess(PreprocessSpec(256, 256, layout="nhwc"), "x")
    finally:
        backend.close()


# -- issue 12: tap-table ordering across streams, one profile per buffer set, the calibrator's context ----------------


def test_tap_tables_are_ready_before_another_streams_first_launch(cuda_ctx, megamind_frames):
    """The tables of a new frame size are uploaded on stream A behind a long spin kernel; a frame of the same size
    enqueued at once on stream B must wait for that upload (the event) or it reads unwritten tables."""
    cupy = pytest.importorskip("cupy", reason="the spin kernel that delays stream A is launched with CuPy")
    from edge.runtime.engines.cuda.memory import HostDeviceBuffer, driver
    from edge.runtime.engines.cuda.preprocess import FrameInput, GpuPreprocessor

    spec = SPECS["nchw [0,1] fp32 stretch"]
    frame = megamind_frames[125]
    want = Preprocessor(spec)(frame)[0]
    cuda = driver()
    pre = GpuPreprocessor(spec, cuda_ctx)
    spin = cupy.RawKernel(
        'extern "C" __global__ void spin(long long c) { long long t = clock64(); while (clock64() - t < c) {} }', "spin"
    )
    with cuda_ctx.active():
        a, b = cuda.Stream(), cuda.Stream()
        out_a, out_b = (HostDeviceBuffer(spec.input_shape, np.float32) for _ in range(2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            with cupy.cuda.ExternalStream(a.handle):
                spin((1,), (1,), (np.int64(200_000_000),))  # ~0.1 s of GPU time before A's uploads
        fin_a, fin_b = FrameInput(), FrameInput()
        for fin, out, stream in ((fin_a, out_a, a), (fin_b, out_b, b)):
            pre.prepare(frame, fin)
            pre.enqueue(frame, fin, out.ptr, stream)
        out_b.download(b)
        out_a.download(a)
        a.synchronize()
        b.synchronize()
        try:
            np.testing.assert_allclose(out_b.host, want, atol=1 / 255 + 1e-6)
            np.testing.assert_allclose(out_a.host, want, atol=1 / 255 + 1e-6)
        finally:
            for buf in (out_a, out_b, fin_a, fin_b):
                buf.free()
            pre.free()


class _PycudaMemory:
    """Device memory for the generated TensorRT stand-in's execute_async_v3, on the real GPU."""

    def read(self, ptr, nbytes):
        from edge.runtime.engines.cuda.memory import driver

        cuda = driver()
        cuda.Context.synchronize()  # the upload on the frame's stream is done
        out = np.empty(nbytes, np.uint8)
        cuda.memcpy_dtoh(out, ptr)
        return out.tobytes()

    def write(self, ptr, data, stream=None):
        from edge.runtime.engines.cuda.memory import driver

        driver().memcpy_htod(ptr, np.frombuffer(data, np.uint8))


@pytest.mark.parametrize("version", ["8.5.2", "8.6.1", "10.3.0"])
def test_two_buffer_sets_on_a_dynamic_engine_select_their_profiles_on_real_streams(cuda_ctx, tmp_path, monkeypatch, version):
    """The generated stand-in of each TensorRT release (its context/profile rules) over real pycuda streams: each
    buffer set selects its own profile on its own stream, and frames on both sets come back right."""
    import sys

    from edge.runtime.engines.tensorrt import TensorRTBackend
    from tests.trt_standin import EnginePlan, Machine, make_tensorrt

    shape = (1, 3, 64, 64)
    machine = Machine(dla_cores=0, memory=_PycudaMemory())
    trt = make_tensorrt(version, machine, lean=True)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    plan = EnginePlan(
        version,
        {"x": (True, "FLOAT", (-1, 3, -1, -1)), "y": (False, "FLOAT", (-1, 1, -1, -1))},
        [{"x": (shape, shape, shape)} for _ in range(2)],
        outputs=lambda s: {"y": (s["x"][0], 1, s["x"][2], s["x"][3])},
        run=lambda feeds: {"y": feeds["x"][:, :1] * 2.0},
    )
    engine = _engine_with_manifest(tmp_path, machine.register(plan), trt.__version__, cuda_ctx.compute_capability)
    backend = TensorRTBackend(str(engine), trt=trt, buffer_sets=2)
    try:
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        jobs = [backend.submit({"x": x + k}) for k in range(6)]
        for k, job in enumerate(jobs):
            np.testing.assert_allclose(backend.collect(job)["y"], (x + k)[:, :1] * 2.0, rtol=1e-6)
        picked = [c for c in machine.calls if c[0] == "set_optimization_profile_async"]
        assert sorted(c[2] for c in picked) == [0, 1]
        assert sorted(c[3] for c in picked) == sorted(s.stream.handle for s in backend._slots)
        assert not [c for c in machine.calls if c[0] == "error"]
    finally:
        backend.close()


def test_calibration_batches_go_to_the_primary_context(cuda_ctx):
    """No pycuda.autoinit: the batch lands in the primary context TensorRT uses, and no context is left current."""
    import sys

    from edge.builder.calibrator import PycudaUpload
    from edge.runtime.engines.cuda.memory import driver

    cuda = driver()
    batch = np.random.default_rng(2).standard_normal((2, 3, 32, 32)).astype(np.float32)
    upload = PycudaUpload()
    try:
        pointer = upload(batch)
        assert cuda.Context.get_current() is None and "pycuda.autoinit" not in sys.modules
        back = np.empty_like(batch)
        with cuda_ctx.active():  # the runtime's own handle on the primary context
            cuda.memcpy_dtoh(back, pointer)
        np.testing.assert_array_equal(back, batch)
    finally:
        upload.close()
