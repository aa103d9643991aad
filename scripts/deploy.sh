#!/bin/sh
# Thin wrapper: `scripts/deploy.sh ARGS...` is `edge deploy ARGS...`, and works from a checkout without installing.
# Example: scripts/deploy.sh jetson@cam-01 --name front --engine yolov8n.engine --config front.yaml
here=$(cd "$(dirname "$0")/.." && pwd)
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec "${PYTHON:-python3}" -m edge.cli deploy "$@"
