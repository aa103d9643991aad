"""The published models of the corpus, rebuilt as ONNX from their code: same operators, shapes, opset and node names.

Each function names the code it follows. Weights are random. Node names follow the exporter the publication used
(torch 1.x ``Op_N``, torch 2.x ``/module/path/Op``, tf2onnx scopes), so a published layer name maps to a node.
"""

from __future__ import annotations

import itertools
from typing import Callable, Dict, List, Tuple

import numpy as np

from tests.dla_corpus.net import Net, same_pads

# --- NVIDIA-AI-IOT/jetson_dla_tutorial models.py (ModelGN, ModelBN), exported by export.py --------------------------
# torch.onnx.export with a dynamic batch; torch 1.x names nodes Op_<index> over every node of the traced graph,
# constants included, so the indices below count the Constant nodes torch folded away.


def _tutorial_head(n: Net, x: str, first: int, pool_op: str = "GlobalAveragePool", torch2: bool = False) -> str:
    """AdaptiveAvgPool2d(1) -> x.view(x.shape[0], -1) -> Linear(512, 10)."""
    names = (
        ["/pool/GlobalAveragePool", "/Shape", "/Constant", "/Gather", "/Unsqueeze", "/Concat", "/Reshape", "/linear/Gemm"]
        if torch2
        else [
            f"{op}_{first + i}"
            for i, op in enumerate(["GlobalAveragePool", "Shape", "Constant", "Gather", "Unsqueeze", "Concat", "Reshape", "Gemm"])
        ]
    )
    if pool_op == "AveragePool":  # modify.py changes the op, not the node's name
        p = n.node("AveragePool", [x], names[0], kernel_shape=[2, 2])
    else:
        p = n.node("GlobalAveragePool", [x], names[0])
    shape = n.node("Shape", [p], names[1])
    zero = n.node("Constant", [], names[2], value=_tensor(np.array(0, dtype=np.int64)))
    batch = n.node("Gather", [shape, zero], names[3], axis=0)
    if n.opset >= 13:
        unsq = n.node("Unsqueeze", [batch, n.const(f"{names[4]}_axes", np.array([0], dtype=np.int64))], names[4])
    else:
        unsq = n.node("Unsqueeze", [batch], names[4], axes=[0])
    target = n.node("Concat", [unsq, n.const(f"{names[5]}_minus1", np.array([-1], dtype=np.int64))], names[5], axis=0)
    flat = n.node("Reshape", [p, target], names[6])
    w, b = n.weight("linear.weight", 10, 512), n.weight("linear.bias", 10)
    return n.node("Gemm", [flat, w, b], names[7], out="output", alpha=1.0, beta=1.0, transB=1)


def _tensor(value):
    from onnx import numpy_helper

    return numpy_helper.from_array(value)


def tutorial_model_gn(torch2: bool = False, opset: int = 9):
    """ModelGN: 4 x (Conv 3x3/2 -> GroupNorm(8) -> ReLU), pool, linear. torch exports GroupNorm as
    Reshape [0, 8, -1] -> InstanceNormalization -> Reshape to Shape(x) -> Mul weight -> Add bias."""
    n = Net("model_gn", opset)
    x = n.input("input", ["batch_size", 3, 32, 32], channels=3)
    for i, cout in enumerate((64, 128, 256, 512)):
        k = 11 * i
        if torch2:
            s = f"/cnn/cnn.{3 * i}"
            g = f"/cnn/cnn.{3 * i + 1}"
            names = [f"{s}/Conv", f"{g}/Reshape", f"{g}/InstanceNormalization", f"{g}/Shape", f"{g}/Reshape_1"]
            names += [f"{g}/Mul", f"{g}/Add", f"/cnn/cnn.{3 * i + 2}/Relu"]
        else:
            names = [f"Conv_{k}", f"Reshape_{k + 2}", f"InstanceNormalization_{k + 5}", f"Shape_{k + 6}", f"Reshape_{k + 7}"]
            names += [f"Mul_{k + 8}", f"Add_{k + 9}", f"Relu_{k + 10}"]
        c = n.conv(x, cout, 3, names[0], s=2, p=1)
        grouped = n.node("Reshape", [c, n.const(f"{names[1]}_shape", np.array([0, 8, -1], dtype=np.int64))], names[1])
        ones, zeros = n.const(f"{names[2]}_scale", np.ones(8, np.float32)), n.const(f"{names[2]}_bias", np.zeros(8, np.float32))
        normed = n.node("InstanceNormalization", [grouped, ones, zeros], names[2], epsilon=1e-5)
        back = n.node("Reshape", [normed, n.node("Shape", [c], names[3])], names[4])
        scaled = n.node("Mul", [back, n.weight(f"gn{i}.weight", cout, 1, 1)], names[5])
        shifted = n.node("Add", [scaled, n.weight(f"gn{i}.bias", cout, 1, 1)], names[6])
        x = n.act("Relu", shifted, names[7])
        n.channels[x] = cout
    _tutorial_head(n, x, 44, torch2=torch2)
    n.output("output")
    return n.model()


