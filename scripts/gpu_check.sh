#!/usr/bin/env bash
# Everything that needs the GPU machine for the frame path (issue 16) and the GPU tests before it, in one call:
#
#   source .whl/gpu-env.sh && bash scripts/gpu_check.sh
#
# Steps, each with its own time limit so the summary always prints inside one 10-minute device command:
#   env      the GPU, the driver, pycuda, OpenCV (what the numbers were measured with)
#   compile  nvcc builds preprocess.cu for this GPU and prints registers and spills per kernel
#   bench    python3 bench/preprocess.py: the table of docs/benchmarks.md and the issue's targets as ratios
#   tests    python3 -m pytest -m gpu on tests/test_gpu_*.py (the formats test in parallel where pytest-xdist is)
# A failing step does not stop the next; the last lines say which passed. Logs go to $OUT (the device tool brings
# that folder back), else ./gpu-check-out. The demo assets come from $EDGE_CACHE, or .whl/edge-cache when it holds
# them (the GPU machine cannot fetch: copy ~/.cache/edge/assets/{megamind,blazeface-back-256} there first).
set -u
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-gpu-check-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -z "${EDGE_CACHE:-}" ] && [ -d .whl/edge-cache/assets ]; then
  export EDGE_CACHE=$PWD/.whl/edge-cache
fi

step_log=$out STEP_SHOW=all
# shellcheck source=scripts/steps.sh
source scripts/steps.sh

step env 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader;
  python3 -c "import pycuda.driver as d, cv2, numpy; d.init(); dev = d.Device(0);
print(dev.name(), \"cc\", dev.compute_capability(), \"integrated\", dev.get_attribute(d.device_attribute.INTEGRATED),
      \"can_map_host_memory\", dev.get_attribute(d.device_attribute.CAN_MAP_HOST_MEMORY));
print(\"CUDA driver\", d.get_driver_version(), \"pycuda\", __import__(\"pycuda\").VERSION, \"OpenCV\", cv2.__version__, \"numpy\", numpy.__version__);
print(\"EDGE_CACHE\", __import__(\"os\").environ.get(\"EDGE_CACHE\"))"'
step compile 60 bash -c 'set -o pipefail; cc=$(python3 -c "import pycuda.driver as d; d.init(); print(\"%d%d\" % d.Device(0).compute_capability())");
  nvcc -c -arch=sm_$cc -Xptxas -v edge/runtime/engines/cuda/preprocess.cu -o /tmp/preprocess.o 2>&1 | grep -E "error|warning|registers" | sort | uniq -c'
step bench 150 python3 bench/preprocess.py
xdist=()
python3 -c "import xdist" 2>/dev/null && xdist=(-n 8)
step formats 240 python3 -m pytest -m gpu -q -p no:cacheprovider -rs "${xdist[@]}" tests/test_gpu_frames.py
step tests 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rs -s tests/test_gpu_trt.py tests/test_gpu_fleet.py

echo
echo "=== summary (logs in $out/)"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
grep -E "target|all targets" "$out/bench.log" 2>/dev/null | tee -a "$out/summary.txt"
