"""The DLA placement rules as data: one rule catalogue with sources, one limits table per DLA generation and TensorRT.

The predictor in ``predict.py`` only reads these tables, so a new JetPack (a new TensorRT) is a new ``Limits`` row
and, where NVIDIA documents a new restriction, a new ``Rule``. Every rule names where it comes from and how
strong that source is: a public TensorRT header, NVIDIA documentation, a build log someone posted, or our own
inference; a rule no source settles is ``unconfirmed`` and says so in every report that uses it. The numbers are
held against the NvInfer.h notes of 8.5.2, 8.6.1 and 10.3.0 in tests/test_dla_sources.py, and the whole predictor
against published build logs in tests/test_dla_corpus.py; none of it has been run on a Jetson by this project.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Tuple

from edge.errors import EdgeError

H852 = "https://github.com/NVIDIA/TensorRT/blob/8.5.2/include/NvInfer.h"
H1030 = "https://github.com/NVIDIA/TensorRT/blob/v10.3.0/include/NvInfer.h"
H1030_RT = "https://github.com/NVIDIA/TensorRT/blob/v10.3.0/include/NvInferRuntime.h"
DOCS_RESTRICT = "https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/dla-layer-restrictions.html"
DOCS_BUILD = "https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/dla-build-and-run.html"
DOCS_RUNCFG = "https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/dla-runtime-configuration.html"
DOCS_REDUCE = "https://docs.nvidia.com/deeplearning/tensorrt/operators/docs/Reduce.html"
DOCS_TRT11_DLA = "https://docs.nvidia.com/deeplearning/tensorrt/11.4.1/inference-library/work-with-dla.html"
DOCS_TRT11_TYPED = "https://docs.nvidia.com/deeplearning/tensorrt/11.4.1/inference-library/dla-strongly-typed-networks.html"
TUTORIAL = "https://github.com/NVIDIA-AI-IOT/jetson_dla_tutorial/blob/7a8a98c55140c10691af8628f0bfb17ff67b492a/README.md"
DLA_FAQ = "https://github.com/NVIDIA/Deep-Learning-Accelerator-SW/blob/main/FAQ/README.md"
LOG_2023 = "https://pastebin.com/r3meGUdD"
LOG_CONCAT = "https://github.com/ultralytics/ultralytics/issues/18012"
LOG_SLICE = "https://github.com/ultralytics/ultralytics/issues/23488"
LOG_CAP = "https://github.com/lewes6369/TensorRT-Yolov3/issues/86"
LOG_QDQ = "https://github.com/NVIDIA/TensorRT/issues/2222"
LOG_GATHER = "https://github.com/NVIDIA/TensorRT/issues/2318"
GUIDE_84 = "https://docs.nvidia.com/deeplearning/tensorrt/archives/tensorrt-840-ea/developer-guide/index.html#dla_layers"
LOG_DIV_86 = "https://github.com/ultralytics/ultralytics/pull/16449"
DLA_SW_MODELS = "https://github.com/NVIDIA/Deep-Learning-Accelerator-SW/blob/main/scripts/prepare_models/README.md"
PARSER_85 = "https://github.com/onnx/onnx-tensorrt/blob/8.5-GA/builtin_op_importers.cpp"
PARSER_100 = "https://github.com/onnx/onnx-tensorrt/blob/release/10.0/onnxOpImporters.cpp"


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str  # the limit, in one line
    sources: Tuple[str, ...]
    evidence: str  # header | docs | log | parser | inference
    unconfirmed: bool = False  # no source settles it (our inference, or the sources disagree)


def _r(rule_id: str, summary: str, evidence: str, *sources: str, unconfirmed: bool = False) -> Rule:
    return Rule(rule_id, summary, tuple(sources), evidence, unconfirmed or evidence == "inference")


RULES: Dict[str, Rule] = {
    r.id: r
    for r in (
        # General restrictions: every layer of a DLA loadable.
        _r(
            "gen.static", "every dimension must be known at build time (profile min = opt = max)", "docs", DOCS_RESTRICT, H1030_RT
        ),
        _r("gen.dtype", "DLA computes in FP16 or INT8 only; tensors must be floating point", "docs", DOCS_BUILD),
        _r(
            "gen.typed",
            "TensorRT 11 DLA builds are strongly typed: FP32 tensors in the ONNX stay FP32, which DLA cannot run",
            "docs",
            DOCS_TRT11_TYPED,
        ),
        _r(
            "gen.rank4",
            "DLA layers work on 4-D NCHW tensors (the headers say 2-D only for conv/pool/deconv; a log shows it for slices)",
            "log",
            DOCS_RESTRICT,
            H1030,
            LOG_CONCAT,
            unconfirmed=True,
        ),
        _r(
            "gen.dim",
            "every non-batch dimension must be <= 8192 (this also caps conv/FC output maps and groups)",
            "docs",
            DOCS_RESTRICT,
            H1030,
        ),
        _r("gen.batch", "the batch (product of all but the trailing C, H, W) must be <= 4096", "docs", DOCS_RESTRICT),
        _r(
            "gen.qdq",
            "DLA does not consume explicit Q/DQ quantization on Jetson; remove Q/DQ and use a calibration cache",
            "log",
            LOG_QDQ,
            DLA_FAQ,
        ),
        _r(
            "op.unsupported",
            "this layer type has no DLA implementation (Gather, RNN, normalisations, Where, ...)",
            "header",
            H1030,
            LOG_GATHER,
            TUTORIAL,
        ),
        _r("op.unknown", "no DLA rule is known for this operator; predicted on GPU", "inference"),
        _r(
            "parser.missing",
            "this TensorRT's ONNX parser has no importer for the operator: the parse fails unless a plugin provides it",
            "parser",
            PARSER_85,
            PARSER_100,
        ),
        _r(
            "op.malformed",
            "the node's attributes or inputs do not fit its operator: TensorRT's parser rejects such a node",
            "parser",
            PARSER_85,
            PARSER_100,
        ),
        _r(
            "shuffle",
            "Reshape/Transpose/Flatten become SHUFFLE layers, which in practice fall back to GPU",
            "log",
            LOG_CONCAT,
            TUTORIAL,
        ),
        # Convolution and friends.
        _r("conv.kernel", "convolution kernel H,W in [1,32]", "header", H1030),
        _r("conv.stride", "convolution stride H,W in [1,8]", "header", H1030),
        _r("conv.pad", "convolution padding H,W in [0,31] and smaller than the kernel", "header", H1030),
        _r("conv.dilation", "convolution dilation H,W in [1,32]", "header", H1030),
        _r("conv.weights", "convolution weights must be build-time constants", "header", H1030),
        _r(
            "conv.int8_group",
            "INT8 grouped convolution needs channels per group to be a multiple of 4 (else FP16)",
            "header",
            H1030,
        ),
        _r(
            "deconv.kernel",
            "deconvolution kernel H,W in [1,32], or 64/96/128 in one dimension with 1 in the other",
            "header",
            H1030,
        ),
        _r(
            "deconv.stride",
            "deconvolution stride H,W in [1,32], or 64/96/128 in one dimension with 1 in the other",
            "header",
            H1030,
        ),
        _r("deconv.pad", "deconvolution padding must be 0", "header", H1030),
        _r("deconv.square", "square deconvolution kernels and strides in [23, 32] are disabled on DLA", "docs", GUIDE_84),
        _r("deconv.groups", "deconvolution groups must be 1", "header", H1030),
        _r("deconv.dilation", "deconvolution has no dilation on DLA", "header", H1030),
        _r(
            "matmul.weights",
            "a matrix multiply runs on DLA only as a fully connected layer with constant weights",
            "log",
            TUTORIAL,
            LOG_GATHER,
        ),
        _r(
            "matmul.fc",
            "the builder turns Gemm/MatMul with constant 2-D weights on a 2-D input into a fully connected layer "
            "(its own DLA loadable; reshape_after on GPU); other ranks stay matrix multiplies on GPU",
            "log",
            TUTORIAL,
            unconfirmed=True,
        ),
        # Pooling and reductions.
        _r("pool.window", "pooling window H,W in [1,8]", "header", H852),
        _r("pool.stride", "pooling stride H,W in [1,16]", "header", H852),
        _r("pool.pad", "pooling padding H,W in [0,7]", "header", H852),
        _r("pool.kind", "only MAX and AVERAGE pooling", "header", H852),
        _r(
            "pool.exclusive",
            "Xavier: average pooling supports inclusive padding only (ONNX count_include_pad=0 is exclusive)",
            "header",
            H852,
        ),
        _r(
            "pool.global",
            "GlobalAveragePool/ReduceMean become REDUCE layers, which run on GPU ('DLA cores do not support AVG Reduce')",
            "log",
            TUTORIAL,
            LOG_2023,
        ),
        _r("reduce.op", "Reduce on DLA: MAX only, and only from TensorRT 10", "inference", DOCS_REDUCE),
        _r("reduce.axes", "Reduce on DLA may only reduce C, H and W", "docs", DOCS_REDUCE),
        # Point-wise layers.
        _r(
            "act.kind",
            "DLA activations: ReLU, Sigmoid, TanH, Clip, Leaky ReLU (no HardSigmoid/HardSwish/others)",
            "docs",
            H1030,
            DOCS_RESTRICT,
            LOG_2023,
        ),
        _r("act.clip", "Clip runs on DLA only as a clipped ReLU: lower bound 0, upper bound in [1, 127]", "docs", GUIDE_84),
        _r(
            "act.leaky",
            "Leaky ReLU on DLA: the 8.4 guide and the current docs list it, the headers 8.5.2-10.3 list RELU/SIGMOID/"
            "TANH/CLIP only; kept on DLA",
            "docs",
            GUIDE_84,
            DOCS_RESTRICT,
            H1030,
            unconfirmed=True,
        ),
        _r("prelu.slope", "PReLU slope must be a build-time constant", "header", H1030),
        _r(
            "elt.op",
            "element-wise ops on DLA: SUM, PROD, MAX, MIN, SUB through 10.x (headers 8.5.2-10.3; 'DLA cores do not "
            "support DIV' on 8.6); DIV and POW only in the 11.4 table (current docs, unconfirmed on a device)",
            "header",
            H1030,
            DOCS_RESTRICT,
            LOG_2023,
            LOG_DIV_86,
        ),
        _r(
            "elt.broadcast",
            "element-wise broadcasting: an operand must be full-size, per-channel [1,C,1,1] or a scalar",
            "inference",
            DOCS_RESTRICT,
        ),
        _r("cmp.int8", "comparisons run on DLA in INT8 only, straight into a Cast", "docs", DOCS_RESTRICT),
        _r("unary.op", "the only DLA unary op is ABS", "header", H1030),
        _r("lrn.window", "LRN window must be 3, 5, 7 or 9, across channels", "header", H1030),
        _r("softmax.gen", "Xavier's DLA has no SoftMax", "header", H852),
        _r("softmax.axis", "DLA SoftMax axis must be C, H or W, not the batch", "header", H1030),
        _r("softmax.size", "DLA SoftMax axis <= 8192 when every other non-batch dim is 1, else <= 1024", "header", H1030),
        # Data movement.
        _r("concat.axis", "DLA concatenates only along the channel axis", "header", H1030, LOG_CONCAT),
        _r("concat.inputs", "DLA concatenation needs at least two inputs", "header", H1030, LOG_CAP),
        _r("resize.scales", "Resize must be given by 4 scales with N and C at 1 (no explicit output size)", "header", H1030),
        _r("resize.range", "Resize H,W scales must be integers in [1,32] (nearest) or [1,4] (linear)", "header", H1030),
        _r(
            "resize.mode",
            "Resize modes: nearest asymmetric+floor or half_pixel+round_prefer_floor/ceil; linear half_pixel",
            "header",
            H1030,
        ),
        _r("slice.const", "Slice start, size and axes must be build-time constants", "header", H1030),
        _r("slice.step", "Slice strides must all be 1", "header", H1030),
        _r("slice.axis0", "no slicing on the first (batch) dimension", "header", H1030, LOG_SLICE),
        _r("pad.fill", "Pad becomes a fill-mode SLICE, but DLA slices are STRICT_BOUNDS only", "inference", H1030),
        _r(
            "pad.conv",
            "a zero Pad of H and W feeding only a convolution or pooling becomes that layer's padding (NVIDIA's "
            "prepared ResNet-50 models keep such Pads and build for the DLA without GPU fallback)",
            "log",
            DLA_SW_MODELS,
            unconfirmed=True,
        ),
        _r(
            "scale.standalone",
            "a SCALE layer no convolution absorbs (BatchNormalization, or Mul/Add by a per-channel constant) ran on GPU "
            "in TensorRT 8.4's log; the header has no DLA note for SCALE",
            "log",
            TUTORIAL,
            unconfirmed=True,
        ),
        # Whole-subgraph limits.
        _r("sub.cap", "at most 16 DLA loadables (subgraphs) per DLA core; the rest go to GPU", "docs", DOCS_RESTRICT, LOG_CAP),
        _r("sub.weights", "weights of one DLA subgraph must total < 512 MiB (DLA_GLOBAL_DRAM)", "header", H1030_RT),
        _r("sub.local", "intermediate tensors of one DLA subgraph must total < 1 GiB (DLA_LOCAL_DRAM)", "header", H1030),
    )
}


@dataclass(frozen=True)
class Limits:
    """The numbers and sets one (DLA generation, TensorRT) pair allows."""

    generation: str  # xavier | orin
    trt: str
    jetpack: str
    conv_kernel: Tuple[int, int] = (1, 32)
    conv_stride: Tuple[int, int] = (1, 8)
    conv_pad: Tuple[int, int] = (0, 31)
    conv_dilation: Tuple[int, int] = (1, 32)
    max_maps: int = 8192  # output maps of a conv; --fix splits wider ones
    deconv_range: Tuple[int, int] = (1, 32)
    deconv_wide: FrozenSet[int] = frozenset({64, 96, 128})
    deconv_square_gap: Tuple[int, int] = (23, 32)  # square deconvolution kernels/strides TensorRT disables
    clip_max: float = 127.0  # Clip runs as a clipped ReLU: lower bound 0, upper bound in [1, clip_max]
    pool_window: Tuple[int, int] = (1, 8)
    pool_stride: Tuple[int, int] = (1, 16)
    pool_pad: Tuple[int, int] = (0, 7)
    pool_exclusive_pad: bool = True  # False on Xavier: inclusive padding only
    activations: FrozenSet[str] = frozenset({"Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu"})
    eltwise: FrozenSet[str] = frozenset({"Add", "Sum", "Mul", "Sub", "Max", "Min"})
    reduce_max: bool = False
    softmax: bool = True
    softmax_accurate_max: int = 8192
    softmax_max: int = 1024
    resize_nearest_max: int = 32
    resize_linear_max: int = 4
    lrn_windows: FrozenSet[int] = frozenset({3, 5, 7, 9})
    max_dim: int = 8192
    max_batch: int = 4096
    max_subgraphs: int = 16
    max_weight_bytes: int = 512 << 20
    max_local_bytes: int = 1 << 30
    strongly_typed: bool = False

    @property
    def key(self) -> str:
        return f"{self.generation}/trt{self.trt}"


# One row per supported (generation, TensorRT). Xavier stops at JetPack 5 / TensorRT 8.5.2; TensorRT 10.7 is the
# last 10.x with DLA; 11.4.1 brings DLA back on Orin (JetPack 7.2.2+) with strongly typed builds only.
TABLES: Dict[Tuple[str, str], Limits] = {
    ("xavier", "8.5"): Limits("xavier", "8.5", "5.1.x", softmax=False, pool_exclusive_pad=False),
    ("orin", "8.5"): Limits("orin", "8.5", "5.1.x"),
    ("orin", "8.6"): Limits("orin", "8.6", "6.0"),
    ("orin", "10.3"): Limits("orin", "10.3", "6.1/6.2", reduce_max=True),
    ("orin", "10.7"): Limits("orin", "10.7", "6.x", reduce_max=True),
    ("orin", "11.4"): Limits(
        "orin",
        "11.4",
        "7.2.2+",
        reduce_max=True,
        strongly_typed=True,
        eltwise=frozenset({"Add", "Sum", "Mul", "Sub", "Max", "Min", "Div", "Pow"}),
    ),
}

DEFAULT_TRT = {"xavier": "8.5", "orin": "10.3"}
TARGETS = ("orin", "xavier")
TRT_VERSIONS = ("8.5", "8.6", "10.3", "10.7", "11.4")


def limits_for(target: str, trt: Optional[str] = None) -> Limits:
    """The limits table for a target, with a clear error for pairs NVIDIA never shipped."""
    target = target.lower()
    if target not in TARGETS:
        raise EdgeError(f"unknown DLA target '{target}'; choose one of: {', '.join(TARGETS)}")
    trt = trt or DEFAULT_TRT[target]
    if trt.count(".") > 1:  # accept 8.5.2 or 10.3.0 as well
        trt = ".".join(trt.split(".")[:2])
    try:
        return TABLES[(target, trt)]
    except KeyError:
        known = ", ".join(t for g, t in TABLES if g == target)
        if target == "xavier":
            why = "Xavier stops at JetPack 5 (TensorRT 8.5); JetPack 6 and later support Orin only"
        else:
            why = "TensorRT 11.0-11.3 have no DLA; JetPack 6.0 ships 8.6, 6.1/6.2 ship 10.3"
        raise EdgeError(f"no DLA rules for {target} with TensorRT {trt}: {why}; known for {target}: {known}") from None
