"""edge: put vision models on NVIDIA Jetson with TensorRT and the DLA."""

import os

__version__ = "0.1.0"

# A few hundred bytes of PNG can claim 30000x30000 pixels and make a decoder allocate gigabytes. OpenCV reads its
# cap once, when cv2 is first imported, so it is set here, before any edge module can import cv2 (8K x 8K).
MAX_IMAGE_PIXELS = 8192 * 8192
os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(MAX_IMAGE_PIXELS))