def tutorial_model_bn(pool_op: str = "GlobalAveragePool", torch2: bool = False, opset: int = 9):
    """ModelBN: 4 x (Conv 3x3/2 -> BatchNorm -> ReLU); eval-mode export folds each BatchNorm into its Conv."""
    n = Net("model_bn", opset)
    x = n.input("input", ["batch_size", 3, 32, 32], channels=3)
    for i, cout in enumerate((64, 128, 256, 512)):
        conv_name = f"/cnn/cnn.{3 * i}/Conv" if torch2 else f"Conv_{2 * i}"
        relu_name = f"/cnn/cnn.{3 * i + 2}/Relu" if torch2 else f"Relu_{2 * i + 1}"
        x = n.act("Relu", n.conv(x, cout, 3, conv_name, s=2, p=1), relu_name)
    _tutorial_head(n, x, 8, pool_op, torch2)
    n.output("output")
    return n.model()


# --- torchvision resnet50, exported with torch 2.x (torch.onnx.export, opset 17) -----------------------------------


def torchvision_resnet50():
    n = Net("resnet50", 17)
    x = n.input("input", [1, 3, 224, 224], channels=3)
    x = n.act("Relu", n.conv(x, 64, 7, "/conv1/Conv", s=2, p=3), "/relu/Relu")
    x = n.maxpool(x, 3, 2, "/maxpool/MaxPool", pads=(1, 1, 1, 1))
    for stage, (blocks, width, stride) in enumerate(((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)), start=1):
        for b in range(blocks):
            p = f"/layer{stage}/layer{stage}.{b}"
            s = stride if b == 0 else 1
            y = n.act("Relu", n.conv(x, width, 1, f"{p}/conv1/Conv", p=0), f"{p}/relu/Relu")
            y = n.act("Relu", n.conv(y, width, 3, f"{p}/conv2/Conv", s=s, p=1), f"{p}/relu_1/Relu")
            y = n.conv(y, width * 4, 1, f"{p}/conv3/Conv", p=0)
            short = n.conv(x, width * 4, 1, f"{p}/downsample/downsample.0/Conv", s=s, p=0) if b == 0 else x
            x = n.act("Relu", n.add(y, short, f"{p}/Add"), f"{p}/relu_2/Relu")
    g = n.node("GlobalAveragePool", [x], "/avgpool/GlobalAveragePool")
    flat = n.node("Flatten", [g], "/Flatten", axis=1)
    n.node("Gemm", [flat, n.weight("fc.weight", 1000, 2048), n.weight("fc.bias", 1000)], "/fc/Gemm", out="output", transB=1)
    n.output("output")
    return n.model()


# --- NVIDIA/Deep-Learning-Accelerator-SW scripts/prepare_models: the MLPerf models as NVIDIA prepares them ----------


