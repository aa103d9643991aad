"""edge: put vision models on NVIDIA Jetson with TensorRT and the DLA."""

__version__ = "0.1.0"
