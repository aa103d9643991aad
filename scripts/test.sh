#!/usr/bin/env bash
# The test suite, as CI runs it: installs what the tests need, fetches every asset the tests read, runs pytest.
#   bash scripts/test.sh            # everything but the GPU tests (in .venv, made if missing)
#   bash scripts/test.sh -k rtsp    # extra arguments go to pytest
#   EDGE_NO_TORCH=1 bash scripts/test.sh   # without torch + ultralytics (the reference of tests/test_ultralytics.py)
#   EDGE_TEST_JOBS=0 bash scripts/test.sh  # one process (default: pytest-xdist, one worker per core and one more)
# As root on Debian/Ubuntu it also installs the real servers the tests talk to on 127.0.0.1
# (GStreamer's RTSP server, OpenSSH, rsync, ffmpeg, mosquitto, Prometheus, headless Chromium); elsewhere those
# tests skip and say why.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  ffmpeg python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-ugly gstreamer1.0-libav openssh-server openssh-client rsync systemd
  mosquitto prometheus chromium fonts-dejavu-core openssl
)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "test.sh: installing Debian packages for the loopback servers: ${APT_PACKAGES[*]}"
  # Wait up to 10 minutes for another apt or unattended-upgrades holding the lock, instead of failing at once.
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${APT_PACKAGES[@]}" >/dev/null
fi

# Containers (this VM among them) often set PYTHONDONTWRITEBYTECODE: then every `edge` process the tests start compiles
# edge's modules again. Writing __pycache__ cut a CLI-heavy pair of test files from 70 to 55 CPU s (2026-12-03).
unset PYTHONDONTWRITEBYTECODE
# Outside a virtual environment (a fresh machine; Debian's Python refuses pip there), make and use .venv.
if [ -z "${VIRTUAL_ENV:-}" ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  source .venv/bin/activate
fi
# --no-compile: pip would byte-compile every module it installs; the tests' processes compile only those they import,
# once (bytecode is written, above). A fresh .venv: torch's install 7.6 s instead of 29.7 s, the rest 29 s instead
# of 42 s; torch's first import 1.9 s slower (2026-12-03).
python -m pip install -q --no-compile -e '.[cv,ort,dev,test]'
# Ultralytics' own post-processing is the reference of tests/test_ultralytics.py (test-only, AGPL: run, never imported
# by edge): a CPU torch (this kind of machine has its wheel on disk; elsewhere pip fetches PyPI's CUDA build), then
# ultralytics without its declared dependencies (torchvision, polars, requests... are not on the tested paths).
# EDGE_NO_TORCH=1 leaves them out (those tests then skip and say why; CI requires them).
if [ "${EDGE_NO_TORCH:-0}" != 1 ]; then
  python -m pip install -q --no-compile torch==2.13.0
  python -m pip install -q --no-compile --no-deps ultralytics==8.4.190
  # torchvision's detection code is the reference of tests/test_torchvision.py (run in a child process, never
  # imported by edge): in a folder of its own, since PyPI's wheel is built for CUDA torch and would break the
  # Ultralytics tests' imports inside .venv (tests/torchvision_reference.py says how the child loads it). The
  # marker is written after pip succeeds: without it an install was cut short, and --upgrade replaces what it left.
  tv="$HOME/.cache/edge/torchvision-0.28.0"
  if [ ! -f "$tv/.installed" ]; then
    python -m pip install -q --no-compile --no-deps --upgrade --target "$tv" torchvision==0.28.0 && touch "$tv/.installed"
  fi
fi
# Every asset the tests read, before they start: a test that checks a command's one-line error must not see a
# first download's progress lines (three did on a machine with an empty cache).
edge assets fetch all
# pytest-xdist, one worker per core and one more (tests take ports and folders of their own): some test files mostly
# wait on servers (MQTT, RTSP, signals), and the extra worker computes meanwhile. Each file stays on one worker
# (--dist loadfile), so a module's fixtures are made once, not once per worker. On 2 cores: 3 workers 441 s, 2 workers
# 630 s, 4 workers 506 s (2026-12-03). EDGE_TEST_JOBS=N sets the workers, 0 runs in one process.
# The 15 slowest tests are listed at the end: where the suite's time goes.
jobs=${EDGE_TEST_JOBS:-$(( $(nproc) + 1 ))}
if [ "$jobs" = 0 ]; then
  python -m pytest -m "not gpu and not jetson" --durations 15 "$@"
else
  python -m pytest -n "$jobs" --dist loadfile -m "not gpu and not jetson" --durations 15 "$@"
fi
