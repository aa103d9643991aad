from pathlib import Path

from setuptools import find_packages, setup

version = {}
exec(Path("edge/__init__.py").read_text(), version)

# onnx imports ml_dtypes; 0.7.0 takes 0.6-0.9 s to import (numpy ufunc loops registered one by one), 0.6.0 6 ms,
# paid by every edge dla / edge calib run (python -X importtime -c "import onnx").
ONNX = ["onnx", "ml_dtypes<0.7"]
# What the test suite imports beyond the runtime extras.
FLEET = ["paho-mqtt>=2.0", "prometheus-client>=0.17"]  # MQTT results, Prometheus metrics
TEST_REQUIRES = [
    *FLEET,
    "pytest",
    "pytest-timeout",  # a deadlock fails its test instead of holding CI (pyproject's timeout)
    "pytest-xdist",  # scripts/test.sh: one worker per core
    "hypothesis",
    *ONNX,
    "matplotlib",
    "jetson-stats",
    "nvidia-ml-py",
    "ansible-core",
    "tensorrt-rtx-cu13==1.7.1.116",
    "pycocotools",
    "ddddocr==1.6.1",  # its own YOLOX decode (MIT) is the reference the tests hold edge's decoder to
    "pyclipper",  # with shapely: what RapidOCR's DBNet post-processing imports (tests/references.py)
    "shapely",
]

setup(
    name="edge",
    version=version["__version__"],
    description="Put vision models on NVIDIA Jetson with TensorRT and the DLA: build, run, deploy.",
    long_description=Path("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.8",
    packages=find_packages(include=["edge", "edge.*"]),
    package_data={"edge": ["**/*.cu", "**/*.yaml", "**/*.json"]},
    # No OpenCV here: a Jetson keeps JetPack's cv2 (it has GStreamer for csi://; pip's wheel has not).
    install_requires=["numpy", "pyyaml"],
    extras_require={
        "test": TEST_REQUIRES,
        "cv": ["opencv-python-headless"],  # desktop/CI; for the display window use opencv-python instead
        # The laptop tools: edge dla and edge calib read models with onnx and run them with ONNX Runtime.
        "host": [*ONNX, "onnxruntime", "opencv-python-headless", "pycocotools"],  # pycocotools: mAP of --eval on detectors
        "ort": ["onnxruntime"],
        "jetson": ["pycuda", "jetson-stats"],
        "report": ["matplotlib"],  # TensorRT itself comes with JetPack (python3-libnvinfer)
        "fleet": FLEET,
        # Checks CI runs besides the tests: lint, the import contract, the strict docs build; mutmut for
        # scripts/mutate.py (a test checks its reading of mutmut's mutant names).
        "dev": [*TEST_REQUIRES, "ruff==0.17.6", "import-linter", "mkdocs", "mutmut==3.8.1"],
        "mutation": ["mutmut==3.8.1"],  # scripts/mutate.py alone
    },
    # The systemd unit for `edge service install`, where a wheel install can find it.
    data_files=[("share/edge/systemd", ["systemd/edge-camera@.service", "systemd/edge-camera.sysusers"])],
    entry_points={
        "console_scripts": [
            "edge=edge.cli:main",
            "edge-run=edge.cli:run_main",
            "edge-build=edge.cli:build_main",
        ]
    },
)