def dlasw_resnet50():
    """MLPerf resnet50_v1.onnx (TensorFlow official ResNet-50 v1.5, tf2onnx) after resnet50.py: BatchNorm folded
    into the convs, tf.pad before every strided conv (conv2d_fixed_padding), ReduceMean -> AveragePool 7x7 and
    Squeeze/MatMul/BiasAdd -> a 1x1 Conv."""
    n = Net("resnet50_v1_prepared", 11)
    x = n.input("input_tensor:0", [2, 3, 224, 224], channels=3)
    x = n.pad(x, "resnet_model/Pad", (3, 3, 3, 3))
    x = n.act("Relu", n.conv(x, 64, 7, "resnet_model/conv2d/Conv2D", s=2, p=0), "resnet_model/Relu")
    x = n.maxpool(x, 3, 2, "resnet_model/max_pooling2d/MaxPool", pads=(0, 0, 1, 1))
    count = [0]

    def name(kind):
        count[0] += 1
        return f"resnet_model/{kind}_{count[0]}"

    for blocks, width, stride in ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            short = n.conv(x, width * 4, 1, name("conv2d") + "/Conv2D", s=s, p=0) if b == 0 else x
            y = n.act("Relu", n.conv(x, width, 1, name("conv2d") + "/Conv2D", p=0), name("Relu"))
            if s == 2:  # conv2d_fixed_padding: tf.pad, then a VALID strided conv
                y = n.conv(n.pad(y, name("Pad"), (1, 1, 1, 1)), width, 3, name("conv2d") + "/Conv2D", s=2, p=0)
            else:
                y = n.conv(y, width, 3, name("conv2d") + "/Conv2D", p=1)
            y = n.conv(n.act("Relu", y, name("Relu")), width * 4, 1, name("conv2d") + "/Conv2D", p=0)
            x = n.act("Relu", n.add(y, short, name("add")), name("Relu"))
    x = n.node("AveragePool", [x], "resnet_model/Mean", kernel_shape=[7, 7])
    n.channels[x] = 2048
    n.conv(x, 1001, 1, "resnet_model/dense/MatMul", p=0)
    n.nodes[-1].output[0] = "resnet_model/dense/BiasAdd:0"
    n.output("resnet_model/dense/BiasAdd:0")
    return n.model()


def dlasw_resnet50_noqdq():
    """Keras ResNet50 (v1) after the QDQ Translator and resnet50_noqdq.py: conv1 with pads 3, ZeroPadding2D +
    MaxPool, stride on the first 1x1 conv of each stage, AveragePool 7x7 + 1x1 Conv head, Softmax on axis 1."""
    n = Net("resnet_50v1_noqdq_prepared", 13)
    p = "StatefulPartitionedCall/resnet50/"
    x = n.input(f"{p}quant_conv1_conv/BiasAdd__511:0", [2, 3, 224, 224], channels=3)
    x = n.act("Relu", n.conv(x, 64, 7, f"{p}quant_conv1_conv/BiasAdd", s=2, p=3), f"{p}conv1_relu/Relu")
    x = n.pad(x, f"{p}pool1_pad/Pad", (1, 1, 1, 1))
    x = n.maxpool(x, 3, 2, f"{p}quant_pool1_pool/MaxPool")
    for stage, (blocks, width, stride) in enumerate(((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)), start=2):
        for b in range(1, blocks + 1):
            s = stride if b == 1 else 1
            q = f"{p}quant_conv{stage}_block{b}_"
            short = n.conv(x, width * 4, 1, f"{q}0_conv/BiasAdd", s=s, p=0) if b == 1 else x
            y = n.act("Relu", n.conv(x, width, 1, f"{q}1_conv/BiasAdd", s=s, p=0), f"{p}conv{stage}_block{b}_1_relu/Relu")
            y = n.act("Relu", n.conv(y, width, 3, f"{q}2_conv/BiasAdd", p=1), f"{p}conv{stage}_block{b}_2_relu/Relu")
            y = n.conv(y, width * 4, 1, f"{q}3_conv/BiasAdd", p=0)
            x = n.act("Relu", n.add(short, y, f"{p}conv{stage}_block{b}_add/add"), f"{p}conv{stage}_block{b}_out/Relu")
    x = n.node("AveragePool", [x], f"{p}quant_avg_pool/Mean", kernel_shape=[7, 7])
    n.channels[x] = 2048
    logits = n.conv(x, 1000, 1, f"{p}quant_predictions/MatMul", p=0)
    n.node("Softmax", [logits], f"{p}quant_predictions/Softmax", out="Identity:0", axis=1)
    n.output("Identity:0")
    return n.model()


