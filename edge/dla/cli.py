"""`edge dla MODEL.onnx --target orin|xavier`: predict DLA placement from the ONNX graph, no Jetson needed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Tuple

from edge import argtypes
from edge.errors import printable

TRT_CHOICES = ("8.5", "8.6", "10.3", "10.7", "11.4")  # rules.TRT_VERSIONS, repeated so --help imports nothing heavy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the ONNX model, or asset://NAME for a pinned asset (edge assets list)")
    parser.add_argument(
        "--target", required=True, choices=("orin", "xavier"), help="DLA generation (Jetson AGX/NX Orin or Xavier)"
    )
    parser.add_argument(
        "--trt",
        choices=TRT_CHOICES,
        help="TensorRT of the JetPack: 8.5 (JetPack 5), 8.6 (6.0), 10.3 (6.1/6.2), 10.7, 11.4 (7.2.2+); default 10.3 on Orin, 8.5 on Xavier",
    )
    parser.add_argument(
        "--shape", action="append", default=[], metavar="NAME=1x3xHxW", help="static shape of a dynamic input (repeat per input)"
    )
    parser.add_argument(
        "--precision", choices=("fp16", "int8"), default="fp16", help="DLA precision the engine will use (default fp16)"
    )
    parser.add_argument("--json", type=argtypes.output_file, metavar="OUT", help="also write the full report as JSON")
    parser.add_argument(
        "--fix",
        type=argtypes.output_file,
        metavar="OUT.onnx",
        help="write a rewritten model that keeps the maths and moves work onto the DLA",
    )


def _shapes(args: argparse.Namespace) -> Dict[str, Tuple[int, ...]]:
    from edge.graph.model import load_model, model_inputs, parse_shapes

    if not args.shape:
        return {}
    names = [i.name for i in model_inputs(load_model(args.model))]
    return parse_shapes(args.shape, names)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def render(report: Any) -> List[str]:
    """The placement table and summary as lines of text (also used by the builder's placement report)."""
    width = min(48, max([len(n.name) for n in report.nodes] + [4]))
    lines = [f"{'node':{width}}  {'op':18} {'TensorRT layer':16} {'device':7} reason", "-" * (width + 60)]
    for n in report.nodes:
        device = f"DLA:{n.subgraph}" if n.device == "DLA" else "GPU"
        reason = n.reason or (f"fuses into {n.fused_into}" if n.fused_into else "")
        layer = n.layer if len(n.layer) <= 16 else n.layer.split("(")[0] + "…"
        if n.unconfirmed:
            reason = (reason + "; " if reason else "") + "unconfirmed: " + ", ".join(n.unconfirmed)
        lines.append(f"{_cut(n.name, width):{width}}  {n.op:18} {layer:16} {device:7} {reason}".rstrip())
        extra = [t for t in n.trt_layers if not t.endswith(": " + n.name)]
        if len(n.trt_layers) > 1 and extra:
            lines.append(f"{'':{width}}    build log: " + "; ".join(extra))
    s = report.summary()
    lines += [
        "",
        f"target {report.target} (TensorRT {report.trt}, JetPack {report.jetpack}), {report.precision}, inputs "
        + ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in report.inputs.items()),
        f"nodes on DLA: {s['dla_nodes']}/{s['nodes']} ({s['dla_node_share']:.1%}); FLOPs on DLA: {s['dla_flops_share']:.1%} "
        f"of {s['flops'] / 1e9:.2f} GFLOP; {s['folded_nodes']} nodes folded at build time",
        f"DLA subgraphs: {s['subgraphs']} (cap {s['max_subgraphs_per_core']} per core"
        + (f", {s['candidate_subgraphs']} wanted" if s["candidate_subgraphs"] > s["subgraphs"] else "")
        + f"); DLA<->GPU transitions: {s['transitions']}; GPU islands between DLA layers: {s['gpu_islands']}",
    ]
    if s["gpu_by_rule"]:
        lines.append("on GPU because of: " + ", ".join(f"{rule} x{count}" for rule, count in s["gpu_by_rule"].items()))
    lines += [f"warning: {f}" for f in report.findings]
    if report.unconfirmed_rules():
        lines.append(
            "rules no source settles (marked 'unconfirmed'): "
            + ", ".join(report.unconfirmed_rules())
            + "; --json lists each rule's sources"
        )
    lines.append("prediction only: confirm with config.can_run_on_DLA() and the 'Layers Running on DLA' build log on the device")
    return [printable(line) for line in lines]  # names come from the file: an escape sequence would drive the terminal


def main(args: argparse.Namespace) -> int:
    from edge.assets import model_argument
    from edge.dla.predict import predict
    from edge.outputs import check_outputs, write_atomic, write_json

    args.model = str(model_argument(args.model)[0])
    check_outputs({"--json": args.json, "--fix": args.fix}, {"MODEL": args.model})
    shapes = _shapes(args)
    model: Any = args.model
    if args.fix and shapes:
        from edge.graph.model import fixed_elsewhere, load_model, model_inputs, release_inputs

        loaded = load_model(args.model)
        resized = fixed_elsewhere(loaded, shapes)
        if resized:  # a fully convolutional model exported at another size: --fix writes it at this one
            model = release_inputs(loaded, resized)
    report = predict(model, args.target, args.trt, shapes, args.precision)
    if model is not args.model:  # the copy's symbolic dimensions are ours, not the file's: say what the file has
        report.findings = [f for f in report.findings if not any(f.startswith(f"input '{n}' is dynamic") for n in resized)]
        declared = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model_inputs(loaded)}
        report.findings += [
            f"input '{n}' is fixed at {'x'.join(map(str, declared[n]))} in the file; --fix writes it at "
            f"{'x'.join(map(str, shapes[n]))}"
            for n in resized
        ]
    print("\n".join(render(report)))
    data = report.to_dict()
    if args.fix:
        from edge.dla.fix import fix

        out = Path(args.fix)
        result = fix(model, args.target, args.trt, shapes, args.precision)
        write_atomic(out, result.model.SerializeToString())
        print(f"\n--fix wrote {out} (each rewrite: the written model without it -> with it):")
        keys = ("gpu_nodes", "subgraphs", "transitions", "gpu_islands", "dla_flops_share", "dynamic_inputs")

        def changes(step: Any) -> str:
            return ", ".join(f"{k} {step.before[k]}->{step.after[k]}" for k in keys if step.before[k] != step.after[k])

        for step in result.steps:
            print(f"  {step.name}: {step.sites} site(s); {changes(step)}")
        for step in result.skipped:
            print(f"  skipped {step.name} ({step.sites} site(s)): {changes(step) or 'no change in counts'}, no gain")
        if not result.steps and not result.skipped:
            print("  nothing to rewrite: no safe rewrite applies to this model and target")
        worst = max(result.max_abs_diff.values(), default=0.0)
        print(f"  ONNX Runtime on random input: outputs unchanged (max abs diff {worst:.3g})")
        data["fix"] = {"output": str(out), **result.to_dict(), "after": result.report.summary() if result.report else None}
    if args.json:
        write_json(args.json, data)
    return 0
