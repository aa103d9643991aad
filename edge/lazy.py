"""Import heavy or optional modules only when a command needs them.

``edge-run --help`` must stay instant, and a missing module must say in one sentence what to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

from edge.errors import MissingDependency

# module -> what to install; the extras are defined in setup.py.
_HINTS = {
    "cv2": "pip install 'edge[cv]' (or use the system OpenCV on a Jetson: sudo apt install python3-opencv)",
    "onnxruntime": "pip install 'edge[ort]' (or onnxruntime-gpu for the CUDA provider)",
    "onnx": "pip install onnx",
    "tensorrt": "the TensorRT Python bindings (on a Jetson: sudo apt install python3-libnvinfer)",
    "pycuda": "pip install pycuda (needs the CUDA toolkit)",
    "jtop": "pip install jetson-stats (and sudo systemctl start jtop.service)",
    "pynvml": "pip install nvidia-ml-py",
    "matplotlib": "pip install 'edge[report]'",
    "paho": "pip install 'edge[fleet]' (paho-mqtt 2.x)",
    "prometheus_client": "pip install 'edge[fleet]' (prometheus-client)",
}


def require(name: str, purpose: str = "") -> ModuleType:
    """Import ``name`` or raise a MissingDependency naming the package to install."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        top = name.split(".")[0]
        hint = _HINTS.get(top, f"pip install {top}")
        why = f" for {purpose}" if purpose else ""
        raise MissingDependency(
            f"Python module '{name}' is needed{why} but cannot be imported ({exc}); install it: {hint}"
        ) from None


def available(name: str) -> bool:
    """Whether ``name`` could be imported, without importing it (nor its parent package's heavy code)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ValueError, ImportError):  # in sys.modules without a spec (a stand-in), or a parent that fails to import
        return sys.modules.get(name) is not None
