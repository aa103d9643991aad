"""edge's torchvision decoders against torchvision's own detection code (tests/torchvision_reference.py, a child
process): SSDlite320-MobileNetV3, SSD300-VGG16, RetinaNet-ResNet50-FPN and FCOS-ResNet50-FPN with random weights (seeded; no trained
torchvision detector ships in a package here) on real frames as edge preprocesses them.

- ``torchvision`` (raw heads): the anchors equal torchvision's anchor generators on the real backbones' feature maps,
  and the decode of the heads' outputs equals ``postprocess_detections`` (boxes within 1 px, same labels, scores
  within 1e-3) at thresholds from a few detections to hundreds;
- ``torchvision_nms`` (the whole model exported, NMS inside): edge-run's results on the ONNX file equal what the
  PyTorch model reports for the same frame.
Skips naming the reason where torch, ultralytics or torchvision's folder is missing (CI fails instead).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge.config import TaskConfig, TorchvisionConfig
from edge.errors import ConfigError, RunFailed
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task
from edge.runtime.postprocess.torchvision_heads import PRESETS, anchors_for, feature_maps
from tests import torchvision_reference
from tests.conftest import require_or_skip, run_cli, run_results

ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

IMAGENET = {"scale": 1 / 255, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
# each builder's own normalisation (its GeneralizedRCNNTransform), at the size each test exports
MODELS = {
    "ssdlite320_mobilenet_v3_large": (
        PreprocessSpec(320, 320, resize="stretch", scale=2 / 255, offset=-1.0),
        [0.99999, 0.9, 0.05],
    ),
    "ssd300_vgg16": (
        PreprocessSpec(300, 300, resize="stretch", scale=1 / 255, mean=(0.48235, 0.45882, 0.40784), std=(1 / 255,) * 3),
        [0.99999, 0.9, 0.05],
    ),
    # a letterboxed 320x256 input: non-square, so rows and columns are told apart
    "retinanet_resnet50_fpn": (PreprocessSpec(320, 256, **IMAGENET), [0.999, 0.9, 0.5]),
    "fcos_resnet50_fpn": (PreprocessSpec(256, 320, **IMAGENET), [0.95, 0.6, 0.2]),  # portrait: rows and columns swap
}
WHOLE = "ssdlite320_mobilenet_v3_large"
WHOLE_SIZE = (288, 224)  # the whole model resizes inside its graph; its input is the frame at this size, 0..1
WHOLE_THRESHOLD = 0.3


def _frames(megamind_every_9th: list) -> list:
    from edge import assets

    messi = cv2.imread(str(assets.resolve("messi", quiet=True)))
    # no flat grey frame: its interior cells compute the same scores exactly, and the order of exact ties (which
    # box NMS keeps first, which one the cap drops) is not defined by either implementation
    return [megamind_every_9th[3], megamind_every_9th[20], messi]


@pytest.fixture(scope="module")
def tv(tmp_path_factory, megamind_every_9th) -> dict:
    folder = Path(torchvision_reference.TORCHVISION)
    require_or_skip(
        (folder / ".installed").is_file(),
        f"torchvision 0.28.0 is not in {folder} (scripts/test.sh puts it there)",
    )
    require_or_skip(_importable("torch") and _importable("ultralytics"), "the torchvision reference needs torch and ultralytics")
    out = tmp_path_factory.mktemp("torchvision")
    frames = _frames(megamind_every_9th)
    job, arrays, transforms = [], {}, {}
    for name, (spec, thresholds) in MODELS.items():
        pre = Preprocessor(spec)
        made = [pre(f) for f in frames]
        arrays[name] = np.concatenate([m[0] for m in made])
        transforms[name] = [m[1] for m in made]
        job.append({"model": name, "input": name, "thresholds": thresholds, "export_heads": name == WHOLE})
    job[0].update(export_whole=True, whole_threshold=WHOLE_THRESHOLD)
    whole = [cv2.resize(f, WHOLE_SIZE, interpolation=cv2.INTER_AREA)[:, :, ::-1] for f in frames]
    arrays["whole_in"] = np.stack([w.transpose(2, 0, 1) for w in whole]).astype(np.float32) / 255
    np.savez(out / "job.npz", job=np.array(json.dumps(job)), **arrays)
    proc = subprocess.run(
        [sys.executable, str(Path(torchvision_reference.__file__)), str(out / "job.npz"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    refs = {}
    for name in MODELS:
        with np.load(out / f"{name}.npz") as d:
            refs[name] = {k: d[k] for k in d.files}
    return {"refs": refs, "out": out, "frames": frames, "transforms": transforms, "whole": whole}


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def decode(name: str, outs: dict, spec: PreprocessSpec, frame_hw=None, **task):
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in outs.items()]
    t = TaskConfig(type="torchvision", torchvision=TorchvisionConfig(model=name), **task)  # type: ignore[arg-type]
    head = heads.choose(t, infos, spec, [])
    dec = heads.build(head, resolved_task(t, head.kind), infos, spec, [])
    h, w = frame_hw or (spec.height, spec.width)
    res = dec(outs, plan_resize(spec, w, h)[2])
    return head, np.array([[*d.box, d.score, d.class_id] for d in res.detections], np.float64).reshape(-1, 6)


def assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Each detection matched one to one with torchvision's: box within 1 px, same class, score within 1e-3. Not by
    rank: softmax in numpy and in torch differ in the last float32 bits, which can swap two near-equal scores.
    torchvision reports boxes that clipping left with no width or height (random heads push many past the border);
    edge drops them (docs/models.md), so they are left out of torchvision's list here, after its NMS and cap as in
    edge."""
    want = want[(want[:, 2] > want[:, 0]) & (want[:, 3] > want[:, 1])]
    assert len(got) == len(want), f"{what}: edge {len(got)}, torchvision {len(want)}"
    free = np.ones(len(want), bool)
    for row in got:
        near = (np.abs(want[:, :4] - row[:4]).max(axis=1) <= 1.0) & (want[:, 5] == row[5])
        near &= (np.abs(want[:, 4] - row[4]) <= 1e-3) & free
        assert near.any(), f"{what}: edge's {row.tolist()} is not among torchvision's"
        free[np.flatnonzero(near)[0]] = False


