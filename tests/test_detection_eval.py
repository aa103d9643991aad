"""Labelled detection sets (COCO JSON, YOLO txt) and their mAP through pycocotools; Ultralytics metadata read as
literals only. The mAP expectations follow COCO's definition worked by hand: a detection matches a ground-truth box of
its class at IoU >= t, and mAP@0.5:0.95 averages AP over t = 0.50, 0.55, ..., 0.95."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from edge.calib import detection_eval
from edge.errors import EdgeError
from edge.metadata import read
from edge.runtime.postprocess import Detection


def det(box, cls=0, score=0.9):
    return Detection([float(v) for v in box], score, cls)


def one_image_set(boxes, classes):
    return detection_eval.DetectionSet("t", ["a.png"], [np.array(boxes, float).reshape(-1, 4)], [np.array(classes)])


def test_perfect_detections_score_one_and_none_score_zero():
    dset = one_image_set([[10, 10, 110, 110], [200, 50, 260, 90]], [0, 3])
    perfect = detection_eval.evaluate(dset, [[det([10, 10, 110, 110], 0), det([200, 50, 260, 90], 3)]])
    assert perfect.map == pytest.approx(1.0) and perfect.map50 == pytest.approx(1.0)
    assert detection_eval.evaluate(dset, [[]]).map == 0.0


def test_an_iou_of_0_6_counts_at_three_of_the_ten_thresholds():
    # ground truth 100x100; the detection is shifted 25 px: overlap 75x100 = 7500, union 12500, IoU 0.6
    dset = one_image_set([[0, 0, 100, 100]], [0])
    score = detection_eval.evaluate(dset, [[det([25, 0, 125, 100])]])
    assert score.map50 == pytest.approx(1.0)
    assert score.map == pytest.approx(0.3)  # matched at 0.50, 0.55, 0.60 of 0.50..0.95


def test_a_detection_of_another_class_is_a_miss():
    dset = one_image_set([[0, 0, 100, 100]], [0])
    assert detection_eval.evaluate(dset, [[det([0, 0, 100, 100], cls=1)]]).map50 == 0.0


def write_image(path, w=200, h=100):
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.full((h, w, 3), 128, np.uint8))


def test_yolo_txt_labels_are_normalised_centres(tmp_path):
    write_image(tmp_path / "images" / "a.png")
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "a.txt").write_text("2 0.5 0.5 0.2 0.4\n")
    dset = detection_eval.load(str(tmp_path), [])
    np.testing.assert_allclose(dset.boxes[0], [[80, 30, 120, 70]])
    assert dset.classes[0].tolist() == [2]


def test_coco_json_maps_categories_by_name_else_by_rank(tmp_path):
    write_image(tmp_path / "a.png")
    doc = {
        "images": [{"id": 7, "file_name": "a.png"}],
        "annotations": [
            {"image_id": 7, "category_id": 18, "bbox": [10, 20, 30, 40]},
            {"image_id": 7, "category_id": 1, "bbox": [0, 0, 5, 5], "iscrowd": 1},
        ],
        "categories": [{"id": 1, "name": "person"}, {"id": 18, "name": "dog"}],
    }
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    by_rank = detection_eval.load(str(tmp_path), [])
    np.testing.assert_allclose(by_rank.boxes[0], [[10, 20, 40, 60]])  # the crowd region is left out
    assert by_rank.classes[0].tolist() == [1]  # id 18 is the second category id
    by_name = detection_eval.load(str(tmp_path), ["cat", "bird", "dog", "person"])
    assert by_name.classes[0].tolist() == [2]


@pytest.mark.parametrize(
    "doc,message",
    [
        ("not json", "not COCO JSON"),
        (json.dumps({"images": []}), "needs lists 'images', 'annotations' and 'categories'"),
        (
            json.dumps({"images": [{"id": 1, "file_name": "../../etc/passwd"}], "annotations": [], "categories": []}),
            "is not in",
        ),
        (
            json.dumps({"images": [{"id": 1, "file_name": "a.png"}], "annotations": [{"image_id": 1}], "categories": []}),
            "lacks or mistypes a field",
        ),
    ],
)
def test_a_broken_annotation_file_is_one_error_naming_it(tmp_path, doc, message):
    write_image(tmp_path / "a.png")
    (tmp_path / "ann.json").write_text(doc)
    with pytest.raises(EdgeError, match=message) as err:
        detection_eval.load(str(tmp_path), [])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "line,message",
    [("person 0.5 0.5 0.2 0.4", "a.txt: expected lines 'class cx cy w h'"), ("-1 0.5 0.5 0.2 0.4", "with a class index first")],
)
def test_a_label_line_that_is_not_a_class_index_and_a_box_is_refused(tmp_path, line, message):
    write_image(tmp_path / "images" / "a.png")
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "a.txt").write_text(line + "\n")
    with pytest.raises(EdgeError, match=message):
        detection_eval.load(str(tmp_path), [])


# -- Ultralytics metadata: literals, never code ---------------------------------------------------------------------


def test_names_are_read_as_a_literal_and_code_is_never_run(tmp_path):
    marker = tmp_path / "ran"
    meta = read("m.onnx", {"names": "{0: 'person', 1: 'car'}", "imgsz": "[480, 640]", "task": "detect", "stride": "32"})
    assert meta.names == ("person", "car") and meta.imgsz == (480, 640) and meta.task == "detect" and meta.stride == 32
    hostile = {"names": f"__import__('pathlib').Path({str(marker)!r}).touch()", "imgsz": "640", "task": "detect"}
    with pytest.raises(EdgeError, match="metadata 'names'"):
        read("m.onnx", hostile)
    assert not marker.exists()


def test_oversized_or_odd_metadata_is_refused_or_ignored():
    with pytest.raises(EdgeError, match="more than a model's metadata holds"):
        read("m.onnx", {"names": "{" + "0: 'a', " * 200_000 + "}", "task": "detect"})
    assert not read("m.onnx", {"names": "{0: 'a'}"}).ultralytics  # no imgsz, stride or task: not Ultralytics'
    odd = read("m.onnx", {"names": "{0: 'a'}", "task": "juggle", "imgsz": "[0, -3]", "kpt_shape": "[17, 9]"})
    assert (odd.task, odd.imgsz, odd.kpt_shape) == (None, None, None)


@pytest.mark.parametrize(
    "raw,message",
    [
        ({"names": "{-1: 'a'}", "task": "detect"}, "not a mapping of class index to name"),
        ({"names": "{True: 'a'}", "task": "detect"}, "not a mapping of class index to name"),
        ({"names": "{'x': 'a'}", "task": "detect"}, "not a mapping of class index to name"),
        ({"names": "{100000: 'a'}", "task": "detect"}, "has class index 100000"),
    ],
)
def test_names_that_are_not_class_indices_are_refused(raw, message):
    with pytest.raises(EdgeError, match=message):
        read("m.onnx", raw)


def test_names_as_a_list_and_nhwc_shape_hints():
    from edge.metadata import shape_hint

    assert read("m.onnx", {"names": "['a', 'b']", "task": "detect"}).names == ("a", "b")
    meta = read("m.onnx", {"names": "{0: 'a'}", "imgsz": "[320, 480]", "task": "detect"})
    assert shape_hint([None, None, None, 3], meta) == "1x320x480x3"  # NHWC: height, width, then channels


def test_a_fifo_where_the_annotation_file_goes_is_refused_unread(tmp_path):
    """A named pipe would block the read for ever: it is refused by what it is, before anything opens it."""
    import os

    write_image(tmp_path / "a.png")
    os.mkfifo(tmp_path / "ann.json")
    with pytest.raises(EdgeError, match="ann.json': not a regular file"):
        detection_eval.load(str(tmp_path), [])
