"""The build side: ONNX analysis, DLA placement prediction, calibration and the TensorRT builder.

May import onnx, onnxruntime and TensorRT (lazily); the device runtime never imports this package.
"""
