"""CUDA on the device side through pycuda: memory, streams and the preprocessing kernel (imported lazily)."""
