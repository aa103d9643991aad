"""Offline DLA placement prediction (`edge dla`): the rules as data per DLA generation and TensorRT release, the
predictor, the safe rewrites (``--fix``) and the CLI.

A laptop tool: it never imports ``edge.builder`` or ``edge.calib``. It may import ``edge.graph`` and the shared
top-level modules; ONNX and ONNX Runtime are imported lazily.
"""
