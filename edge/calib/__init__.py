"""Host-side INT8 calibration (`edge calib`): activation statistics with ONNX Runtime, scale methods, the
TensorRT calibration-cache format, the Q/DQ writer, the accuracy report, image sets and the CLI.

A laptop tool: it never imports ``edge.builder`` or ``edge.dla``. It may import ``edge.graph``, ``edge.runtime``
(preprocessing, so calibration sees the pixels edge-run feeds) and the shared top-level modules.
"""
