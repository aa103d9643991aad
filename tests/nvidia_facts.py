"""The DLA facts of NVIDIA's sources, extracted into ``tests/fixtures/nvidia_dla_facts.json`` with their provenance.

The sources are the unmodified Apache-2.0 copies in ``../shared/reference``: the "If executing this layer on DLA"
notes of ``NvInfer.h`` (github.com/NVIDIA/TensorRT at 8.5.2, v8.6.1, v10.3.0) and the importers of onnx-tensorrt
(8.5-GA, 8.6-GA, main at 10.0). Only numbers, names and yes/no facts are kept, each with the sha256 of the file it
came from, so a contributor without the reference copies still checks edge's DLA tables against them, and CI, which
has the copies, checks that the extraction still says the same (``tests/test_dla_sources.py``).

    python -m tests.nvidia_facts          # rewrite the fixture from ../shared/reference
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

REF = Path(__file__).resolve().parents[2] / "shared" / "reference"
FIXTURE = Path(__file__).with_name("fixtures") / "nvidia_dla_facts.json"
HEADERS = {"8.5": ("8.5.2", "8.5.2"), "8.6": ("8.6.1", "v8.6.1"), "10.3": ("10.3.0", "v10.3.0")}  # folder, tag
PARSERS = {"8.5": "8.5-GA/builtin_op_importers.cpp", "8.6": "8.6-GA/builtin_op_importers.cpp", "10.0": "10.0/onnxOpImporters.cpp"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _prose(path: Path) -> str:
    """The header's doc comments as prose: '//!' prefixes gone, wrapped lines joined."""
    return re.sub(r"[ \t]*\n[ \t]*//![ \t]*", " ", path.read_text(encoding="utf-8", errors="replace"))


def _section(text: str, cls: str) -> str:
    """The class's declaration with the doc comment before it, up to the next class's doc comment."""
    body = re.search(rf"\nclass (TRT_DEPRECATED )?{cls} : public", text)
    start = text.rfind("\\class", 0, body.start())
    end = text.find("\\class", body.end())
    return text[start : end if end > 0 else len(text)]


def _range(text: str, what: str) -> Tuple[int, int]:
    found = re.search(what + r" must be in the range \[(\d+), ?(\d+)\]", text)
    if not found:
        raise ValueError(f"no '{what} must be in the range' note")
    return int(found.group(1)), int(found.group(2))


def _k_names(text: str, pattern: str) -> List[str]:
    found = re.search(pattern, text)
    if not found:
        raise ValueError(f"no match for {pattern!r}")
    return sorted(re.findall(r"k([A-Z]+)", found.group(1)))


def header_facts(text: str) -> Dict[str, Any]:
    conv, pool = _section(text, "IConvolutionLayer"), _section(text, "IPoolingLayer")
    deconv, softmax = _section(text, "IDeconvolutionLayer"), _section(text, "ISoftMaxLayer")
    resize = re.search(r"\[1, (\d+)\] for kNEAREST mode and \[1, (\d+)\] for kLINEAR", _section(text, "IResizeLayer"))
    lrn = re.search(r"only values in the set, \[([\d, ]+)\]", _section(text, "ILRNLayer")).group(1)
    wide = re.search(r"\[(\d+), (\d+), (\d+)\]", deconv)
    limits = re.findall(r"at most (\d+)", softmax)
    return {
        "conv_kernel": _range(conv, "kernel size"),
        "conv_stride": _range(conv, "stride"),
        "conv_pad": _range(conv, "padding"),
        "conv_output_maps": _range(conv, "output maps"),
        "pool_window": _range(pool, "window size"),
        "pool_stride": _range(pool, "stride"),
        "pool_pad": _range(pool, "padding"),
        "deconv_kernel": _range(deconv, "(?:kernel size|Kernel height and width)"),
        "deconv_wide_kernels": [int(v) for v in wide.groups()] if wide else [],
        "lrn_windows": sorted(int(v) for v in lrn.split(",")),
        "eltwise": _k_names(_section(text, "IElementWiseLayer"), r"DLA supports only ([kA-Z_, and]+)\."),
        "activations": _k_names(text, r"valid activation types are ([kA-Z_, and]+)\."),
        "resize_nearest_max": int(resize.group(1)),
        "resize_linear_max": int(resize.group(2)),
        "softmax_not_on_xavier": "On Xavier, this layer is not supported on DLA" in softmax,
        "softmax_at_most": sorted({int(v) for v in limits}),
        "pool_inclusive_pad_only_on_xavier": "On Xavier, DLA supports only inclusive padding" in pool,
        "mentions_xavier": "On Xavier" in text,
    }


def parser_facts(importers: str, folder: List[str]) -> Dict[str, Any]:
    """From the importers' source and every .cpp of its folder (the InstanceNormalization plugin lives in a helper)."""
    found = set(re.findall(r"DEFINE_BUILTIN_OP_IMPORTER\((\w+)\)", importers))
    ops = sorted(
        op for op in found if not op.startswith("TRT_") and op not in ("FallbackPluginImporter", "LocalFunctionImporter", "op")
    )
    return {
        "onnx_ops": ops,
        "instance_norm_plugin": any("InstanceNormalization_TRT" in text for text in folder),
        "native_instance_norm_on_by_default": "kNATIVE_INSTANCENORM is ON by default" in importers,
    }


def extract(ref: Path = REF) -> Dict[str, Any]:
    facts: Dict[str, Any] = {"headers": {}, "parsers": {}}
    for trt, (folder, tag) in HEADERS.items():
        path = ref / "tensorrt" / folder / "NvInfer.h"
        facts["headers"][trt] = {
            "source": f"github.com/NVIDIA/TensorRT {tag} include/NvInfer.h",
            "sha256": _sha(path),
            **header_facts(_prose(path)),
        }
    for trt, rel in PARSERS.items():
        path = ref / "onnx-tensorrt" / rel
        folder = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(path.parent.glob("*.cpp"))]
        sources = {p.name: _sha(p) for p in sorted(path.parent.glob("*.cpp"))}
        facts["parsers"][trt] = {
            "source": f"github.com/onnx/onnx-tensorrt {rel}",
            "sha256": sources,
            **parser_facts(path.read_text(encoding="utf-8", errors="replace"), folder),
        }
    # JSON has no tuples: compare and store as lists
    return json.loads(json.dumps(facts))


def committed() -> Dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def main() -> int:
    if not REF.is_dir():
        print(f"nvidia_facts: no reference copies at {REF}", file=sys.stderr)
        return 2
    from edge.outputs import write_atomic

    write_atomic(FIXTURE, json.dumps(extract(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
