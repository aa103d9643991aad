"""ONNX graph helpers shared by the laptop tools and the builder's pre-build pass: loading, build shapes, shape
inference and constant folding.

Imports only ``edge.errors`` and ``edge.lazy`` (and onnx, lazily), so ``edge.calib`` and ``edge.dla`` can both use
it without importing each other.
"""
