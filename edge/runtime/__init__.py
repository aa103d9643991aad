"""The device side (`edge-run`): sources, preprocessing, inference backends (ONNX Runtime, TensorRT's runtime),
postprocessing, sinks and the threaded pipeline.

Runs on a Jetson with only libnvinfer, pycuda, OpenCV and numpy: it never imports ``edge.builder``, ``edge.calib``
or ``edge.dla`` (checked by the import contract), and imports TensorRT, pycuda and OpenCV lazily. It may import
``edge.telemetry`` and the shared top-level modules.
"""