def dlasw_ssd_mobilenet_v1():
    """ssd_mobilenet_v1_coco_2018_01_28.onnx (TF Object Detection API, tf2onnx) after ssd_mobilenetv1.py: cut
    after the box predictors, BatchNorm Mul/Add fused into the convs, box and class convs of a level fused into
    one. ReLU6 is Clip(0, 6); stride-2 convs use TensorFlow SAME padding."""
    n = Net("ssd_mobilenet_v1_coco_2018_01_28_prepared", 11)
    x = n.input("Preprocessor/sub:0", [2, 3, 300, 300], channels=3)
    size = 300
    fe = "FeatureExtractor/MobilenetV1/"

    def conv_relu6(x, cout, k, name, s=1, group=1):
        nonlocal size
        pads = same_pads(size, k, s)
        size = -(-size // s)
        y = n.conv(x, cout, k, f"{name}/Conv2D", s=s, p=[pads[0], pads[0], pads[1], pads[1]], group=group)
        return n.clip(y, f"{name}/Relu6", 0.0, 6.0)

    x = conv_relu6(x, 32, 3, f"{fe}Conv2d_0", s=2)
    layout = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    features = []
    for i, (cout, s) in enumerate(layout, start=1):
        x = conv_relu6(x, n.channels[x], 3, f"{fe}Conv2d_{i}_depthwise", s=s, group=n.channels[x])
        x = conv_relu6(x, cout, 1, f"{fe}Conv2d_{i}_pointwise")
        if i in (11, 13):
            features.append((x, size))
    for j, (mid, cout) in enumerate(((256, 512), (128, 256), (128, 256), (64, 128)), start=2):
        y = conv_relu6(x, mid, 1, f"{fe}Conv2d_13_pointwise_1_Conv2d_{j}_1x1_{mid}")
        x = conv_relu6(y, cout, 3, f"{fe}Conv2d_13_pointwise_2_Conv2d_{j}_3x3_s2_{cout}", s=2)
        features.append((x, size))
    outs = []
    for level, ((f, _), anchors) in enumerate(zip(features, (3, 6, 6, 6, 6, 6))):
        name = f"BoxPredictor_{level}/BoxEncodingPredictor/BiasAdd:0+BoxPredictor_{level}/ClassPredictor/BiasAdd:0"
        outs.append(n.conv(f, anchors * (4 + 91), 1, name, p=0))
    n.output(*outs)
    return n.model()


def _numbered(prefix: str = "") -> Callable[[str], str]:
    """torch 1.x node names: ``<prefix><op>_<i>``, i counting every node named so far."""
    count = itertools.count()
    return lambda op: f"{prefix}{op}_{next(count)}"


def _stem(n: Net, x: str, name: Callable[[str], str]) -> str:
    """The ResNet stem: 7x7/2 convolution, ReLU, 3x3/2 max pool."""
    x = n.act("Relu", n.conv(x, 64, 7, name("Conv"), s=2, p=3), name("Relu"))
    return n.maxpool(x, 3, 2, name("MaxPool"), pads=(1, 1, 1, 1))


def _basic_block(n: Net, x: str, cout: int, s: int, name: Callable[[str], str]) -> str:
    """torchvision BasicBlock (BatchNorm folded)."""
    y = n.act("Relu", n.conv(x, cout, 3, name("Conv"), s=s, p=1), name("Relu"))
    y = n.conv(y, cout, 3, name("Conv"), p=1)
    short = n.conv(x, cout, 1, name("Conv"), s=s, p=0) if s != 1 or n.channels[x] != cout else x
    return n.act("Relu", n.add(y, short, name("Add")), name("Relu"))


def dlasw_ssd_resnet34():
    """MLPerf resnet34-ssd1200.onnx (PyTorch) after ssd_resnet34.py: ResNet-34 through layer3 (layer3 at stride 1,
    as the MLPerf model sets it), the SSD extra layers, and the six heads with loc and conf fused per level."""
    n = Net("resnet34-ssd1200_prepared", 11)
    x = n.input("image", [1, 3, 1200, 1200], channels=3)
    name = _numbered("")
    x = _stem(n, x, name)
    for cout, blocks, s in ((64, 3, 1), (128, 4, 2), (256, 6, 1)):
        for b in range(blocks):
            x = _basic_block(n, x, cout, s if b == 0 else 1, name)
    features = [x]
    for mid, cout, s, p in ((256, 512, 2, 1), (256, 512, 2, 1), (128, 256, 2, 1), (128, 256, 1, 0), (128, 256, 1, 0)):
        y = n.act("Relu", n.conv(x, mid, 1, name("Conv"), p=0), name("Relu"))
        x = n.act("Relu", n.conv(y, cout, 3, name("Conv"), s=s, p=p), name("Relu"))
        features.append(x)
    outs = []
    for level, (f, anchors) in enumerate(zip(features, (4, 6, 6, 6, 4, 4))):
        outs.append(n.conv(f, anchors * (4 + 81), 3, f"Conv_{338 + 22 * level}+Conv_{349 + 22 * level}", p=1))
    n.output(*outs)
    return n.model()


def _fpn_retinanet(n: Net, c3: str, c4: str, c5: str, classes: int, anchors: int, name) -> List[str]:
    """torchvision FPN (P3-P5 + LastLevelP6P7 on P5) and RetinaNet heads (4 x conv+ReLU, then the predictor)."""
    lat = [n.conv(c, 256, 1, name("Conv"), p=0) for c in (c3, c4, c5)]
    p5 = lat[2]
    p4 = n.add(lat[1], n.resize_nearest(p5, name("Resize"), 2), name("Add"))
    p3 = n.add(lat[0], n.resize_nearest(p4, name("Resize"), 2), name("Add"))
    outs = [n.conv(p, 256, 3, name("Conv"), p=1) for p in (p3, p4, p5)]
    p6 = n.conv(outs[2], 256, 3, name("Conv"), s=2, p=1)
    p7 = n.conv(n.act("Relu", p6, name("Relu")), 256, 3, name("Conv"), s=2, p=1)
    outs += [p6, p7]
    heads = []
    for cout in (classes * anchors, 4 * anchors):
        for f in outs:
            y = f
            for _ in range(4):
                y = n.act("Relu", n.conv(y, 256, 3, name("Conv"), p=1), name("Relu"))
            heads.append(n.conv(y, cout, 3, name("Conv"), p=1))
    return heads


def dlasw_retinanet_resnext50():
    """MLPerf resnext50_32x4d_fpn.onnx (torchvision RetinaNet, 264 OpenImages classes, 9 anchors) after sanitizing,
    retinanet_resnext50.py (cut at the head outputs, Resize sizes -> scales, FrozenBatchNorm Mul/Add fused)."""
    n = Net("resnext50_32x4d_fpn_prepared", 13)
    x = n.input("input", [1, 3, 800, 800], channels=3)
    name = _numbered("/")
    x = _stem(n, x, name)
    feats = []
    for blocks, width, s in ((3, 128, 1), (4, 256, 2), (6, 512, 2), (3, 1024, 2)):
        for b in range(blocks):
            st = s if b == 0 else 1
            y = n.act("Relu", n.conv(x, width, 1, name("Conv"), p=0), name("Relu"))
            y = n.act("Relu", n.conv(y, width, 3, name("Conv"), s=st, p=1, group=32), name("Relu"))
            y = n.conv(y, width * 2, 1, name("Conv"), p=0)
            short = n.conv(x, width * 2, 1, name("Conv"), s=st, p=0) if b == 0 else x
            x = n.act("Relu", n.add(y, short, name("Add")), name("Relu"))
        feats.append(x)
    heads = _fpn_retinanet(n, feats[1], feats[2], feats[3], 264, 9, name)
    n.output(*heads)
    return n.model()


def dlasw_retinanet_rn34(backbone_only: bool = False):
    """NVIDIA's RetinaNet ResNet-34 at 1280x768 (Waymo, 3 classes assumed; the dummy ONNX is published, its code
    is not): torchvision-style ResNet-34 backbone, FPN P3-P7 and RetinaNet heads; or the backbone alone."""
    n = Net("backbone_rn34_1280x768_dummy" if backbone_only else "retinanet_rn34_1280x768_dummy", 13)
    x = n.input("input", [1, 3, 768, 1280], channels=3)
    name = _numbered("")
    x = _stem(n, x, name)
    feats = []
    for cout, blocks, s in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            x = _basic_block(n, x, cout, s if b == 0 else 1, name)
        feats.append(x)
    if backbone_only:
        n.output(feats[1], feats[2], feats[3])
        return n.model()
    n.output(*_fpn_retinanet(n, feats[1], feats[2], feats[3], 3, 9, name))
    return n.model()


def fcn_resnet18_cityscapes():
    """jetson-inference's FCN-ResNet18 (dusty-nv's torchvision fork, trained with Onixaz's pytorch-segmentation):
    a ResNet-18 backbone at output stride 32 and torchvision's FCNHead (Conv 3x3 512->128, BatchNorm, ReLU,
    Dropout, Conv 1x1 -> 12 classes) without the final upsampling, exported by torch 2.x at 1x3x512x1024."""
    n = Net("fcn_resnet18", 13)
    x = n.input("input_0", [1, 3, 512, 1024], channels=3)
    x = n.act("Relu", n.conv(x, 64, 7, "/backbone/conv1/Conv", s=2, p=3), "/backbone/relu/Relu")
    x = n.maxpool(x, 3, 2, "/backbone/maxpool/MaxPool", pads=(1, 1, 1, 1))
    for stage, (cout, s) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2)), start=1):
        for b in range(2):
            p = f"/backbone/layer{stage}/layer{stage}.{b}"
            st = s if b == 0 else 1
            y = n.act("Relu", n.conv(x, cout, 3, f"{p}/conv1/Conv", s=st, p=1), f"{p}/relu/Relu")
            y = n.conv(y, cout, 3, f"{p}/conv2/Conv", p=1)
            short = n.conv(x, cout, 1, f"{p}/downsample/downsample.0/Conv", s=st, p=0) if b == 0 and stage > 1 else x
            x = n.act("Relu", n.add(y, short, f"{p}/Add"), f"{p}/relu_1/Relu")
    x = n.act("Relu", n.conv(x, 128, 3, "/classifier/classifier.0/Conv", p=1), "/classifier/classifier.2/Relu")
    n.conv(x, 12, 1, "/classifier/classifier.4/Conv", p=0)
    n.nodes[-1].output[0] = "output_0"
    n.output("output_0")
    return n.model()


