"""The TensorRT builder adapter (`edge-build`): ONNX to an engine for the GPU or a DLA core, INT8 calibrators,
the placement report and the engine's manifest.

Runs where TensorRT's full builder is (a Jetson with JetPack; TensorRT-RTX in CI). May import ``edge.calib``
(the cache format, the image listing), ``edge.dla`` (the pre-build prediction), ``edge.graph``, ``edge.runtime``
(the one preprocessing definition) and the shared top-level modules; imports TensorRT only through ``trt.py``.
Nothing on the device side imports this package.
"""
