"""Instance masks of prototype-mask heads (YOLOv8-seg and its kin), and their run-length encoding in results.

A detection's mask is its coefficients times the prototypes (logits at a quarter of the input size), sampled
bilinearly, kept where the logit is above 0 (a probability above 0.5) and inside its box, as Ultralytics'
``process_mask`` does. edge samples the logits straight into the detection's box in frame pixels (one affine warp),
instead of first up-sampling every mask to the input size and then again to the frame.

Results carry masks as COCO run-length encoding (``{"size": [height, width], "counts": [...]}``, column-major, the
first count is of zeros): it is exact where a polygon would approximate, pycocotools reads it as it is (mask mAP and
IoU need no conversion), and a blob costs about two numbers per column it spans.
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np

from edge.runtime.engines.preprocess import Transform


def rle(crop: np.ndarray, x0: int, y0: int, width: int, height: int) -> Dict[str, Any]:
    """COCO run-length encoding of a boolean ``crop`` placed at (x0, y0) in a frame of ``width`` x ``height``."""
    h, w = crop.shape
    column = np.zeros((height, w), bool)
    column[y0 : y0 + h] = crop
    flat = column.ravel(order="F")
    lead, trail = x0 * height, (width - x0 - w) * height
    if not flat.any():
        return {"size": [height, width], "counts": [width * height]}
    edges = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    runs = np.diff(np.concatenate(([0], edges, [flat.size]))).tolist()
    if flat[0]:
        runs.insert(0, 0)  # counts start with a run of zeros, here an empty one
    runs[0] += lead
    if flat[-1]:
        runs.append(trail)
    else:
        runs[-1] += trail
    return {"size": [height, width], "counts": runs}


def decode_rle(m: Dict[str, Any]) -> np.ndarray:
    """The boolean frame mask of an encoding made by ``rle`` (for tests and tools; the runtime never needs it)."""
    height, width = m["size"]
    values = np.zeros(sum(m["counts"]), bool)
    pos = 0
    for i, n in enumerate(m["counts"]):
        if i % 2:
            values[pos : pos + n] = True
        pos += n
    return values.reshape((width, height)).T


class ProtoMasks:
    """Masks from one frame's prototypes ``(nm, mh, mw)`` for detections with coefficients ``(K, nm)``;
    ``mask(i, frame_box, tf)`` encodes detection i inside its box over the frame."""

    def __init__(self, protos: np.ndarray, coeffs: np.ndarray, input_w: int, input_h: int) -> None:
        self.nm, self.mh, self.mw = protos.shape
        self.protos = protos.reshape(self.nm, -1)
        self.coeffs = coeffs
        self.kx, self.ky = self.mw / input_w, self.mh / input_h  # input pixels -> prototype pixels

    def logits(self, i: int) -> np.ndarray:
        """Detection i's logits at prototype size."""
        return (self.coeffs[i] @ self.protos).reshape(self.mh, self.mw).astype(np.float32, copy=False)

    def mask(self, i: int, frame_box: Any, tf: Transform) -> Dict[str, Any]:
        import cv2

        fx1, fy1 = int(np.floor(frame_box[0])), int(np.floor(frame_box[1]))
        fx2 = min(int(np.ceil(frame_box[2])), tf.frame_width)
        fy2 = min(int(np.ceil(frame_box[3])), tf.frame_height)
        w, h = max(fx2 - fx1, 0), max(fy2 - fy1, 0)
        if w == 0 or h == 0:
            return rle(np.zeros((0, 0), bool), 0, 0, tf.frame_width, tf.frame_height)
        # Pixel centres: frame index j -> input coordinate (j + 0.5) * scale + pad -> prototype index (that * k) - 0.5,
        # the half-pixel convention of a bilinear resize without aligned corners, through both resizes at once.
        ox = ((fx1 + 0.5) * tf.scale_x + tf.pad_x) * self.kx - 0.5
        oy = ((fy1 + 0.5) * tf.scale_y + tf.pad_y) * self.ky - 0.5
        ax, ay = tf.scale_x * self.kx, tf.scale_y * self.ky
        warp = np.array([[ax, 0.0, ox], [0.0, ay, oy]], np.float64)
        sampled = cv2.warpAffine(
            self.logits(i), warp, (w, h), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REPLICATE
        )
        # The box crops at full resolution, after sampling (Ultralytics' process_mask keeps pixel j when x1 <= j < x2);
        # cropping whole prototype cells first ate up to 4 input pixels along each edge.
        cols, rows = np.arange(fx1, fx1 + w), np.arange(fy1, fy1 + h)
        inside = ((rows >= frame_box[1]) & (rows < frame_box[3]))[:, None] & ((cols >= frame_box[0]) & (cols < frame_box[2]))[
            None, :
        ]
        return rle((sampled > 0.0) & inside, fx1, fy1, tf.frame_width, tf.frame_height)