@pytest.mark.parametrize("name", MODELS)
def test_anchors_are_torchvisions_own(tv, name):
    ref = tv["refs"][name]
    spec = MODELS[name][0]
    maps = feature_maps(name, spec.width, spec.height)
    assert maps == [tuple(m) for m in ref["maps"].tolist()], "the backbone's real feature maps"
    mine = anchors_for(PRESETS[name], maps, spec.width, spec.height)
    assert mine.shape == ref["anchors"].shape and mine.dtype == np.float32  # held for the run: half float64's memory
    assert np.abs(mine - ref["anchors"]).max() < 1e-3


@pytest.mark.parametrize("name", MODELS)
def test_decode_equals_torchvisions_postprocess(tv, name):
    """Every frame (a face, two faces, messi5) at each threshold, with the builder's own NMS IoU, top-k
    and detection count (edge's defaults for this task.type). Boxes are in input pixels here: the frame is the input."""
    ref, (spec, thresholds) = tv["refs"][name], MODELS[name]
    counts = []
    for i in range(len(tv["frames"])):
        outs = {"bbox_regression": ref["boxes"][i : i + 1], "cls_logits": ref["logits"][i : i + 1]}
        if "ctrness" in ref:
            outs["bbox_ctrness"] = ref["ctrness"][i : i + 1]
        for k, t in enumerate(thresholds):
            head, got = decode(name, outs, spec, score_threshold=t)
            assert (head.kind, head.layout) == ("torchvision", PRESETS[name].family)
            assert_same(got, ref[f"dets_{k}_{i}"], f"{name} frame {i} at {t}")
            counts.append(len(got))
    assert min(counts) < 20 and max(counts) >= 25, counts  # none or a few, and dozens to hundreds, were compared


