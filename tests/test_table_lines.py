"""A real multi-class segmenter: RapidAI's table-line model (asset ``table-lines``, PyPI wired-table-rec 1.1.9,
Apache-2.0), whose graph ends in an ArgMax that keeps its axis: class ids ``[1, batch, h, w]`` int64, 0 background,
1 horizontal and 2 vertical line. edge refused that output until 2026-12-05 ("the number of classes must be
static": the dynamic axis is the batch, not classes).

The reference is wired-table-rec's own ``TableLineRecognitionPlus``: its ``preprocess`` (``resize_img``: the page
fitted in 1024x1024 keeping its aspect, RGB, ImageNet mean and std) and ``infer`` (the class map it reads), imported
from the pinned package files (tests/references.py). Its ``postprocess`` (line fitting with scikit-image and shapely)
is not run, so the two helper modules and scikit-image it imports by name are empty stand-ins while it loads; nothing
it runs here touches them. On pages whose long side is 1024 its resize is the identity, so edge-run at that size
must report exactly its class map: horizontal and vertical masks equal pixel for pixel.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from edge.config import TASK_TYPES, TaskConfig
from edge.errors import ConfigError, RunFailed
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task
from tests import references
from tests.conftest import ROOT, run_cli

cv2 = pytest.importorskip("cv2")
ort = pytest.importorskip("onnxruntime")
mask_util = pytest.importorskip("pycocotools.mask", reason="pycocotools is COCO's reference for the encoding")
pytest.importorskip("PIL", reason="wired-table-rec's utils.py imports Pillow")

EXAMPLE = ROOT / "configs" / "table-lines.example.yaml"
LABELS = ["background", "horizontal line", "vertical line"]


@pytest.fixture(scope="module")
def table() -> dict:
    from edge import assets
    from edge.assets import ensure
    from edge.runtime.sources import read_image

    unused = {  # names table_line_rec_plus imports for its postprocess, which no test calls
        "skimage": ["measure"],
        "wired_table_rec.utils_table_line_rec": [
            "get_table_line",
            "final_adjust_lines",
            "min_area_rect_box",
            "draw_lines",
            "adjust_lines",
        ],
        "wired_table_rec.utils_table_recover": ["sorted_ocr_boxes", "box_4_2_poly_to_box_4_1"],
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, attrs in unused.items():
            stand_in = ModuleType(name)
            for attr in attrs:
                setattr(stand_in, attr, None)
            mp.setitem(sys.modules, name, stand_in)
        references.module("ref-wired-table-rec-utils", package="wired_table_rec")
        plus = references.module("ref-wired-table-rec-plus", package="wired_table_rec")
    model = assets.resolve("table-lines", quiet=True)
    ref = plus.TableLineRecognitionPlus(str(model))
    notes = read_image(assets.resolve("notes", quiet=True))  # 1024x134: a staff of five lines and note stems
    grid = read_image(ensure(references.IMAGES["img-sudoku"], quiet=True))  # a printed sudoku grid, 563x558
    h, w = grid.shape[:2]
    # the grid enlarged so its long side is 1024 (both tools read this file): wired-table-rec's resize is then the
    # identity, where it would enlarge with bicubic and edge with bilinear interpolation
    grid = cv2.resize(grid, (round(w * 1024 / max(h, w)), round(h * 1024 / max(h, w))), interpolation=cv2.INTER_CUBIC)
    return {"ref": ref, "model": model, "pages": {"notes": notes, "grid": grid}}


def reference_map(table: dict, bgr: np.ndarray) -> np.ndarray:
    info = table["ref"].preprocess(bgr)
    assert info["img"].shape == (1, 3, *bgr.shape[:2])  # the page reached the model at its own size
    return table["ref"].infer(info)


@pytest.mark.parametrize("page", ["notes", "grid"])
def test_edge_run_reports_wired_table_recs_class_map(table, page, tmp_path):
    bgr = table["pages"][page]
    want = reference_map(table, bgr)
    assert {int(c) for c in np.unique(want)} == {0, 1, 2}  # both kinds of line on both pages
    frame = tmp_path / f"{page}.png"
    assert cv2.imwrite(str(frame), bgr)
    h, w = bgr.shape[:2]
    out = tmp_path / "r.jsonl"
    run = run_cli("-c", str(EXAMPLE), "--set", f"input.size=[{w}, {h}]", "--source", str(frame), "--results", str(out))
    assert run.returncode == 0, run.stderr
    (line,) = [json.loads(x) for x in out.read_text().splitlines()]
    got = {s["class_id"]: s for s in line["segments"]}
    assert sorted(got) == [1, 2] and got[1]["label"] == "horizontal line"
    for c in (1, 2):
        enc = got[c]["mask"]
        mask = mask_util.decode(mask_util.frPyObjects(enc, *enc["size"])).astype(bool)
        assert mask.shape == (h, w)
        assert (mask != (want == c)).sum() == 0, f"{page}: class {c} differs"
        assert got[c]["pixels"] == int((want == c).sum())


def test_the_model_is_recognised_and_odd_class_maps_are_refused(table):
    s = ort.InferenceSession(str(table["model"]), providers=["CPUExecutionProvider"])
    (o,) = s.get_outputs()
    info = TensorInfo(o.name, tuple(d if isinstance(d, int) else "?" for d in o.shape), np.dtype(np.int64))
    assert info.shape == (1, "?", "?", "?")
    spec = PreprocessSpec(64, 32)
    task = TaskConfig(type="segment", background=0)
    head = heads.choose(task, [info], spec, LABELS)
    assert (head.kind, head.classes) == ("segment", 3)
    with pytest.raises(ConfigError, match="fit none of edge's decoders"):
        heads.choose(TaskConfig(), [info], spec, LABELS)  # auto never guesses a dense map
    for declared in sorted(set(TASK_TYPES) - {"auto", "segment"}):  # every other type: refused in one line
        with pytest.raises((ConfigError, RunFailed)) as err:
            t = TaskConfig(type=declared)
            heads.build(heads.choose(t, [info], spec, LABELS), resolved_task(t, declared), [info], spec, LABELS)
        assert "\n" not in str(err.value), declared
    three = TensorInfo("output", (1, 3, 32, 64), np.dtype(np.int64))
    with pytest.raises(ConfigError, match="integer class ids come in one channel"):
        heads.choose(task, [three], spec, LABELS)
    decode = heads.build(head, resolved_task(task, head.kind), [info], spec, LABELS)
    tf = plan_resize(spec, 64, 32)[2]
    ids = np.zeros((1, 1, 32, 64), np.int64)
    assert decode({"output": ids}, tf).segments == []  # all background
    ids[0, 0, 4, 10:20] = 1
    (seg,) = decode({"output": ids}, tf).segments
    assert (seg.label, seg.pixels, seg.box) == ("horizontal line", 10, [10.0, 4.0, 20.0, 5.0])
    with pytest.raises(RunFailed, match="holds 2 maps of class ids"):
        decode({"output": np.zeros((1, 2, 32, 64), np.int64)}, tf)  # a batch of two reached a one-image run
    for bad, words in ((-1, "holds class -1"), (3, "holds class 3, more than the 3 labels name")):
        ids[0, 0, 0, 0] = bad
        with pytest.raises(RunFailed, match=words):
            decode({"output": ids}, tf)


@pytest.mark.slow
def test_table_lines_through_dla_calib_and_build(table, tmp_path):
    """edge dla predicts the model at the example's size, edge calib measures INT8 by the lines' pixels, and
    TensorRT-RTX builds the Q/DQ model edge calib writes."""
    from tests.conftest import run_edge

    pytest.importorskip("tensorrt_rtx")
    dla = run_edge("dla", "asset://table-lines", "--target", "orin", "--shape", "input=1x3x134x1024", cwd=tmp_path)
    assert "DLA subgraphs:" in dla
    pages = tmp_path / "pages"
    pages.mkdir()
    for name, bgr in table["pages"].items():
        assert cv2.imwrite(str(pages / f"{name}.png"), bgr)
    out = run_edge("calib", "--config", str(EXAMPLE), "--images", "pages", "--qdq", "t.qdq.onnx", cwd=tmp_path)
    assert "pixels" in out
    built = run_edge("build", "t.qdq.onnx", "-o", "t.engine", "--shape", "input=1x3x134x1024", cwd=tmp_path)
    assert "precisions fp32, int8" in built
    assert Path(tmp_path / "t.engine").is_file()
