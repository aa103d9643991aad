"""The device side (`edge-run`), one room per concern:

- ``sources``: camera URIs, files, folders, frame buffers and pixel formats;
- ``engines``: ONNX Runtime and TensorRT backends, the engine gate, preprocessing (CPU and CUDA);
- ``postprocess``: one decoder per model family over one shared box/NMS/mask core;
- ``status``: the counters and run facts that both the schedule and the outputs read;
- ``outputs``: sinks, MQTT, Prometheus metrics, the live view, the systemd notifier;
- ``schedule``: the pipeline of one source and the pool of many;
- ``runner`` and ``cli`` put them together.

The floors are checked by the import contract (``.importlinter``). Runs on a Jetson with only libnvinfer, pycuda,
OpenCV and numpy: it never imports ``edge.builder``, ``edge.calib`` or ``edge.dla``, and imports TensorRT, pycuda
and OpenCV lazily.
"""