def test_the_heads_export_runs_in_onnx_runtime_as_in_torch(tv):
    ref = tv["refs"][WHOLE]
    sess = ort.InferenceSession(str(tv["out"] / f"{WHOLE}.heads.onnx"), providers=["CPUExecutionProvider"])
    spec = MODELS[WHOLE][0]
    x = Preprocessor(spec)(tv["frames"][0])[0]
    boxes, logits = sess.run(None, {"images": x})
    assert np.abs(boxes - ref["boxes"][:1]).max() < 1e-3 and np.abs(logits - ref["logits"][:1]).max() < 1e-3


def test_edge_run_on_the_heads_export_reports_torchvisions_detections(tv, tmp_path):
    """The user's path: edge-run with configs/torchvision.example.yaml on the cut model; the frame is stretched to
    320x320, so torchvision's boxes (input pixels) map to the frame by its own size."""
    frame = tv["frames"][0]
    cv2.imwrite(str(tmp_path / "f.png"), frame)
    example = Path(__file__).parents[1] / "configs" / "torchvision.example.yaml"
    results = tmp_path / "out.jsonl"
    proc = run_cli(
        *("-c", str(example), "--set", f"model.path={tv['out'] / f'{WHOLE}.heads.onnx'}"),
        *("--set", f"source.uri={tmp_path / 'f.png'}", "--set", "task.score_threshold=0.9"),
        *("--results", str(results), "--frames", "1"),
    )
    assert proc.returncode == 0, proc.stderr
    line = json.loads(results.read_text().splitlines()[0])
    got = np.array([[*d["box"], d["score"], d["class_id"]] for d in line["detections"]]).reshape(-1, 6)
    want = tv["refs"][WHOLE]["dets_1_0"].astype(np.float64)  # threshold 0.9
    h, w = frame.shape[:2]
    want[:, :4] *= np.array([w / 320, h / 320, w / 320, h / 320])
    assert len(want) > 0
    assert_same(got, want, "edge-run on the heads' ONNX file")


def test_whole_model_export_decodes_as_torchvision_reports(tv, tmp_path):
    """torchvision_nms: the whole SSDlite exported (its resize, normalisation and NonMaxSuppression in the graph),
    run by edge-run with task.type auto; its boxes are in the input's pixels, and the input is the frame itself."""
    ref = tv["refs"][WHOLE]
    model = tv["out"] / f"{WHOLE}.whole.onnx"
    seen = []
    for i, rgb in enumerate(tv["whole"]):
        cv2.imwrite(str(tmp_path / f"w{i}.png"), np.ascontiguousarray(rgb[:, :, ::-1]))
        config = tmp_path / f"w{i}.yaml"
        # the graph normalises and resizes itself: edge hands it the frame at its size, 0..1
        config.write_text(
            f"model: {{path: {model}}}\ninput: {{resize: stretch}}\n"
            f"task: {{score_threshold: {WHOLE_THRESHOLD}}}\nsource: {{uri: {tmp_path / f'w{i}.png'}}}\n"
        )
        lines = run_results(config, tmp_path / f"w{i}.jsonl", 1)
        got = np.array([[*d["box"], d["score"], d["class_id"]] for d in lines[0]["detections"]]).reshape(-1, 6)
        want = ref[f"whole_{i}"].astype(np.float64)
        want = want[want[:, 4] > WHOLE_THRESHOLD]
        assert_same(got, want[:300], f"whole model, frame {i}")
        seen.append(len(got))
    assert max(seen) > 0


def test_auto_picks_torchvision_nms_and_refuses_what_does_not_fit():
    spec = PreprocessSpec(64, 64)
    whole = [TensorInfo("boxes", ["n", 4], np.dtype(np.float32)), TensorInfo("scores", ["n"], np.dtype(np.float32))]
    whole.append(TensorInfo("labels", ["n"], np.dtype(np.int64)))
    assert heads.choose(TaskConfig(), whole, spec, []).kind == "torchvision_nms"
    # DeepStream-Yolo's three outputs keep their batch axis; the same names with it are not torchvision's
    batched = [TensorInfo(t.name, [1, *t.shape], t.dtype) for t in whole]
    assert heads.choose(TaskConfig(), batched, spec, []).kind == "deepstream_yolo"
    with pytest.raises(ConfigError, match="Mask and Keypoint R-CNN"):
        heads.choose(
            TaskConfig(type="torchvision_nms"), [*whole, TensorInfo("masks", ["n", 1, 64, 64], np.dtype(np.float32))], spec, []
        )


