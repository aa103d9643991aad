#!/usr/bin/env bash
# On a Jetson, from a clone of edge: everything only a Jetson can confirm, in one file to attach to an issue.
#
#   bash scripts/jetson_check.sh            # on the Jetson (JetPack 5 or 6, its TensorRT and CUDA installed)
#   bash scripts/jetson_check.sh --here     # anywhere: checks the kit itself (every Jetson test skips, saying why)
#   bash scripts/jetson_check.sh --out DIR  # where the bundle goes (default: this folder)
# PYTHON picks the interpreter for --here (default python3); EDGE_JETSON_DEVICE_TESTS the device step's test files.
#
# Steps, each with its own time limit; a failing step does not stop the next:
#   facts      L4T release, module, JetPack's TensorRT/CUDA packages, power mode, Python
#   setup      .venv-jetson with JetPack's own tensorrt and cv2 (--system-site-packages), edge and its test needs
#   doctor     edge doctor --json: the tiny engine on the GPU and each DLA core, telemetry, cameras, services
#   tests      pytest -m jetson (tests/test_jetson.py): engines against ONNX Runtime, INT8 from edge calib, the
#              prediction of edge dla against the build, GPU + both DLA cores at once, rails, device rules, cameras
#   device     pytest -m "not gpu and not jetson" on the device side's tests, on this Python and these libraries
#   bench      bench/preprocess.py (the CUDA preprocessing, pycuda), bench/telemetry.py on /sys, bench/pipeline.py
#   tegrastats 5 s of tegrastats at 500 ms (what the rails and the DLA fields look like on this JetPack)
# The bundle edge-jetson-HOST-DATE.tar.gz holds every log, the JUnit XML, doctor.json, the placement reports and a
# summary.txt. It holds no credentials: nothing here reads any; hostnames and paths are in it.
set -u
cd "$(dirname "$0")/.." || exit 1

here=0
out_dir=$PWD
while [ $# -gt 0 ]; do
  case $1 in
    --here) here=1 ;;
    --out) out_dir=${2:?--out needs a folder}; shift ;;
    -h | --help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "jetson_check.sh: unknown argument $(printf %q "$1") (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ ! -d "$out_dir" ] || [ ! -w "$out_dir" ]; then
  echo "jetson_check.sh: --out $(printf %q "$out_dir") is not a writable folder" >&2  # %q: no escape sequence reaches the terminal
  exit 2
fi
if [ "$here" = 0 ] && [ ! -f /etc/nv_tegra_release ]; then
  echo "jetson_check.sh: not a Jetson (/etc/nv_tegra_release is missing); run it on the Jetson, or --here to check the kit" >&2
  exit 2
fi

stamp=$(date -u +%Y%m%dT%H%M%SZ)
name="edge-jetson-$(hostname | tr -c 'A-Za-z0-9.-' '_' | cut -c1-40)-$stamp"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$work/$name"
mkdir -p "$log"
export PYTHONUNBUFFERED=1 EDGE_JETSON_OUT="$log"
unset EDGE_REQUIRE_SERVERS  # a skip here is reported in the bundle; the allow-list of skips is CI's

step_log=$log
# shellcheck source=scripts/steps.sh
source scripts/steps.sh

facts() {
  echo "edge $(git rev-parse --short HEAD 2>/dev/null || echo '(not a git clone)') $(git status --porcelain 2>/dev/null | grep -q . && echo '(modified)')"
  cat /etc/nv_tegra_release 2>/dev/null || echo "no /etc/nv_tegra_release"
  if [ -r /proc/device-tree/model ]; then tr -d '\0' < /proc/device-tree/model; echo; else echo "no device-tree model"; fi
  uname -a
  dpkg-query -W -f '${Package} ${Version}\n' 'nvidia-jetpack' 'tensorrt' 'libnvinfer*' 'python3-libnvinfer*' 'cuda-runtime*' 'libcudla*' 2>/dev/null
  command -v nvpmodel > /dev/null && nvpmodel -q 2>&1 | head -3
  python3 --version
}

setup() {
  [ -x .venv-jetson/bin/python ] || python3 -m venv --system-site-packages .venv-jetson || return 1
  local py=.venv-jetson/bin/python extras=host
  # JetPack's cv2 has GStreamer (csi://); pip's wheel would shadow it, so it comes only where there is none.
  "$py" -c 'import cv2' 2>/dev/null || extras=host,cv
  "$py" -m pip install -q -e ".[$extras,fleet]" pytest pytest-timeout hypothesis jetson-stats || return 1
  "$py" -c 'import pycuda' 2>/dev/null || PATH=/usr/local/cuda/bin:$PATH "$py" -m pip install -q pycuda \
    || echo "pycuda did not build: the GPU preprocessing checks will say so"
  "$py" -c 'import tensorrt, cv2, onnxruntime; print("tensorrt", tensorrt.__version__, "cv2", cv2.__version__, "onnxruntime", onnxruntime.__version__)'
}

py=${PYTHON:-python3}
step facts 60 facts
if [ "$here" = 0 ]; then
  step setup 1200 setup
  py=.venv-jetson/bin/python
fi
step doctor 600 "$py" -m edge doctor --json "$log/doctor.json"
step tests 3000 "$py" -m pytest -m jetson -rs -p no:cacheprovider --junitxml "$log/jetson-tests.xml" tests/test_jetson.py
# shellcheck disable=SC2086 # a list of test files
step device 1800 "$py" -m pytest -m "not gpu and not jetson" -q -p no:cacheprovider --junitxml "$log/device-tests.xml" ${EDGE_JETSON_DEVICE_TESTS:-\
  tests/test_trt_runtime.py tests/test_engine_gate.py tests/test_manifest.py tests/test_telemetry_sysfs.py \
  tests/test_telemetry_tegrastats.py tests/test_pipeline.py tests/test_sources.py tests/test_preprocess.py}
if [ "$here" = 0 ]; then
  step bench-preprocess 600 "$py" bench/preprocess.py
  step bench-telemetry 600 "$py" bench/telemetry.py --backend sysfs --sysfs-root /sys
  step bench-pipeline 600 "$py" bench/pipeline.py
  step tegrastats 20 bash -c 'timeout -s INT 5 tegrastats --interval 500; [ $? -eq 124 ]'  # stopped by the timeout: ok
fi

printf '%s\n' "${summary[@]}" | tee "$log/summary.txt"
bundle="$out_dir/$name.tar.gz"
tar -czf "$bundle.partial" -C "$work" "$name" && mv "$bundle.partial" "$bundle" || exit 1
echo "wrote $bundle: attach it to the issue"
