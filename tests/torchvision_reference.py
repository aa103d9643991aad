"""torchvision's own detection code as the reference of edge's torchvision decoders, run in a child process:

    python tests/torchvision_reference.py JOB.npz OUT_DIR

torchvision 0.28.0 (BSD-3-Clause; the release paired with torch 2.13) is installed by ``scripts/test.sh`` with
``pip --target`` into ``~/.cache/edge/torchvision-0.28.0`` and marked complete by an empty ``.installed`` file there
(``EDGE_TORCHVISION`` names another such folder), never into the test environment: PyPI's wheel is built against CUDA torch, so its compiled operators do not load beside the CPU torch
here, and Ultralytics (tests/ultralytics_reference.py) would then import a broken torchvision. Everything the tests
compare with is torchvision's Python code: the builders, ``DefaultBoxGenerator``, ``AnchorGenerator``, ``BoxCoder``,
``BoxLinearCoder``, the ``postprocess_detections`` of SSD, RetinaNet and FCOS, ``batched_nms`` and, for the whole-model export,
``GeneralizedRCNNTransform``. Its one compiled kernel used here, ``torchvision::nms``, is declared with torchvision's
schema and backed by Ultralytics' pure-torch ``TorchNMS.nms`` (documented there as matching torchvision exactly); the
ONNX export maps it to ONNX NonMaxSuppression with torchvision's own symbolic, so the exported graph never runs it.
(Faster, Mask and Keypoint R-CNN need ``roi_align``, another compiled kernel, and are not run.)

The weights are random (no trained torchvision detector ships in a package this machine can install), seeded, with
the heads' last convolutions redrawn and scaled (``build``) so the scores spread from near 0 to near 1 instead of all
sitting at 1/91 and the boxes move off their anchors: the decoders are checked on what the heads compute, not on
what a trained model sees.

JOB.npz holds ``heads_in`` (N, 3, H, W): each model's input as edge's preprocessing makes it, ``whole_in`` (M, 3,
H, W) in 0..1 for the whole-model export, and ``job``: a JSON list of {model, size, thresholds, export}.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

TORCHVISION = os.environ.get("EDGE_TORCHVISION") or str(Path.home() / ".cache" / "edge" / "torchvision-0.28.0")


def _has_ops() -> bool:  # scripted by torchvision while tracing: a plain function, not a lambda
    return True


def load():
    """torch, torchvision and torchvision.models.detection with the NMS kernel declared (see the module's text)."""
    sys.path.insert(0, TORCHVISION)
    import torch
    from ultralytics.utils.nms import TorchNMS

    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")

    def nms(dets, scores, iou_threshold):
        return TorchNMS.nms(dets, scores, iou_threshold)

    lib.impl("nms", nms, "CPU")
    load.lib = lib  # the definitions live as long as the Library object
    import torchvision
    import torchvision.extension

    torchvision.extension._has_ops = _has_ops
    from torchvision.models import detection

    return torch, torchvision, detection


def _finals(torch, head) -> list:
    """The last convolution of a head: RetinaNet's one, or SSD's per level."""
    for attr in ("cls_logits", "bbox_reg"):
        if hasattr(head, attr):
            return [getattr(head, attr)]
    return [[m for m in level.modules() if isinstance(m, torch.nn.Conv2d)][-1] for level in head.module_list]


def build(torch, detection, name: str, seed: int, x):
    """The builder's model with random weights, its last convolutions redrawn and scaled on input x so the logits
    spread with a standard deviation of 3 (RetinaNet's and FCOS's centred at -8: most anchors are background) and the
    box codes move boxes by about a box (standard deviation 1 after the coder's weights; FCOS's distances pass a ReLU)."""
    torch.manual_seed(seed)
    model = getattr(detection, name)(weights=None, weights_backbone=None).eval()
    retina = hasattr(model.head.classification_head, "cls_logits")
    with torch.no_grad():
        features = list(model.backbone(x).values())
        for head, key, spread in (
            (model.head.classification_head, "cls_logits", 3.0),
            (model.head.regression_head, "bbox_regression", 1.0 if retina else 7.0),
        ):
            for conv in _finals(torch, head):
                conv.weight.normal_(0.0, 1.0)
                conv.bias.zero_()
            values = model.head(features)[key]
            for conv in _finals(torch, head):
                conv.weight.mul_(spread / float(values.std()))
                if retina and key == "cls_logits":
                    conv.bias.fill_(-8.0)
    return model


def heads(torch, detection, model, x):
    """Raw head outputs, torchvision's anchors and the feature maps for input x (already normalised)."""
    from torchvision.models.detection.image_list import ImageList

    images = ImageList(x, [tuple(x.shape[-2:])] * x.shape[0])
    features = list(model.backbone(x).values())
    out = model.head(features)
    anchors = model.anchor_generator(images, features)
    return images, features, out, anchors


def postprocess(model, images, features, out, anchors):
    """What the model's own forward does after the head (SSD: as is; RetinaNet: split per level first)."""
    if not hasattr(model.head.classification_head, "cls_logits"):
        return model.postprocess_detections(out, anchors, images.image_sizes)
    per_level = [f.size(2) * f.size(3) for f in features]
    a = out["cls_logits"].size(1) // sum(per_level)
    per_level = [n * a for n in per_level]
    split_out = {k: list(v.split(per_level, dim=1)) for k, v in out.items()}
    split_anchors = [list(v.split(per_level)) for v in anchors]
    return model.postprocess_detections(split_out, split_anchors, images.image_sizes)


def cut(torch, model):
    """The model from normalised input to its raw head outputs: what a user exports for TensorRT."""

    class Cut(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            o = self.m.head(list(self.m.backbone(x).values()))
            return tuple(o[k] for k in ("bbox_regression", "bbox_ctrness", "cls_logits") if k in o)

    return Cut(model).eval()  # export restores the wrapper's mode on everything under it


def main(job_path: str, out_dir: str) -> None:
    torch, torchvision, detection = load()
    job = np.load(job_path)
    out = Path(out_dir)
    for spec in json.loads(str(job["job"])):
        name = spec["model"]
        x = torch.from_numpy(job[spec["input"]])
        model = build(torch, detection, name, spec.get("seed", 0), x)
        result: dict = {"torchvision": np.array(torchvision.__version__)}
        with torch.no_grad():
            images, features, raw, anchors = heads(torch, detection, model, x)
            result["anchors"] = anchors[0].numpy()
            result["maps"] = np.array([list(f.shape[-2:]) for f in features])
            result["boxes"], result["logits"] = raw["bbox_regression"].numpy(), raw["cls_logits"].numpy()
            if "bbox_ctrness" in raw:  # FCOS
                result["ctrness"] = raw["bbox_ctrness"].numpy()
            for k, t in enumerate(spec["thresholds"]):
                model.score_thresh = t
                for i, d in enumerate(postprocess(model, images, features, raw, anchors)):
                    rows = torch.cat([d["boxes"], d["scores"][:, None], d["labels"][:, None].float()], dim=1)
                    result[f"dets_{k}_{i}"] = rows.numpy()
        if spec.get("export_heads"):
            torch.onnx.export(
                cut(torch, model), (x[:1],), str(out / f"{name}.heads.onnx"), opset_version=17, dynamo=False,
                input_names=["images"], output_names=["bbox_regression", "cls_logits"],
            )  # fmt: skip
        if spec.get("export_whole"):
            model.score_thresh = spec["whole_threshold"]
            whole = torch.from_numpy(job["whole_in"])
            with torch.no_grad():
                for i in range(len(whole)):
                    d = model(whole[i : i + 1])[0]
                    result[f"whole_{i}"] = torch.cat([d["boxes"], d["scores"][:, None], d["labels"][:, None].float()], 1).numpy()
            torch.onnx.export(
                model, (whole[:1],), str(out / f"{name}.whole.onnx"), opset_version=17, dynamo=False,
                input_names=["images"], output_names=["boxes", "scores", "labels"],
                dynamic_axes={"boxes": {0: "n"}, "scores": {0: "n"}, "labels": {0: "n"}},
            )  # fmt: skip
        np.savez(out / f"{name}.npz", **result)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