def _decode_whole(outs: dict, **task):
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in outs.items()]
    spec = PreprocessSpec(64, 64)
    t = TaskConfig(**task)
    head = heads.choose(t, infos, spec, [])
    dec = heads.build(head, resolved_task(t, head.kind), infos, spec, [])
    return dec(outs, plan_resize(spec, 64, 64)[2]).detections


def test_torchvision_nms_reads_every_row_empty_and_mismatched_outputs():
    """No batch axis: all rows are detections (reading row 0 as the batch gave one box, or an IndexError on none)."""
    boxes = np.array([[1, 2, 11, 12], [20, 20, 30, 40], [5, 5, 6, 6]], np.float32)
    outs = {"boxes": boxes, "scores": np.array([0.9, 0.8, 0.4], np.float32), "labels": np.array([1, 3, 2], np.int64)}
    dets = _decode_whole(outs)
    assert [(d.box, d.class_id) for d in dets] == [([1, 2, 11, 12], 1), ([20, 20, 30, 40], 3)]  # 0.4 is under 0.5
    assert _decode_whole({k: v[:0] for k, v in outs.items()}) == []
    # torchvision clips before its NMS and reports boxes left with no width or height (seen from the random heads):
    # not backwards corners, so not refused; they have no area in the frame, so they are dropped
    flat = {**outs, "boxes": np.array([[5, 5, 5, 9], [1, 2, 11, 12], [7, 3, 9, 3]], np.float32), "scores": outs["scores"] + 0.2}
    assert [d.box for d in _decode_whole(flat)] == [[1, 2, 11, 12]]
    with pytest.raises(RunFailed, match="hold 3, 2 and 3 detections"):
        _decode_whole({**outs, "scores": outs["scores"][:2]})
    with pytest.raises(RunFailed, match="NaN"):
        _decode_whole({**outs, "boxes": np.full((3, 4), np.nan, np.float32)})


def test_torchvision_refusals_name_the_fix():
    spec = MODELS[WHOLE][0]
    n = 3234  # SSDlite's anchors at 320x320
    outs = [
        TensorInfo("bbox_regression", [1, n, 4], np.dtype(np.float32)),
        TensorInfo("cls_logits", [1, n, 91], np.dtype(np.float32)),
    ]
    t = TaskConfig(type="torchvision")
    assert heads.choose(t, outs, spec, []).maps == [(20, 20), (10, 10), (5, 5), (3, 3), (2, 2), (1, 1)]
    with pytest.raises(ConfigError, match=r"makes 3234 anchors .* the outputs have 3000; set task.torchvision.feature_maps"):
        heads.choose(t, [TensorInfo(o.name, [1, 3000, o.shape[2]], o.dtype) for o in outs], spec, [])
    with pytest.raises(ConfigError, match="has 6 levels"):
        heads.choose(TaskConfig(type="torchvision", torchvision=TorchvisionConfig(feature_maps=[[20, 20]])), outs, spec, [])
    # auto never guesses anchors that are configuration
    with pytest.raises(ConfigError, match="fit none"):
        heads.choose(TaskConfig(), outs, spec, [])


