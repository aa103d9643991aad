"""What ``edge.runtime.postprocess`` hands on: results as the JSON a user reads, the decoders' default thresholds,
the labels file, and the decoder that ``create_postprocessor`` picks from a config and the model's metadata."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge.config import RunConfig, TaskConfig
from edge.errors import ConfigError
from edge.metadata import read
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec, plan_resize
from edge.runtime.postprocess import (
    Classification,
    Detection,
    Result,
    Segment,
    create_postprocessor,
    load_labels,
    resolved_task,
)

SPEC = PreprocessSpec(640, 640)


def test_a_detection_is_written_with_boxes_and_keypoints_to_0_1_px_and_scores_to_4_and_3_places():
    mask = {"size": [2, 2], "counts": [1, 3]}
    d = Detection([1.26, 2.34, 10.04, 20.0], 0.123456, 2, "cup", [[1.26, 2.34]], [0.12345], mask)
    assert d.to_dict() == {
        "box": [1.3, 2.3, 10.0, 20.0],
        "score": 0.1235,
        "class_id": 2,
        "label": "cup",
        "keypoints": [[1.3, 2.3]],
        "keypoint_scores": [0.123],
        "mask": mask,
    }
    assert Detection([0, 0, 1, 1], 0.5).to_dict() == {"box": [0, 0, 1, 1], "score": 0.5, "class_id": 0, "label": ""}


def test_a_result_writes_what_its_decoder_found():
    assert Result().to_dict() == {"detections": []}
    assert Result(classes=[Classification(3, 0.987654, "dog")]).to_dict() == {
        "classes": [{"class_id": 3, "score": 0.9877, "label": "dog"}]
    }
    seg = Segment(1, "road", 6, [0, 0, 3, 2], {"size": [2, 3], "counts": [0, 6]})
    assert Result(segments=[]).to_dict() == {"segments": []}  # a segmenter that found nothing
    assert Result(segments=[seg]).to_dict() == {
        "segments": [{"class_id": 1, "label": "road", "pixels": 6, "box": [0, 0, 3, 2], "mask": seg.mask}]
    }


def test_null_thresholds_take_the_decoders_defaults_and_set_ones_stay():
    # Ultralytics' predict defaults (conf 0.25, iou 0.7, max_det 300) for YOLO heads; BlazeFace 0.5 / 0.3 / 100
    task = resolved_task(TaskConfig(), "yolo")
    assert (task.type, task.score_threshold, task.iou_threshold, task.max_detections) == ("yolo", 0.25, 0.7, 300)
    task = resolved_task(TaskConfig(score_threshold=0.6, max_detections=5), "blazeface")
    assert (task.type, task.score_threshold, task.iou_threshold, task.max_detections) == ("blazeface", 0.6, 0.3, 5)


def labels_config(tmp_path: Path, labels) -> RunConfig:
    return RunConfig(base_dir=tmp_path, task=TaskConfig(labels=labels))


def test_labels_come_from_a_list_or_a_file_of_one_a_line(tmp_path):
    assert load_labels(labels_config(tmp_path, None)) == []
    assert load_labels(labels_config(tmp_path, ["a", "b"])) == ["a", "b"]
    (tmp_path / "names.txt").write_text("person\nbicycle\ncar\n", encoding="utf-8")
    assert load_labels(labels_config(tmp_path, "names.txt")) == ["person", "bicycle", "car"]  # relative to the config


def test_a_labels_file_that_is_not_utf8_or_missing_is_refused_naming_it(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        load_labels(labels_config(tmp_path, "latin1.txt"))
    assert str(err.value) == f"key 'task.labels': {tmp_path / 'latin1.txt'} is not UTF-8 text (byte 3); save it as UTF-8"
    with pytest.raises(ConfigError) as err:
        load_labels(labels_config(tmp_path, "none.txt"))
    assert str(err.value) == f"key 'task.labels': cannot read {tmp_path / 'none.txt'} (No such file or directory)"


def test_the_metadata_names_label_detections_and_its_task_picks_the_head():
    # [1, 8400, 6] with two classes is a transposed v8 head or DeepStream-Yolo's rows: the metadata's task says detect
    meta = read("m.onnx", {"names": "{0: 'cat', 1: 'dog'}", "task": "detect"})
    raw = np.zeros((1, 8400, 6), np.float32)
    raw[0, 0, :4], raw[0, 0, 5] = [100, 100, 40, 40], 0.9  # class 1
    post = create_postprocessor(RunConfig(), [TensorInfo("output0", raw.shape, np.dtype(np.float32))], SPEC, meta)
    assert post.head_info == "yolo v8t (2 classes)"
    assert [d.label for d in post({"output0": raw}, plan_resize(SPEC, 640, 640)[2]).detections] == ["dog"]


def test_a_refusal_names_task_type_where_the_config_set_it():
    cfg = RunConfig(config_file=Path("run.yaml"), task=TaskConfig(type="classify"))
    with pytest.raises(ConfigError, match=r"^run\.yaml: key 'task\.type': classify does not fit the model's outputs"):
        create_postprocessor(cfg, [TensorInfo("output0", (1, 84, 8400), np.dtype(np.float32))], SPEC)
