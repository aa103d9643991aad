"""What TensorRT's ONNX parser makes of each ONNX node, per TensorRT release: the layers a user sees in the build log.

Read from the parser sources (onnx-tensorrt ``builtin_op_importers.cpp`` at 8.5-GA and 8.6-GA,
``onnxOpImporters.cpp`` at 10.0; 10.3, 10.7 and 11.4 use the 10.0 table, the newest source read) and from
published build logs for what the builder does afterwards (fully connected conversion, fusions). Layer names
follow the build log: the parser names a node's main layer after the node (``ctx->registerLayer(layer,
node.name())``); the layers it adds around it are unnamed (``(Unnamed Layer* N) [Shuffle]``), and the builder's
own reshapes around a fully connected layer are ``reshape_before_<node>`` / ``reshape_after_<node>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Tuple

PARSER_SOURCES = {
    "8.5": "https://github.com/onnx/onnx-tensorrt/blob/8.5-GA/builtin_op_importers.cpp",
    "8.6": "https://github.com/onnx/onnx-tensorrt/blob/8.6-GA/builtin_op_importers.cpp",
    "10.0": "https://github.com/onnx/onnx-tensorrt/blob/release/10.0/onnxOpImporters.cpp",
}
# The parser source each supported TensorRT release is read against.
PARSER_OF = {"8.5": "8.5", "8.6": "8.6", "10.3": "10.0", "10.7": "10.0", "11.4": "10.0"}

# ONNX operators with an importer (DEFINE_BUILTIN_OP_IMPORTER) in onnx-tensorrt 8.5-GA; later releases add to it.
_OPS_85 = frozenset(
    """Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization Cast Ceil Celu Clip
    Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum DepthToSpace DequantizeLinear Div Dropout Einsum
    Elu Equal Erf Exp Expand EyeLike Flatten Floor GRU Gather GatherElements GatherND Gemm GlobalAveragePool
    GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GridSample HardSigmoid HardSwish Identity If ImageScaler
    InstanceNormalization IsNaN LRN LSTM LeakyRelu Less LessOrEqual Log LogSoftmax Loop LpNormalization LpPool MatMul
    Max MaxPool Mean MeanVarianceNormalization Min Mod Mul Neg NonMaxSuppression NonZero Not OneHot Or PRelu Pad
    ParametricSoftplus Pow QuantizeLinear RNN RandomNormal RandomNormalLike RandomUniform RandomUniformLike Range
    Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum
    ReduceSumSquare Relu Reshape Resize ReverseSequence RoiAlign Round ScaledTanh Scan Scatter ScatterElements
    ScatterND Selu Shape Shrink Sigmoid Sign Sin Sinh Size Slice Softmax Softplus Softsign SpaceToDepth Split Sqrt
    Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile TopK Transpose Trilu Unsqueeze Upsample Where Xor""".split()
)
_OPS_86 = _OPS_85 | {"GroupNormalization", "IsInf", "LayerNormalization"}
_OPS_100 = _OPS_86 | {"CastLike", "Gelu", "Hardmax", "Mish"}
PARSER_OPS: Dict[str, FrozenSet[str]] = {"8.5": _OPS_85, "8.6": _OPS_86, "10.0": _OPS_100}

_ACT = {
    "Relu": "RELU",
    "Sigmoid": "SIGMOID",
    "Tanh": "TANH",
    "Clip": "CLIP",
    "LeakyRelu": "LEAKY_RELU",
    "HardSigmoid": "HARD_SIGMOID",
    "Elu": "ELU",
    "Selu": "SELU",
    "Softplus": "SOFTPLUS",
    "Softsign": "SOFTSIGN",
    "ThresholdedRelu": "THRESHOLDED_RELU",
    "ScaledTanh": "SCALED_TANH",
    "ParametricSoftplus": "SOFTPLUS",
    "Celu": "ELU",
    "Gelu": "GELU_ERF",
}
_ELT = {"Add": "SUM", "Sum": "SUM", "Sub": "SUB", "Mul": "PROD", "Div": "DIV", "Max": "MAX", "Min": "MIN", "Pow": "POW"}
_ELT |= {"Equal": "EQUAL", "Greater": "GREATER", "Less": "LESS", "And": "AND", "Or": "OR", "Xor": "XOR", "Mod": "FLOOR_DIV"}
_ELT |= {"GreaterOrEqual": "GREATER+EQUAL", "LessOrEqual": "LESS+EQUAL"}  # two comparisons and an OR
_UNARY = {
    "Abs": "ABS",
    "Exp": "EXP",
    "Log": "LOG",
    "Sqrt": "SQRT",
    "Reciprocal": "RECIP",
    "Neg": "NEG",
    "Floor": "FLOOR",
    "Ceil": "CEIL",
    "Round": "ROUND",
    "Erf": "ERF",
    "Not": "NOT",
    "Sign": "SIGN",
    "IsNaN": "ISNAN",
    "IsInf": "ISINF",
}
_UNARY |= {op: op.upper() for op in ("Sin", "Cos", "Tan", "Sinh", "Cosh", "Asin", "Acos", "Atan", "Asinh", "Acosh", "Atanh")}
_KIND = {
    "Conv": "CONVOLUTION",
    "ConvTranspose": "DECONVOLUTION",
    "MaxPool": "POOLING(MAX)",
    "AveragePool": "POOLING(AVERAGE)",
    "LpPool": "POOLING",
    "BatchNormalization": "SCALE",
    "ImageScaler": "SCALE",
    "PRelu": "PARAMETRIC_RELU",
    "LRN": "LRN",
    "Softmax": "SOFTMAX",
    "LogSoftmax": "SOFTMAX",
    "Hardmax": "TOPK",
    "Concat": "CONCATENATION",
    "Resize": "RESIZE",
    "Upsample": "RESIZE",
    "Slice": "SLICE",
    "Split": "SLICE",
    "Pad": "SLICE(FILL)",
    "MatMul": "MATRIX_MULTIPLY",
    "Gemm": "MATRIX_MULTIPLY",
    "Einsum": "EINSUM",
    "Reshape": "SHUFFLE",
    "Flatten": "SHUFFLE",
    "Transpose": "SHUFFLE",
    "Squeeze": "SHUFFLE",
    "Unsqueeze": "SHUFFLE",
    "DepthToSpace": "SHUFFLE",
    "SpaceToDepth": "SHUFFLE",
    "Gather": "GATHER",
    "GatherElements": "GATHER",
    "GatherND": "GATHER",
    "Scatter": "SCATTER",
    "ScatterND": "SCATTER",
    "ScatterElements": "SCATTER",
    "Where": "SELECT",
    "NonZero": "NON_ZERO",
    "TopK": "TOPK",
    "ArgMax": "TOPK",
    "ArgMin": "TOPK",
    "LSTM": "RNN_V2",
    "GRU": "RNN_V2",
    "RNN": "RNN_V2",
    "Loop": "LOOP",
    "Scan": "LOOP",
    "If": "CONDITION",
    "Expand": "SLICE",
    "Tile": "SLICE",
    "Range": "FILL",
    "ConstantOfShape": "CONSTANT",
    "EyeLike": "CONSTANT",
    "RandomNormal": "FILL",
    "RandomUniform": "FILL",
    "RandomNormalLike": "FILL",
    "RandomUniformLike": "FILL",
    "Shape": "SHAPE",
    "Size": "SHAPE",
    "Constant": "CONSTANT",
    "Identity": "IDENTITY",  # addIdentity; Dropout in inference mode returns an identity too (RETURN_IDENTITY)
    "Dropout": "IDENTITY",
    "CumSum": "LOOP",
    "OneHot": "ONE_HOT",
    "GridSample": "GRID_SAMPLE",
    "NonMaxSuppression": "NMS",
    "RoiAlign": "PLUGIN_V2",
    "ReverseSequence": "REVERSE_SEQUENCE",
    "Trilu": "SELECT",
    "Shrink": "SELECT",
    "QuantizeLinear": "QUANTIZE",
    "DequantizeLinear": "DEQUANTIZE",
    "Mean": "ELEMENTWISE(SUM)",
    "LpNormalization": "REDUCE",
    "MeanVarianceNormalization": "REDUCE",
    "GroupNormalization": "NORMALIZATION",
    "LayerNormalization": "NORMALIZATION",
    "InstanceNormalization": "NORMALIZATION",
    "GlobalAveragePool": "REDUCE(AVG)",
    "GlobalMaxPool": "REDUCE(MAX)",
    "GlobalLpPool": "REDUCE(SUM)",
    "Mish": "ACTIVATION(SOFTPLUS)",
}
_REDUCE = {"ReduceMean": "AVG", "ReduceSum": "SUM", "ReduceMax": "MAX", "ReduceMin": "MIN", "ReduceProd": "PROD"}
_REDUCE |= {op: "SUM" for op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")}


@dataclass
class Lowered:
    """The layers one ONNX node becomes: the main layer (named after the node) and the ones around it."""

    kind: str  # the main layer's type as the build log prints it, e.g. CONVOLUTION, ACTIVATION(CLIP)
    layers: List[Tuple[str, str]] = field(default_factory=list)  # (TYPE, name) as in the build log
    importer: bool = True  # False: this TensorRT's parser has no importer for the op
    note: str = ""


def parser_ops(trt: str) -> FrozenSet[str]:
    return PARSER_OPS[PARSER_OF.get(trt, "10.0")]


def lower(op: str, name: str, trt: str, domain: str = "", fully_connected: bool = False, bias: bool = True) -> Lowered:
    """The TensorRT layers of one ONNX node on TensorRT ``trt`` (``fully_connected``: the builder's FC conversion;
    ``bias``: a Gemm has its optional C input)."""
    if domain not in ("", "ai.onnx"):
        return Lowered("PLUGIN_V2", [("PLUGIN_V2", name)], note=f"custom domain '{domain}': a plugin must be registered")
    if op not in parser_ops(trt):
        return Lowered("UNSUPPORTED", [], importer=False, note=f"TensorRT {trt}'s ONNX parser has no importer for {op}")
    v8 = PARSER_OF.get(trt, "10.0") in ("8.5", "8.6")
    if op in _ACT:
        kind = f"ACTIVATION({_ACT[op]})"
    elif op in _ELT:
        kind = f"ELEMENTWISE({_ELT[op]})"
    elif op in _UNARY:
        kind = f"UNARY({_UNARY[op]})"
    elif op in _REDUCE:
        kind = f"REDUCE({_REDUCE[op]})"
    elif op in ("Cast", "CastLike"):
        kind = "IDENTITY" if v8 else "CAST"  # 8.x imports Cast as an identity layer with an output type
    elif op == "InstanceNormalization" and v8:
        # InstanceNormalization_TRT; native only with kNATIVE_INSTANCENORM, default from 10.0. The parser shuffles
        # around the plugin only for a 3-D input (needToExpandDims), which the DLA never takes.
        kind = "PLUGIN_V2"
    else:
        kind = _KIND.get(op, "UNKNOWN")
    layers = [(kind.split("(")[0], name)]
    if op == "HardSwish":
        kind = "ACTIVATION(HARD_SIGMOID)+ELEMENTWISE(PROD)"
        layers = [("ACTIVATION", f"{name} (hard sigmoid)"), ("ELEMENTWISE", name)]
    elif op in ("Gemm", "MatMul") and fully_connected:
        kind = "FULLY_CONNECTED"
        layers = [("SHUFFLE", f"reshape_before_{name}"), ("FULLY_CONNECTED", name), ("SHUFFLE", f"reshape_after_{name}")]
    elif op == "Gemm" and bias:  # the importer adds the C sum only when C is given (opset 11 made it optional)
        layers.append(("ELEMENTWISE", "(Unnamed Layer*) [ElementWise] (bias)"))
    return Lowered(kind, layers)