def trt_sample_cudla():
    """NVIDIA TensorRT samples/sampleCudla: one ElementWise SUM of two FP16 [1, 32, 32, 32] inputs, built through
    the network API (here an ONNX Add with TensorRT's name for the unnamed layer)."""
    from onnx import TensorProto, helper

    n = Net("sample_cudla", 13)
    n.inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT16, [1, 32, 32, 32]) for name in ("inputA", "inputB")]
    n.node("Add", ["inputA", "inputB"], "(Unnamed Layer* 0) [ElementWise]", out="output")
    n.output("output")
    n.outputs[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    return n.model()


BUILDERS: Dict[str, Callable] = {
    "trt_sample_cudla": trt_sample_cudla,
    "fcn_resnet18_cityscapes": fcn_resnet18_cityscapes,
    "tutorial_model_gn": lambda: tutorial_model_gn(),
    "tutorial_model_bn": lambda: tutorial_model_bn(),
    "tutorial_model_bn_avgpool": lambda: tutorial_model_bn("AveragePool"),
    "torch2_model_bn": lambda: tutorial_model_bn(torch2=True, opset=14),
    "torch2_model_gn": lambda: tutorial_model_gn(torch2=True, opset=17),
    "torch2_model_gn_opset14": lambda: tutorial_model_gn(torch2=True, opset=14),
    "torchvision_resnet50": torchvision_resnet50,
    "dlasw_resnet50": dlasw_resnet50,
    "dlasw_resnet50_noqdq": dlasw_resnet50_noqdq,
    "dlasw_ssd_mobilenet_v1": dlasw_ssd_mobilenet_v1,
    "dlasw_ssd_resnet34": dlasw_ssd_resnet34,
    "dlasw_retinanet_resnext50": dlasw_retinanet_resnext50,
    "dlasw_retinanet_rn34": lambda: dlasw_retinanet_rn34(),
    "dlasw_rn34_backbone": lambda: dlasw_retinanet_rn34(backbone_only=True),
}


def build(name: str) -> Tuple[object, int]:
    """The ONNX model of a builder, and its node count."""
    model = BUILDERS[name]()
    return model, len(model.graph.node)
