"""The two score functions decoders apply to logits, written once: overflow-free for any float32 logit."""

from __future__ import annotations

import numpy as np


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # the same function as 1 / (1 + e^-x), without e^-x overflowing


def softmax(x: np.ndarray) -> np.ndarray:
    """Over the last axis; shifted by the maximum so that e^x never overflows."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
