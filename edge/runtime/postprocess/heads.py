"""Which decoder reads a model's outputs: the one ``task.type`` names, checked against the outputs, or (``auto``) the
one the outputs and the file's metadata leave, with a refusal in one line when none or several fit.

Each ``_fit_*`` looks at the outputs (count, ranks, shapes, names, dtypes) and returns a ``Head`` (what to read where)
or the reason it does not fit. Shapes alone are sometimes ambiguous: ``[1, 8400, 6]`` is DeepStream-Yolo's pre-NMS
rows, a two-class transposed v8 head, or a one-class YOLOX head; the number of classes (``task.labels`` or the
metadata's names) and the number of grid cells for the input size settle most cases, and ``auto`` refuses the rest
rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from edge.errors import LINE_LIMIT, ConfigError, one_line
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec

STRIDES = (8, 16, 32)
STRIDES_P6 = (8, 16, 32, 64)
MAX_END2END = 1000  # an end-to-end head keeps at most a few hundred boxes; a pre-NMS output has thousands
YOLO_LAYOUTS = ("v8", "v8t", "v5", "yolox")
REFUSAL_LIMIT = LINE_LIMIT * 3 // 2  # a declared type that does not fit: eight outputs and the reason take room


@dataclass
class Head:
    kind: str  # the task.type that decodes it
    outputs: Dict[str, str] = field(default_factory=dict)  # role ("head", "protos", "boxes", ...) -> output name
    layout: str = ""  # yolo: one of YOLO_LAYOUTS; detr: rows, scores or pair; retinaface: rows, nhwc or nchw
    classes: int = 0
    mask_dims: int = 0  # yolo_seg: mask coefficients per candidate
    keypoints: Optional[Tuple[int, int]] = None  # yolo_pose: (count, 2 or 3)
    strides: Tuple[int, ...] = STRIDES
    levels: List[Tuple[str, str]] = field(default_factory=list)  # picodet: (scores, boxes) per level, stride order
    anchors: Optional[np.ndarray] = None  # ssd: (N, 4) normalised ymin, xmin, ymax, xmax; retinaface: priors
    maps: List[Tuple[int, int]] = field(default_factory=list)  # torchvision: (rows, columns) of each level

    def describe(self) -> str:
        what = self.kind + (f" {self.layout}" if self.layout else "")
        parts = [f"{self.classes} classes"] if self.classes else []
        if self.keypoints:
            parts.append(f"{self.keypoints[0]} keypoints")
        if self.mask_dims:
            parts.append(f"{self.mask_dims} mask coefficients")
        return what + (f" ({', '.join(parts)})" if parts else "")


Fit = Union[Head, str]


def shown(outputs: List[TensorInfo]) -> str:
    return ", ".join(f"{t.name} {[d if isinstance(d, int) else '?' for d in t.shape]}" for t in outputs[:8]) + (
        f" and {len(outputs) - 8} more" if len(outputs) > 8 else ""
    )


def _static(d: Any) -> bool:
    return isinstance(d, int) and d > 0


def cells(spec: PreprocessSpec, strides: Tuple[int, ...]) -> int:
    return sum(-(-spec.height // s) * -(-spec.width // s) for s in strides)


class Context:
    """What the fits look at besides the outputs."""

    def __init__(self, task: Any, outputs: List[TensorInfo], spec: PreprocessSpec, labels: List[str], meta: Any) -> None:
        self.task, self.outputs, self.spec, self.meta = task, outputs, spec, meta
        self.classes: Optional[int] = len(labels) if labels else None
        kp = getattr(task, "keypoints", None) or (meta.kpt_shape if meta is not None else None)
        self.keypoints: Optional[Tuple[int, int]] = tuple(kp) if kp else None  # type: ignore[assignment]
        self.layout = getattr(task, "yolo_layout", "auto")

    def classes_ok(self, n: int) -> bool:
        return n >= 1 and (self.classes is None or self.classes == n)

    def class_note(self, n: int) -> str:
        return f"it would have {n} classes but task.labels / the metadata name {self.classes}"


def _fit_classify(ctx: Context) -> Fit:
    outs = ctx.outputs
    if len(outs) != 1:
        return f"classify reads one output of class scores, the model has {len(outs)}"
    dims = outs[0].shape[1:]
    if not dims or not all(_static(d) for d in dims) or sum(d > 1 for d in dims) != 1:
        return f"classify needs one output of scores like [1, C], got {shown(outs)}"
    return Head("classify", {"scores": outs[0].name}, classes=max(dims))


def _fit_blazeface(ctx: Context) -> Fit:
    grids = ctx.task.anchor_grids
    scores = [t for t in ctx.outputs if len(t.shape) == 3 and t.shape[-1] == 1]
    regs = [t for t in ctx.outputs if len(t.shape) == 3 and t.shape[-1] == 16]
    sizes = [per * c * c for c, per in grids]
    if not scores or len(scores) + len(regs) != len(ctx.outputs) or len(regs) != len(scores):
        return "blazeface reads pairs of score [1, k, 1] and regressor [1, k, 16] outputs"
    if [t.shape[1] for t in scores] != sizes:
        return (
            f"blazeface with task.anchor_grids {grids} expects {sizes} anchors, the outputs have {[t.shape[1] for t in scores]}"
        )
    return Head("blazeface")


def _grid_counts(ctx: Context) -> Tuple[int, ...]:
    return tuple(cells(ctx.spec, s) for s in (STRIDES, STRIDES_P6))


def _raw_head(ctx: Context, extra: int, kind: str) -> Fit:
    """A raw YOLO head (one rank-3 output) with ``extra`` values per candidate after the class scores."""
    heads = [t for t in ctx.outputs if len(t.shape) == 3]
    if len(heads) != 1:
        return f"{kind} reads one [1, 4+C, N] or [1, N, 5+C] output, the model has {len(heads)} of rank 3"
    t = heads[0]
    _, a, b = t.shape
    g3, g6 = _grid_counts(ctx)
    options: List[Head] = []
    want = ctx.layout if ctx.layout != "auto" else None
    if _static(a) and (not _static(b) or a <= b):  # attributes first: v8 (a square output is both)
        c = a - 4 - extra
        if want is None and _static(b) and b not in (g3, g6):
            # not one candidate per grid cell: an OCR recogniser's [1, T, V] or a feature map, not a detector
            return (
                f"{t.name} {list(t.shape)} has {b} candidates, not one per grid cell ({g3} at {ctx.spec.width}x{ctx.spec.height})"
            )
        if want in (None, "v8") and ctx.classes_ok(c):
            options.append(Head(kind, {"head": t.name}, "v8", c))
        elif want in (None, "v8"):
            return ctx.class_note(c) if c >= 1 else f"{t.name} {list(t.shape)} has no room for class scores"
    if _static(b) and (not _static(a) or b <= a):  # candidates first: v8t, v5 or yolox
        n = a if _static(a) else None
        for layout, c in (("v8t", b - 4 - extra), ("v5", b - 5 - extra), ("yolox", b - 5 - extra)):
            if want not in (None, layout) or not ctx.classes_ok(c):
                continue
            if want is None and n is not None:
                # anchor-based v5/v7 have three anchors per cell (or one, decoded YOLOX); v8t and raw YOLOX one per cell
                counts = (g3, g6, 3 * g3, 3 * g6) if layout == "v5" else (g3, g6)
                if n not in counts:
                    continue
            if want is None and extra and layout != "v8t":
                continue  # -seg and -pose exports put attributes first
            strides = STRIDES_P6 if n == g6 and layout == "yolox" else STRIDES
            options.append(Head(kind, {"head": t.name}, layout, c, strides=strides))
        if want == "yolox" and n is not None and n not in (g3, g6):
            return f"yolo_layout yolox needs one candidate per grid cell ({g3} at {ctx.spec.width}x{ctx.spec.height}), {t.name} has {n}"
    if not options:
        return f"{t.name} {list(t.shape)} fits no YOLO layout" + (f" with {ctx.classes} classes" if ctx.classes else "")
    if len(options) > 1:
        return options[0] if all(o.layout == options[0].layout for o in options) else _ambiguous(options)
    return options[0]


def _ambiguous(options: List[Head]) -> str:
    return "ambiguous: it reads as " + " or as ".join(o.describe() for o in options) + "; set task.yolo_layout or task.labels"


def _fit_yolo(ctx: Context) -> Fit:
    if len(ctx.outputs) != 1:
        return f"yolo reads one head output, the model has {len(ctx.outputs)}"
    return _raw_head(ctx, 0, "yolo")


def _fit_seg(ctx: Context) -> Fit:
    protos = [t for t in ctx.outputs if len(t.shape) == 4]
    if len(ctx.outputs) != 2 or len(protos) != 1 or not _static(protos[0].shape[1]):
        return "yolo_seg reads a head [1, 4+C+32, N] and prototypes [1, 32, H/4, W/4]"
    nm = protos[0].shape[1]
    head = _raw_head(ctx, nm, "yolo_seg")  # the head is the one rank-3 output; the prototypes are rank 4
    if isinstance(head, Head):
        head.outputs["protos"], head.mask_dims = protos[0].name, nm
    return head


def _fit_pose(ctx: Context) -> Fit:
    if len(ctx.outputs) != 1:
        return f"yolo_pose reads one head output, the model has {len(ctx.outputs)}"
    if ctx.keypoints is None and ctx.task.type == "auto":
        return "yolo_pose needs the keypoint layout: task.keypoints or the metadata's kpt_shape"
    count, dims = ctx.keypoints or (17, 3)  # COCO's 17 keypoints with visibility, Ultralytics' default
    head = _raw_head(ctx, count * dims, "yolo_pose")
    if isinstance(head, Head):
        head.keypoints = (count, dims)
    return head


def _fit_end2end(ctx: Context) -> Fit:
    protos = [t for t in ctx.outputs if len(t.shape) == 4]
    rows = [t for t in ctx.outputs if len(t.shape) == 3]
    if len(rows) != 1 or len(protos) > 1 or len(rows) + len(protos) != len(ctx.outputs) or not _static(rows[0].shape[2]):
        return "yolo_end2end reads one [1, K, 6] output (x1, y1, x2, y2, score, class), for -seg with prototypes"
    t, k, extra = rows[0], rows[0].shape[1], rows[0].shape[2] - 6
    if extra < 0:
        return f"yolo_end2end reads rows of at least 6 values, {t.name} has {t.shape[2]}"
    if _static(k) and k > MAX_END2END:
        return (
            f"{t.name} has {k} rows: too many for boxes after NMS (DeepStream-Yolo's pre-NMS output? task.type deepstream_yolo)"
        )
    head = Head("yolo_end2end", {"rows": t.name}, classes=ctx.classes or 0)
    if protos:
        nm = protos[0].shape[1]
        if extra != nm:
            return f"yolo_end2end with prototypes {protos[0].name} needs {nm} mask coefficients per row, {t.name} has {extra}"
        head.outputs["protos"], head.mask_dims = protos[0].name, nm
    elif extra:
        if ctx.keypoints is None or extra != ctx.keypoints[0] * ctx.keypoints[1]:
            return f"{t.name} has {extra} values after each box; keypoints need task.keypoints or the metadata's kpt_shape"
        head.keypoints = ctx.keypoints
    return head


def _role(names: List[TensorInfo], words: Tuple[str, ...]) -> Optional[TensorInfo]:
    found = [t for t in names if any(w in t.name.lower() for w in words)]
    return found[0] if len(found) == 1 else None


def _fit_nms_plugin(ctx: Context) -> Fit:
    outs = ctx.outputs
    if len(outs) != 4:
        return f"nms_plugin reads four outputs (count, boxes, scores, classes), the model has {len(outs)}"
    roles = {
        "count": _role(outs, ("num",)),  # num_dets, num_detections, num
        "boxes": _role(outs, ("box",)),
        "scores": _role(outs, ("score",)),
        "classes": _role(outs, ("class", "label")),
    }
    missing = [r for r, t in roles.items() if t is None]
    if missing:
        return f"nms_plugin could not tell which output holds the {' and '.join(missing)} (names: {shown(outs)})"
    boxes, scores = roles["boxes"], roles["scores"]
    if len(boxes.shape) != 3 or boxes.shape[2] != 4 or len(scores.shape) not in (2, 3):  # type: ignore[union-attr]
        return f"nms_plugin expects boxes [B, K, 4] and scores [B, K], got {shown(outs)}"
    return Head("nms_plugin", {r: t.name for r, t in roles.items()}, classes=ctx.classes or 0)  # type: ignore[union-attr]


def _fit_deepstream(ctx: Context) -> Fit:
    outs = ctx.outputs
    g3, g6 = _grid_counts(ctx)
    if len(outs) == 1:
        t = outs[0]
        if len(t.shape) != 3 or t.shape[2] != 6:
            return "deepstream_yolo reads [B, N, 6] (x1, y1, x2, y2, score, class) or boxes, scores and classes"
        if _static(t.shape[1]) and t.shape[1] <= MAX_END2END:
            return f"{t.name} has {t.shape[1]} rows, as many as boxes after NMS (an end-to-end head? task.type yolo_end2end)"
        return Head("deepstream_yolo", {"rows": t.name}, classes=ctx.classes or 0)
    roles = {"boxes": _role(outs, ("box",)), "scores": _role(outs, ("score",)), "classes": _role(outs, ("class", "label"))}
    if len(outs) != 3 or any(t is None for t in roles.values()):
        return "deepstream_yolo reads [B, N, 6] or three outputs named boxes, scores and classes"
    if len(roles["boxes"].shape) != 3:  # type: ignore[union-attr]
        return f"deepstream_yolo's boxes are [B, N, 4], got {shown(outs)}"
    return Head("deepstream_yolo", {r: t.name for r, t in roles.items()}, classes=ctx.classes or 0)  # type: ignore[union-attr]


def _fit_centerface(ctx: Context) -> Fit:
    outs = ctx.outputs
    if len(outs) not in (3, 4) or any(len(t.shape) != 4 or not _static(t.shape[1]) for t in outs):
        return "centerface reads heatmap [1, 1, h, w], scale [1, 2, h, w], offset [1, 2, h, w] and landmarks [1, 10, h, w]"
    by_c: Dict[int, List[TensorInfo]] = {}
    for t in outs:
        by_c.setdefault(t.shape[1], []).append(t)
    if len(by_c.get(1, ())) != 1 or len(by_c.get(2, ())) != 2 or len(by_c.get(10, ())) != len(outs) - 3:
        return f"centerface reads outputs of 1, 2, 2 (and 10) channels, got {shown(outs)}"
    grids = {tuple(t.shape[2:]) for t in outs}
    if len(grids) != 1:
        return f"centerface's outputs share one grid, got {shown(outs)}"
    pair = by_c[2]  # scale before offset, as CenterFace exports them, unless the names say otherwise
    if "offset" in pair[0].name.lower() or "scale" in pair[1].name.lower():
        pair = pair[::-1]
    roles = {"heatmap": by_c[1][0].name, "scale": pair[0].name, "offset": pair[1].name}
    if 10 in by_c:
        roles["landmarks"] = by_c[10][0].name
    return Head("centerface", roles, classes=1, keypoints=(5, 2) if 10 in by_c else None)


def _fit_yunet(ctx: Context) -> Fit:
    from edge.runtime.postprocess.yunet import ROLES

    outs = ctx.outputs
    widths = dict(zip(ROLES, (1, 1, 4, 10)))
    usage = (
        "yunet reads cls_S and obj_S [1, N, 1], bbox_S [1, N, 4] and kps_S [1, N, 10] for each stride S of 8, 16 and 32 "
        "(the names OpenCV's FaceDetectorYN asks for)"
    )
    by_name = {t.name: t for t in outs}
    wanted = {f"{role}_{s}": (role, s) for role in ROLES for s in STRIDES}
    missing = [n for n in wanted if n not in by_name]
    extra = [n for n in by_name if n not in wanted]
    if missing or extra:
        parts = ([f"no {', '.join(missing)}"] if missing else []) + ([f"besides them {', '.join(extra)}"] if extra else [])
        return f"{usage}; the model has {' and '.join(parts)}"
    for name, (role, s) in wanted.items():
        t, n = by_name[name], cells(ctx.spec, (s,))
        if len(t.shape) != 3 or t.shape[2] != widths[role] or (_static(t.shape[1]) and t.shape[1] != n):
            return (
                f"yunet's {name} should be [1, {n}, {widths[role]}] at the input {ctx.spec.width}x{ctx.spec.height} "
                f"(one row a cell of stride {s}), got {list(t.shape)}"
            )
    if not ctx.classes_ok(1):
        return ctx.class_note(1)
    roles = {f"{role}{s}": name for name, (role, s) in wanted.items()}
    return Head("yunet", roles, classes=1, keypoints=(5, 2))


def _level_stride(ctx: Context, n: int) -> Optional[int]:
    found = [s for s in (8, 16, 32, 64, 128) if cells(ctx.spec, (s,)) == n]
    return found[0] if found else None


def _fit_picodet(ctx: Context) -> Fit:
    outs = ctx.outputs
    usage = "picodet reads per level scores [1, N, C] and box distributions [1, N, 4 * (R + 1)]"
    if len(outs) < 2 or len(outs) % 2 or any(len(t.shape) != 3 or not all(_static(d) for d in t.shape[1:]) for t in outs):
        return usage
    half = len(outs) // 2
    pairs = list(zip(outs[:half], outs[half:]))  # PaddleDetection's order: every level's scores, then the boxes
    if any(s.shape[1] != b.shape[1] for s, b in pairs):
        by_n: Dict[int, List[TensorInfo]] = {}
        for t in outs:
            by_n.setdefault(t.shape[1], []).append(t)
        if any(len(v) != 2 for v in by_n.values()):
            return f"{usage}, two outputs per level; got {shown(outs)}"
        pairs = [tuple(v) for v in by_n.values()]  # type: ignore[misc]
        # here the names' order says nothing: the box distributions are the outputs whose width is a multiple of 4
        widths = {t.shape[2] for t in outs}
        if len(widths) != 2:
            return f"{usage}; got {shown(outs)}"
        box_w = [w for w in widths if w % 4 == 0 and w >= 8]
        if len(box_w) != 1:
            return f"{usage}: cannot tell the scores from the boxes in {shown(outs)}"
        pairs = [(a, b) if b.shape[2] == box_w[0] else (b, a) for a, b in pairs]
    classes, box_w = pairs[0][0].shape[2], pairs[0][1].shape[2]
    if any(s.shape[2] != classes or b.shape[2] != box_w for s, b in pairs) or box_w % 4 or box_w < 8:
        return f"{usage}; got {shown(outs)}"
    strides = [_level_stride(ctx, s.shape[1]) for s, _ in pairs]
    if None in strides or len(set(strides)) != len(strides):
        return (
            f"{usage}, one level per stride 8, 16, 32, 64 at the input {ctx.spec.width}x{ctx.spec.height}; "
            f"the levels have {[s.shape[1] for s, _ in pairs]} anchors"
        )
    if not ctx.classes_ok(classes):
        return ctx.class_note(classes)
    ordered = sorted(zip(strides, pairs))
    levels = [(s.name, b.name) for _, (s, b) in ordered]
    roles = {f"{k}{st}": n for st, (s, b) in ordered for k, n in (("scores", s.name), ("boxes", b.name))}
    return Head("picodet", roles, classes=classes, strides=tuple(st for st, _ in ordered), levels=levels)


def _fit_ssd(ctx: Context) -> Fit:
    from edge.runtime.postprocess.ssd import anchor_count, feature_maps, ssd_anchors

    outs = ctx.outputs
    usage = "ssd reads box encodings [1, N, 4] and class scores [1, N, 1 + C] (background first)"
    if ctx.task.type != "ssd":
        return "ssd is chosen by task.type ssd: its anchors are configured (task.ssd), not in the file"
    if len(outs) != 2 or any(len(t.shape) not in (3, 4) or not all(_static(d) for d in t.shape[1:]) for t in outs):
        return f"{usage}; got {shown(outs)}"
    boxes = [t for t in outs if t.shape[-1] == 4 and int(np.prod(t.shape[1:])) // 4 == t.shape[1]]
    if len(boxes) == 2:
        boxes = [t for t in outs if "box" in t.name.lower() or "loc" in t.name.lower()]
    if len(boxes) != 1:
        return f"{usage}: cannot tell the boxes from the scores in {shown(outs)}"
    scores = outs[1] if outs[0] is boxes[0] else outs[0]
    n = boxes[0].shape[1]
    if scores.shape[1] != n:
        return f"{usage}: {boxes[0].name} has {n} anchors, {scores.name} {scores.shape[1]}"
    c = int(np.prod(scores.shape[2:])) - 1
    if c < 1:
        return f"{scores.name} {list(scores.shape)} has no class besides background"
    if not ctx.classes_ok(c):
        return ctx.class_note(c)
    cfg = ctx.task.ssd
    maps = [tuple(m) for m in cfg.feature_maps] if cfg.feature_maps else None
    if maps is None:
        maps = feature_maps(ctx.spec.width, ctx.spec.height, 6)
    count = anchor_count(cfg, maps)
    if count != n:  # counted before any anchor is made: the maps come from the config
        return (
            f"task.ssd makes {count} anchors on feature maps {[list(m) for m in maps]} at "
            f"{ctx.spec.width}x{ctx.spec.height}, the outputs have {n}; set task.ssd.feature_maps and the scales of the "
            "model's pipeline.config"
        )
    anchors = ssd_anchors(cfg, maps, ctx.spec.width, ctx.spec.height)
    return Head("ssd", {"boxes": boxes[0].name, "scores": scores.name}, classes=c, anchors=anchors)


def _fit_torchvision(ctx: Context) -> Fit:
    from edge.runtime.postprocess.torchvision_heads import PRESETS, anchor_count, anchors_for, feature_maps

    outs = ctx.outputs
    cfg = ctx.task.torchvision
    preset = PRESETS[cfg.model]
    fcos = preset.family == "fcos"
    usage = (
        "torchvision reads box regression [1, N, 4]" + (", centre-ness [1, N, 1]" if fcos else "") + " and class logits [1, N, C]"
    )
    if ctx.task.type != "torchvision":
        return "torchvision is chosen by task.type torchvision: its anchors follow the builder in task.torchvision.model"
    if len(outs) != 2 + fcos or any(len(t.shape) != 3 or not all(_static(d) for d in t.shape[1:]) for t in outs):
        return f"{usage}; got {shown(outs)}"
    roles: Dict[str, TensorInfo] = {}
    if fcos:
        ctr = [t for t in outs if "ctr" in t.name.lower() or "center" in t.name.lower() or "centre" in t.name.lower()]
        if len(ctr) != 1 or ctr[0].shape[2] != 1:
            return f"{usage}: the centre-ness output is named for it (bbox_ctrness), got {shown(outs)}"
        roles["centerness"] = ctr[0]
    rest = [t for t in outs if t not in roles.values()]
    boxes = [t for t in rest if t.shape[2] == 4]
    if len(boxes) == 2:
        boxes = [t for t in rest if any(w in t.name.lower() for w in ("bbox", "box", "regression", "loc"))]
    if len(boxes) != 1:
        return f"{usage}: cannot tell the boxes from the scores in {shown(outs)}"
    roles["boxes"] = boxes[0]
    roles["scores"] = [t for t in rest if t is not boxes[0]][0]
    n, c = boxes[0].shape[1], roles["scores"].shape[2]
    if any(t.shape[1] != n for t in outs):
        return f"{usage}: the outputs have {[t.shape[1] for t in outs]} anchors, not one count"
    if preset.family == "ssd" and c < 2:
        return f"{roles['scores'].name} {list(roles['scores'].shape)} has no class besides the background"
    if not ctx.classes_ok(c):
        return ctx.class_note(c)
    w, h = ctx.spec.width, ctx.spec.height
    maps = [(m[0], m[1]) for m in cfg.feature_maps] if cfg.feature_maps else feature_maps(cfg.model, w, h)
    if len(maps) != preset.levels or min(min(m) for m in maps) < 1:
        return f"{cfg.model} has {preset.levels} levels; task.torchvision.feature_maps gives {[list(m) for m in maps]}"
    expected = anchor_count(preset, maps)  # counted before any anchor is made: the maps come from the config
    if expected != n:
        return (
            f"{cfg.model} makes {expected} anchors on feature maps {[list(m) for m in maps]} at {w}x{h}, the outputs have "
            f"{n}; set task.torchvision.feature_maps to the backbone's maps"
        )
    anchors = anchors_for(preset, maps, w, h)
    names = {r: t.name for r, t in roles.items()}
    return Head("torchvision", names, layout=preset.family, classes=c, anchors=anchors, maps=maps)


def _fit_torchvision_nms(ctx: Context) -> Fit:
    outs = ctx.outputs
    usage = "torchvision_nms reads a torchvision detector exported whole: boxes [N, 4], scores [N] and labels [N]"
    roles = {"boxes": _role(outs, ("box",)), "scores": _role(outs, ("score",)), "classes": _role(outs, ("label", "class"))}
    if len(outs) != 3 or any(t is None for t in roles.values()):
        masks = " (Mask and Keypoint R-CNN's extra outputs are not decoded yet)" if len(outs) > 3 else ""
        return f"{usage}{masks}; got {shown(outs)}"
    b, s, c = (roles[k].shape for k in ("boxes", "scores", "classes"))  # type: ignore[union-attr]
    if len(b) != 2 or b[1] != 4 or len(s) != 1 or len(c) != 1:
        return f"{usage}; got {shown(outs)}"
    return Head("torchvision_nms", {r: t.name for r, t in roles.items()}, classes=ctx.classes or 0)  # type: ignore[union-attr]


_RETINA_NAMES = {"boxes": ("loc", "box", "bbox"), "scores": ("conf", "score", "cls"), "landmarks": ("landm", "lmk", "kps")}


def _retina_role(t: TensorInfo, width: Any) -> Optional[str]:
    """A RetinaFace output's role: by its width, or by its name where an export left the width dynamic."""
    from edge.runtime.postprocess.retinaface import WIDTHS

    if _static(width):
        return next((r for r, w in WIDTHS.items() if w == width), None)
    found = [r for r, words in _RETINA_NAMES.items() if any(w in t.name.lower() for w in words)]
    return found[0] if len(found) == 1 else None


