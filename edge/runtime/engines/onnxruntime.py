"""ONNX Runtime backend: the embedded default (CPU), with the CUDA provider when it is installed."""

from __future__ import annotations

import os
from typing import Any, Dict

import numpy as np

from edge import metadata
from edge.errors import EdgeError
from edge.lazy import require
from edge.runtime.engines import TensorInfo

_ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def __init__(self, model_path: str, device: str = "auto", threads: int = 0) -> None:
        ort = require("onnxruntime", "the ONNX Runtime backend")
        available = ort.get_available_providers()
        want_cuda = device == "cuda" or (device == "auto" and "CUDAExecutionProvider" in available)
        if device == "cuda" and "CUDAExecutionProvider" not in available:
            raise EdgeError(
                f"device 'cuda': this onnxruntime has only {', '.join(available)}; pip install onnxruntime-gpu, or use device: cpu"
            )
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if want_cuda else ["CPUExecutionProvider"]
        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # tf2onnx models warn about unused initialisers on every load
        if not threads and not want_cuda:
            # Leave one core to capture, preprocess and postprocess, which run beside inference in the pipeline.
            threads = (
                max(1, len(os.sched_getaffinity(0)) - 1)
                if hasattr(os, "sched_getaffinity")
                else max(1, (os.cpu_count() or 2) - 1)
            )
        if threads:
            opts.intra_op_num_threads = threads
        # Idle intra-op workers spin by default; in a pipeline that steals the cores decode and preprocess need.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(model_path, sess_options=opts, providers=providers)
        except Exception as exc:  # ORT raises its own exception types for unreadable or invalid models
            raise EdgeError(
                f"model '{model_path}': ONNX Runtime cannot load it ({str(exc).splitlines()[0]}); is it a valid .onnx file?"
            ) from None
        used = self.session.get_providers()[0]
        self.device = "cuda" if used == "CUDAExecutionProvider" else "cpu"
        self.inputs = [self._info(t) for t in self.session.get_inputs()]
        self.outputs = [self._info(t) for t in self.session.get_outputs()]
        self._output_names = [t.name for t in self.outputs]
        self.model_metadata = metadata.read(f"model '{model_path}'", self.session.get_modelmeta().custom_metadata_map or {})

    @staticmethod
    def _info(t: Any) -> TensorInfo:
        shape = tuple(d if isinstance(d, int) else (d or None) for d in t.shape)
        return TensorInfo(t.name, shape, np.dtype(_ORT_TYPES.get(t.type, np.float32)))

    def infer(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return dict(zip(self._output_names, self.session.run(self._output_names, feeds)))

    def close(self) -> None:
        self.session = None


def create(cfg: Any) -> OnnxRuntimeBackend:
    from edge.runtime.engines.model import model_path

    return OnnxRuntimeBackend(str(model_path(cfg)), cfg.device, cfg.threads)
