"""Engines: the inference backends behind one small protocol, with the model-file, engine-gate and preprocessing
modules they share (CUDA preprocessing in ``cuda``).

A backend states its inputs and outputs (name, shape, dtype) and runs ``infer`` on a batch. Backends are
registered by name and imported only when chosen, so the device side never loads a runtime it does not use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Dict, Protocol, Tuple, Union

import numpy as np

from edge.errors import ConfigError

Dim = Union[int, str, None]  # a symbolic or unknown dimension is a str or None


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: Tuple[Dim, ...]
    dtype: np.dtype

    @property
    def static(self) -> bool:
        return all(isinstance(d, int) and d > 0 for d in self.shape)


class Backend(Protocol):
    name: str  # e.g. "onnxruntime"
    device: str  # what actually runs it, e.g. "cpu", "cuda:0", "dla:0"
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    model_metadata: Any  # edge.metadata.ModelMetadata: what the model file says of itself

    def infer(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]: ...

    def close(self) -> None: ...


# backend name -> "module:factory"; the factory takes the RunConfig and returns a Backend.
REGISTRY: dict[str, str] = {
    "onnxruntime": "edge.runtime.engines.onnxruntime:create",
    "tensorrt": "edge.runtime.engines.tensorrt:create",
}


def create_backend(cfg: Any) -> Backend:
    try:
        target = REGISTRY[cfg.backend]
    except KeyError:
        raise ConfigError(f"key 'backend': unknown backend {cfg.backend!r}; available: {', '.join(REGISTRY)}") from None
    module, factory = target.split(":")
    return getattr(importlib.import_module(module), factory)(cfg)