def _fit_retinaface(ctx: Context) -> Fit:
    from edge.runtime.postprocess.retinaface import level_grids, prior_boxes

    outs, cfg, spec = ctx.outputs, ctx.task.priors, ctx.spec
    usage = (
        "retinaface reads boxes [1, N, 4], scores [1, N, 2] and landmarks [1, N, 10] per prior, or each level's maps of "
        "4A, 2A and 10A channels"
    )
    levels = level_grids(cfg, spec.width, spec.height)
    count = sum(rows * cols * len(sizes) for (_, rows, cols), sizes in zip(levels, cfg.min_sizes))
    where = f"task.priors makes {count} priors at {spec.width}x{spec.height}"  # made only for a head that fits
    if outs and all(len(t.shape) == 3 for t in outs):
        roles = {_retina_role(t, t.shape[2]): t for t in outs}
        if len(outs) not in (2, 3) or len(roles) != len(outs) or None in roles or not {"boxes", "scores"} <= set(roles):
            return f"{usage}; cannot tell the boxes, scores and landmarks apart in {shown(outs)}"
        counts = {t.shape[1] for t in outs}
        if any(_static(n) and n != count for n in counts):
            return f"{where}, the outputs have {sorted(n for n in counts if _static(n))}; set task.priors as trained"
        head = Head("retinaface", {r: t.name for r, t in roles.items()}, "rows", 1)  # type: ignore[misc]
        head.anchors = prior_boxes(cfg, spec.width, spec.height)
        head.keypoints = (5, 2) if "landmarks" in roles else None
        return head
    if len(outs) not in (2 * len(levels), 3 * len(levels)) or any(len(t.shape) != 4 for t in outs):
        return f"{usage}; got {shown(outs)}"
    for layout, grid_at, channels_at in (("nhwc", slice(1, 3), 3), ("nchw", slice(2, 4), 1)):
        roles: Dict[str, str] = {}
        for (stride, rows, cols), sizes in zip(levels, cfg.min_sizes):
            here = [t for t in outs if tuple(t.shape[grid_at]) == (rows, cols)]
            for t in here:
                c = t.shape[channels_at]
                if _static(c) and c % len(sizes):
                    continue  # not a whole number of values a prior: no map of this level
                role = _retina_role(t, c // len(sizes) if _static(c) else None)
                if role and f"{role}{stride}" not in roles:
                    roles[f"{role}{stride}"] = t.name
        if len(roles) == len(outs) and all(f"{r}{s}" in roles for r in ("boxes", "scores") for s, _, _ in levels):
            head = Head("retinaface", roles, layout, 1, strides=tuple(s for s, _, _ in levels))
            head.anchors = prior_boxes(cfg, spec.width, spec.height)
            head.keypoints = (5, 2) if len(outs) == 3 * len(levels) else None
            return head
    return (
        f"{usage}: {where} on levels {[[r, c] for _, r, c in levels]} (rows, columns) and {[len(m) for m in cfg.min_sizes]} "
        "priors a cell, which the outputs' grids and channels do not match"
    )


def _detr_meta(ctx: Context) -> bool:
    return getattr(ctx.meta, "head", None) == "RTDETRDecoder"


def _fit_detr(ctx: Context) -> Fit:
    outs = ctx.outputs
    usage = "detr reads [1, Q, 6] (cx, cy, w, h, score, class), [1, Q, 4 + C], or boxes [1, Q, 4] with logits [1, Q, C]"
    if not outs or len(outs) > 2 or any(len(t.shape) != 3 or not _static(t.shape[2]) for t in outs):
        return usage
    queries = {t.shape[1] for t in outs}
    if len(queries) != 1:
        return f"{usage}; the outputs have different query counts: {shown(outs)}"
    q = queries.pop()
    if _static(q) and q > MAX_END2END:
        return f"{outs[0].name} has {q} rows: more than a DETR's queries (a head that needs NMS?)"
    if len(outs) == 2:
        boxes = [t for t in outs if t.shape[2] == 4]
        if len(boxes) == 2:
            boxes = [t for t in outs if "box" in t.name.lower()]
        if len(boxes) != 1:
            return f"{usage}: cannot tell the boxes from the logits in {shown(outs)}"
        logits = outs[1] if outs[0] is boxes[0] else outs[0]
        c = logits.shape[2] - (1 if getattr(ctx.task, "detr_scores", "sigmoid") == "softmax" else 0)
        if not ctx.classes_ok(c):
            return ctx.class_note(c)
        return Head("detr", {"boxes": boxes[0].name, "logits": logits.name}, "pair", c)
    t = outs[0]
    if ctx.task.type != "detr" and not _detr_meta(ctx):
        return "a single [1, Q, 4 + C] output reads as detr only with task.type detr or an RT-DETR's metadata"
    width = t.shape[2]
    if width == 6 and not (ctx.classes == 2 and not _detr_meta(ctx)):
        return Head("detr", {"rows": t.name}, "rows", ctx.classes or 0)
    c = width - 4
    if not ctx.classes_ok(c):
        return ctx.class_note(c)
    return Head("detr", {"rows": t.name}, "scores", c)


def _fit_segment(ctx: Context) -> Fit:
    outs = ctx.outputs
    usage = "segment reads one [1, C, h, w] map of class scores (or one channel of foreground, or [1, h, w] class ids)"
    if ctx.task.type != "segment":  # feature maps, depth, heatmaps and upscaled images have that shape too
        return "segment is chosen by task.type segment: a [1, C, h, w] map could be any dense output"
    if len(outs) != 1 or len(outs[0].shape) not in (3, 4):
        return usage
    t = outs[0]
    ids = t.dtype.kind in "iu"
    if len(t.shape) == 3 and not ids:
        return f"{usage}; {t.name} {list(t.shape)} is rank 3 but not integer class ids"
    grid = t.shape[-2:]
    if any(_static(d) and d < 2 for d in grid):
        return f"{t.name} {list(t.shape)} is no map: a segmenter's output is at least 2x2"
    c = t.shape[1] if len(t.shape) == 4 else 0
    if ids:  # one channel; a dynamic one is the batch of an ArgMax kept at [1, batch, h, w] (RapidAI's table lines)
        if len(t.shape) == 4 and _static(c) and c != 1:
            return f"{t.name} {list(t.shape)}: integer class ids come in one channel"
        classes = ctx.classes or 0
    elif len(t.shape) == 4 and not _static(c):
        return f"{t.name} {list(t.shape)}: the number of classes (dimension 1) must be static"
    else:
        classes = c
        if c > 1 and not ctx.classes_ok(c):
            return ctx.class_note(c)
    return Head("segment", {"map": t.name}, classes=classes)


FITS: Dict[str, Callable[[Context], Fit]] = {
    "yolo": _fit_yolo,
    "yolo_seg": _fit_seg,
    "yolo_pose": _fit_pose,
    "yolo_end2end": _fit_end2end,
    "nms_plugin": _fit_nms_plugin,
    "deepstream_yolo": _fit_deepstream,
    "blazeface": _fit_blazeface,
    "centerface": _fit_centerface,
    "yunet": _fit_yunet,
    "picodet": _fit_picodet,
    "ssd": _fit_ssd,
    "torchvision": _fit_torchvision,
    "torchvision_nms": _fit_torchvision_nms,
    "retinaface": _fit_retinaface,
    "detr": _fit_detr,
    "segment": _fit_segment,
    "classify": _fit_classify,
}
# Ultralytics' metadata task -> the types that decode it.
_META_TASKS = {
    "detect": ("yolo", "yolo_end2end"),
    "segment": ("yolo_seg", "yolo_end2end"),
    "pose": ("yolo_pose", "yolo_end2end"),
    "classify": ("classify",),
}


def choose(
    task: Any,
    outputs: List[TensorInfo],
    spec: PreprocessSpec,
    labels: List[str],
    meta: Any = None,
    key: str = "key 'task.type'",
) -> Head:
    """The head to decode, or a ConfigError naming the outputs and the types that would fit. ``key`` names task.type
    as the user gave it (a flag, or a key in a file)."""
    ctx = Context(task, outputs, spec, labels, meta)
    declared = task.type
    if declared != "auto":
        fit = FITS[declared](ctx)
        if isinstance(fit, Head):
            return fit
        others = [k for k, f in FITS.items() if k != declared and isinstance(f(ctx), Head)]
        hint = f"; task.type {' or '.join(others)} fits them" if others else "; none of edge's decoders fits them"
        start = f"{key}: {declared} does not fit the model's outputs {shown(outputs)}: "
        # The line may run long (the outputs, then why they do not fit); past the limit the reason is cut, never the
        # fix at its end
        room = max(REFUSAL_LIMIT - len(start) - len(hint), 80)
        reason = fit if len(fit) <= room else fit[: room - 1] + "…"
        raise ConfigError(one_line(start + reason + hint, REFUSAL_LIMIT))
    meta_task = getattr(meta, "task", None)
    if meta_task == "obb":
        raise ConfigError(
            one_line(f"the model is an oriented-box (obb) detector ({shown(outputs)}); edge does not decode obb heads yet")
        )
    kinds = _META_TASKS.get(meta_task, tuple(FITS))
    if _detr_meta(ctx):
        kinds = ("detr",)
    if ctx.layout != "auto":  # a YOLO layout named in the config: only the raw YOLO heads are meant
        kinds = tuple(k for k in kinds if k in ("yolo", "yolo_seg", "yolo_pose"))
    if getattr(meta, "end2end", None):
        kinds = tuple(k for k in kinds if k == "yolo_end2end") or kinds
    fits = {k: FITS[k](ctx) for k in kinds}
    heads = [f for f in fits.values() if isinstance(f, Head)]
    ambiguous = [f"{k} ({r})" for k, r in fits.items() if isinstance(r, str) and r.startswith("ambiguous")]
    if len(heads) == 1 and not ambiguous:
        return heads[0]
    if heads or ambiguous:
        raise ConfigError(
            one_line(
                f"{key}: not set (auto), and the outputs {shown(outputs)} fit "
                + " and ".join([h.describe() for h in heads] + ambiguous)
                + "; set task.type, or task.yolo_layout for a raw YOLO head"
            )
        )
    raise ConfigError(
        one_line(
            f"{key}: not set (auto), and the outputs {shown(outputs)} fit none of edge's decoders; "
            f"set task.type to one of {', '.join(FITS)} (docs/models.md shows each head's outputs)"
        )
    )


def build(head: Head, task: Any, outputs: List[TensorInfo], spec: PreprocessSpec, labels: List[str]) -> Any:
    """The decoder object for ``head``; its ``head_info`` says which, for the start-up line."""
    for t in outputs:
        if t.name in head.outputs.values() and t.dtype in (np.dtype(np.int8), np.dtype(np.uint8)):
            # quantized values mean nothing without the tensor's scale, which an engine does not hand over
            raise ConfigError(
                one_line(
                    f"output '{t.name}' is {t.dtype.name}: edge cannot read quantized outputs without their scale; build "
                    "the engine with float16 or float32 outputs (edge-build's default)"
                )
            )
    decoder = _decoder(head, task, outputs, spec, labels)
    decoder.head, decoder.head_info = head, head.describe()
    return decoder


def _decoder(head: Head, task: Any, outputs: List[TensorInfo], spec: PreprocessSpec, labels: List[str]) -> Any:
    if head.kind == "blazeface":
        from edge.runtime.postprocess.blazeface import BlazeFace

        return BlazeFace(task, outputs, spec, labels or ["face"])
    if head.kind == "classify":
        from edge.runtime.postprocess.classify import Classify

        return Classify(task, head.outputs["scores"], labels)
    if head.kind == "centerface":
        from edge.runtime.postprocess.centerface import CenterFace

        return CenterFace(task, head, labels, spec.width, spec.height)
    if head.kind == "yunet":
        from edge.runtime.postprocess.yunet import YuNet

        return YuNet(task, head, labels, spec.width, spec.height)
    if head.kind == "ssd":
        from edge.runtime.postprocess.ssd import Ssd

        return Ssd(task, head, labels, spec.width, spec.height)
    if head.kind == "torchvision":
        from edge.runtime.postprocess.torchvision_heads import TorchvisionHead

        return TorchvisionHead(task, head, labels, spec.width, spec.height)
    if head.kind == "retinaface":
        from edge.runtime.postprocess.retinaface import RetinaFace

        return RetinaFace(task, head, labels)
    if head.kind == "segment":
        from edge.runtime.postprocess.segment import Segmenter

        return Segmenter(task, head, labels, spec.width, spec.height)
    if head.kind == "detr":
        from edge.runtime.postprocess.detr import Detr

        return Detr(task, head, labels, spec.width, spec.height)
    if head.kind == "picodet":
        from edge.runtime.postprocess.gfl import Gfl

        return Gfl(task, head, labels, spec.width, spec.height)
    if head.kind in ("yolo", "yolo_seg", "yolo_pose"):
        from edge.runtime.postprocess.yolo import Yolo

        return Yolo(task, head, labels, spec.width, spec.height)
    from edge.runtime.postprocess.decoded import Decoded

    return Decoded(task, head, labels, spec.width, spec.height)
