"""What every detector shares after its own decoding: kept candidates to ``Detection`` objects in frame pixels."""

from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Detection, Result
from edge.runtime.postprocess.boxes import visible


def label_of(labels: List[str], i: int) -> str:
    return labels[i] if 0 <= i < len(labels) else str(i)


def detections(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    tf: Transform,
    labels: List[str],
    keypoints: Optional[np.ndarray] = None,
    masks: Optional[Any] = None,
) -> Result:
    """Boxes (K, 4) and keypoints (K, P, 2 or 3: x, y and a visibility) in input pixels, best first, to a Result in
    frame pixels. Boxes are clipped to the frame; one left with no area (it lay in the letterbox padding, or had zero
    width) is dropped. ``masks`` (``masks.ProtoMasks`` of the K) makes the masks, only for the boxes kept; a detection
    whose mask has no pixel is dropped too (Ultralytics' predictor does the same)."""
    frame_boxes = tf.to_frame(boxes)
    keep = np.flatnonzero(visible(frame_boxes))
    # Python lists made once per array: one tolist() is cheaper than a conversion per detection
    box_list, score_list, class_list = frame_boxes[keep].tolist(), scores[keep].tolist(), classes[keep].tolist()
    kp_list = kp_scores = None
    if keypoints is not None:
        k = keypoints[keep]
        p = k.shape[1]  # explicit sizes: -1 cannot be inferred for a frame with no detection
        kp_list = tf.to_frame(np.ascontiguousarray(k[:, :, :2]).reshape(len(keep), p * 2)).reshape(len(keep), p, 2).tolist()
        kp_scores = k[:, :, 2].tolist() if k.shape[2] == 3 else None
    names = {c: label_of(labels, c) for c in set(class_list)}
    out = []
    for k, i in enumerate(keep):
        d = Detection(box_list[k], score_list[k], class_list[k], names[class_list[k]])
        if kp_list is not None:
            d.keypoints = kp_list[k]
        if kp_scores is not None:
            d.keypoint_scores = kp_scores[k]
        if masks is not None:
            d.mask = masks.mask(int(i), frame_boxes[i], tf)
            if not any(d.mask["counts"][1::2]):
                continue
        out.append(d)
    return Result(detections=out)