def test_fcos_decodes_a_hand_built_output_by_its_definition():
    """FCOS at 64x64: P3..P7 are 8x8, 4x4, 2x2, 1x1, 1x1 (86 anchors). Anchor 19 is level 0's cell (row 2, column
    3), whose square anchor of size 8 sits on the cell's corner (3 * 8, 2 * 8) = (24, 16), as torchvision's
    AnchorGenerator places it. BoxLinearCoder: [l, t, r, b] = [1, 0.5, 2, 1] anchor sizes from that centre give
    (24 - 8, 16 - 4, 24 + 16, 16 + 8); score sqrt(sigmoid(ln 4) * sigmoid(30)) = sqrt(0.8)."""
    spec = PreprocessSpec(64, 64)
    codes, ctr, logits = (
        np.zeros((1, 86, 4), np.float32),
        np.full((1, 86, 1), 30, np.float32),
        np.full((1, 86, 3), -30, np.float32),
    )
    codes[0, 19] = [1, 0.5, 2, 1]
    logits[0, 19, 1] = np.log(4.0)
    # the very first anchor (cell (0, 0), centred on the corner (0, 0)) counts too: [-8, -8, 8, 8] clipped to the input
    codes[0, 0] = [1, 1, 1, 1]
    logits[0, 0, 2] = np.log(9.0)
    outs = {"bbox_regression": codes, "bbox_ctrness": ctr, "cls_logits": logits}
    head, got = decode("fcos_resnet50_fpn", outs, spec, score_threshold=0.5)
    assert head.maps == [(8, 8), (4, 4), (2, 2), (1, 1), (1, 1)]
    assert got.tolist() == [
        [0, 0, 8, 8, pytest.approx(np.sqrt(0.9), abs=1e-6), 2],
        [16, 12, 40, 24, pytest.approx(np.sqrt(0.8), abs=1e-6), 1],
    ]
    # the centre-ness is found by its name; without one FCOS is refused naming it
    outs.pop("bbox_ctrness")
    with pytest.raises(ConfigError, match="centre-ness"):
        decode("fcos_resnet50_fpn", {**outs, "extra": ctr}, spec)


def test_edge_calib_measures_the_whole_export_by_its_detections(tv, tmp_path, capsys):
    """The whole export's outputs have as many rows as its own NMS keeps, which INT8 changes: edge calib compares
    its detections per image and says which raw outputs it could not pair value by value (it stopped with "a bug in
    edge" on the first image whose INT8 kept another number of rows)."""
    from edge import cli

    frames = tmp_path / "frames"
    frames.mkdir()
    for i, rgb in enumerate(tv["whole"]):
        cv2.imwrite(str(frames / f"{i}.png"), np.ascontiguousarray(rgb[:, :, ::-1]))
    model = tv["out"] / f"{WHOLE}.whole.onnx"
    argv = ["calib", str(model), "--images", str(frames), "--cache", str(tmp_path / "w.cache"), "--equalize", "0"]
    status = cli.main([*argv, "--set", "input.resize=stretch", "--set", f"task.score_threshold={WHOLE_THRESHOLD}"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "decisions of torchvision_nms" in out
    row = next(line.split() for line in out.splitlines() if line.strip().startswith("detections"))
    assert int(row[1]) > 0  # FP32 reports detections on these frames, so the agreement is of something
    assert (tmp_path / "w.cache").is_file()


def test_topk_candidates_cap_each_class_before_nms():
    """SSD keeps per class the best topk_candidates above the threshold before NMS: two far-apart boxes of class 2
    (NMS would keep both) leave only the better at a top-k of 1, and a class-1 box keeps its own place. Anchors 1134
    and 1140 are the first boxes of cells (9, 9) and (9, 10) of SSDlite320's 20x20 level, centred 16 px apart."""
    spec = PreprocessSpec(320, 320)
    logits = np.full((1, 3234, 3), -30.0, np.float32)
    logits[..., 0] = 0
    logits[0, 1134, 2], logits[0, 2000, 2], logits[0, 1140, 1] = np.log(9.0), np.log(4.0), np.log(4.0)
    outs = {"bbox_regression": np.zeros((1, 3234, 4), np.float32), "cls_logits": logits}
    _, all_of_them = decode(WHOLE, outs, spec, score_threshold=0.5)
    assert sorted(all_of_them[:, 5].tolist()) == [1, 2, 2]
    t = TaskConfig(type="torchvision", torchvision=TorchvisionConfig(topk_candidates=1), score_threshold=0.5)
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in outs.items()]
    head = heads.choose(t, infos, spec, [])
    dec = heads.build(head, resolved_task(t, head.kind), infos, spec, [])
    got = dec(outs, plan_resize(spec, 320, 320)[2]).detections
    assert [(d.class_id, round(d.score, 3)) for d in got] == [(2, 0.9), (1, 0.8)]
