"""The original SSDLite graph's own outputs, for tests/fixtures/ssdlite: run in TensorFlow on each image (at its own
size, through the graph's own resize and normalisation), it gives the raw head (box encodings, class logits), its
anchors (Concatenate/concat:0) and what its post-processor reports (detection_boxes, scores, classes, num). The ONNX
cut of the same graph is run on the graph's own normalised tensor, to show the two heads agree.

Usage: reference.py GRAPH.pb MODEL_NHWC.onnx OUT_DIR IMAGE_DIR   (images: messi5.jpg, basketball1.png, vtest.avi)
"""

import os
import sys

import cv2
import numpy as np
import onnxruntime as ort
import tensorflow as tf

FETCH = {
    "normalized_image": "Preprocessor/sub:0",
    "box_encodings": "Squeeze:0",
    "class_logits": "concat_1:0",
    "anchors": "Concatenate/concat:0",
    "detection_boxes": "detection_boxes:0",
    "detection_scores": "detection_scores:0",
    "detection_classes": "detection_classes:0",
    "num_detections": "num_detections:0",
}


def frames(folder: str) -> dict:
    out = {n: cv2.imread(os.path.join(folder, f)) for n, f in (("messi5", "messi5.jpg"), ("basketball1", "basketball1.png"))}
    cap = cv2.VideoCapture(os.path.join(folder, "vtest.avi"))  # OpenCV's pedestrian clip, first frame
    ok, out["vtest_frame0"] = cap.read()
    assert ok and all(v is not None for v in out.values())
    return out


def main(pb: str, model: str, out: str, images: str) -> None:
    graph_def = tf.compat.v1.GraphDef()
    with open(pb, "rb") as f:
        graph_def.ParseFromString(f.read())
    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(graph_def, name="")
    sess = tf.compat.v1.Session(graph=graph)
    onnx_sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for name, bgr in frames(images).items():
        r = sess.run(FETCH, {"image_tensor:0": cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)[None]})
        enc, logits = onnx_sess.run(None, {"normalized_image": r["normalized_image"]})
        print(name, "ONNX vs TF raw head, max abs:", float(np.abs(enc - r["box_encodings"]).max()),
              float(np.abs(logits - r["class_logits"]).max()))  # fmt: skip
        np.save(os.path.join(out, "anchors.npy"), r["anchors"])
        keep = {k: r[k] for k in FETCH if k not in ("normalized_image", "anchors")}
        np.savez_compressed(os.path.join(out, f"{name}.npz"), image_shape=np.array(bgr.shape[:2]), **keep)


if __name__ == "__main__":
    main(*sys.argv[1:5])
