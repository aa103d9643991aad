"""The budget search's checks stop early only when the images left cannot change the answer.

A step of the search asks one question of a candidate INT8 model: is its top-1 within the budget? Once the images
scored so far settle that at both extremes (every image left right, every image left wrong), the rest cannot change
it. These tests run a real ONNX Runtime session on a model whose answer is known for every image (the class with the
brightest mean channel, always green here), so each image's right or wrong is set by its label alone, and the full
count is worked out by hand from the labels.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from edge.calib.check import BATCH, Checker, Measurement, TopK, session, top_k  # noqa: E402
from edge.calib.datasets import ImageSet  # noqa: E402
from edge.errors import EdgeError  # noqa: E402
from edge.graph.model import load_model, prepare  # noqa: E402
from edge.runtime.engines.preprocess import PreprocessSpec  # noqa: E402

SPEC = PreprocessSpec(width=4, height=4, color="rgb", resize="stretch")
GREEN = 1  # the model's answer for every frame: channel 1 is green in both BGR and RGB


def channel_mean_model(path, batch="N") -> object:
    """scores[n, c] = the mean of input channel c: a 3-class classifier with no weights to quantize."""
    h = onnx.helper
    graph = h.make_graph(
        [h.make_node("GlobalAveragePool", ["x"], ["g"], "pool"), h.make_node("Flatten", ["g"], ["scores"], "flatten")],
        "means",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 3, 4, 4])],
        [h.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, [batch, 3])],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]), str(path))
    return load_model(path)


@pytest.fixture(scope="module")
def sess(tmp_path_factory):
    return session(channel_mean_model(tmp_path_factory.mktemp("m") / "m.onnx"), 1, int8=False)


class Counted:
    """Frames: green on dark grey; counts how many were read (each read is one image scored)."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self, i: int) -> np.ndarray:
        self.reads += 1
        frame = np.full((4, 4, 3), 20, np.uint8)
        frame[..., 1] = 200
        return frame


def labelled(right: list) -> tuple:
    """An image set where image i is scored right exactly when right[i] (its label is green, else red)."""
    frames = Counted()
    labels = np.array([GREEN if r else 2 for r in right])
    return ImageSet("hits", SPEC, frames, len(right), labels, lambda out: out), frames


# which images a model gets right, a budget (images right), and a fixed batch or none
PATTERNS = dict(
    right=st.lists(st.booleans(), min_size=1, max_size=60),
    threshold=st.integers(min_value=0, max_value=61),
    fixed=st.sampled_from([None, 4]),
)


def test_without_a_test_every_image_is_scored_and_counted(sess):
    images, frames = labelled([True] * 13 + [False] * 7)
    t = top_k(sess, images, BATCH, None)
    assert (t.images, t.top1, t.complete, frames.reads) == (20, 13 / 20, True, 20)
    assert t.top5 == 1.0  # 3 classes: every label is among the top 5
    assert t.hits.tolist() == [True] * 13 + [False] * 7


@settings(max_examples=60, deadline=None)
@given(**PATTERNS)
# 11 images in batches of 4: 8 scored; 4 wrong settle a budget of 7 (a stop inside the fixed batches, always tried)
@example(right=[False] * 8 + [True] * 3, threshold=7, fixed=4)
def test_a_stopped_pass_gives_the_full_passs_answer(sess, right, threshold, fixed):
    """Budget: at least ``threshold`` images right. The answer from the stopped pass is the full pass's, whatever
    the pattern; a fixed batch of 4 scores only whole batches (the short last one is left out either way)."""
    images, frames = labelled(right)
    total = len(right) - len(right) % fixed if fixed else len(right)
    if total == 0:
        return
    full = sum(right[:total])  # by hand: the images a full pass scores, counted
    meets = lambda t: t.top1 * total >= threshold - 1e-9  # noqa: E731
    t = top_k(sess, images, BATCH, fixed, meets)
    assert meets(t) == (full >= threshold)
    if t.complete:  # a pass that meets the budget, or a miss only the last images settle: the exact score
        assert t.images == total and t.top1 * total == pytest.approx(full)
    else:  # stopped: the highest score still possible, which misses, after the images it scored
        assert full < threshold and t.images == total and t.top1 * total >= full and t.scored < total
        assert frames.reads == t.scored or fixed  # nothing read past the decision (a fixed batch reads ahead)


def test_a_clear_miss_stops_after_the_images_that_settle_it(sess):
    """12 wrong of 100 and a budget of 95 right: once 6 wrong are seen, 94 right is the most left possible."""
    images, frames = labelled([False] * 12 + [True] * 88)
    t = top_k(sess, images, BATCH, None, lambda t: t.top1 >= 0.95)
    assert not t.complete and frames.reads == BATCH  # the first batch holds 8 wrong: settled, nothing more is read
    assert t.top1 == pytest.approx((0 + 92) / 100)  # 8 scored, all wrong; 92 left at best
    assert t.top5 == pytest.approx((8 + 92) / 100)  # 3 classes: the 8 scored are all in the top 5; 92 left at best


def test_a_miss_only_the_last_batch_settles_is_an_exact_score(sess):
    """16 images, 15 right needed, the misses at 8 and 15: after 8 all right, 15 of 16 is still possible; the last batch
    ends the pass, which is then complete (an exact score, nothing to score again)."""
    images, _ = labelled([True] * 8 + [False] + [True] * 6 + [False])
    t = top_k(sess, images, BATCH, None, lambda t: t.top1 >= 15 / 16)
    assert (t.complete, t.images, t.top1) == (True, 16, 14 / 16)


def test_a_fixed_batch_scores_whole_batches_and_none_when_the_set_is_shorter(sess):
    images, frames = labelled([True] * 10)
    t = top_k(sess, images, BATCH, 4)
    assert (t.images, t.top1, len(t.hits)) == (8, 1.0, 8)  # 4 + 4; the short batch of 2 is left out
    images, _ = labelled([True] * 3)
    t = top_k(sess, images, BATCH, 4)
    assert (t.images, t.top1, t.hits.dtype, t.hits.shape) == (0, 0.0, np.dtype(bool), (0,))


@pytest.mark.parametrize("labels, scores", [(None, True), (True, None), (None, None)])
def test_a_set_without_labels_or_a_score_reader_is_refused(sess, labels, scores):
    images, _ = labelled([True] * 2)
    images.labels = images.labels if labels else None
    images.scores = images.scores if scores else None
    with pytest.raises(EdgeError, match=r"^--eval hits: this image set has no labels"):
        top_k(sess, images, BATCH, None)


def test_wrong_first_puts_the_misses_of_before_ahead_so_a_later_miss_shows_early(sess, tmp_path):
    """The k = 0 check got images 90..99 wrong. Scored in order a candidate with the same misses needs 96 images
    to be certain it misses 95 of 100; with those images first it needs one or two batches."""
    right = [True] * 90 + [False] * 10
    model = channel_mean_model(tmp_path / "m.onnx")
    images, frames = labelled(right)
    checker = Checker(model, prepare(model, {"x": (1, 3, 4, 4)}), "nchw", images.head(1), images, threads=1)
    before = checker.measure(model)
    assert before.labelled.hits.tolist() == right
    frames.reads = 0
    meets = lambda m: m.labelled.top1 >= 0.95  # noqa: E731
    in_order = checker.measure(model, meets=meets)
    reads_in_order, frames.reads = frames.reads, 0
    checker.wrong_first(before.labelled)
    first = checker.measure(model, meets=meets)
    assert not meets(in_order) and not meets(first)
    # one read is the agreement image; in order, 6 wrong (96 images, 12 batches) settle it; wrong first, one batch
    assert (reads_in_order, frames.reads) == (1 + 96, 1 + BATCH)
    assert not first.labelled.complete
    assert isinstance(first, Measurement) and isinstance(first.labelled, TopK)
    # a candidate that meets the budget is scored on all 100, wrong ones first: the exact 90 %
    met = checker.measure(model, meets=lambda m: m.labelled.top1 >= 0.85)
    assert (met.labelled.complete, met.labelled.images, met.labelled.top1) == (True, 100, 0.9)
    assert met.labelled.hits.tolist() == [False] * 10 + [True] * 90


def test_the_budget_test_sees_the_agreement_of_the_same_step(tmp_path):
    """--min-agreement with --max-drop: the labelled pass's test reads the step's fidelity too."""
    model = channel_mean_model(tmp_path / "m.onnx")
    images, _ = labelled([True] * 4)
    checker = Checker(model, prepare(model, {"x": (1, 3, 4, 4)}), "nchw", images.head(2), images, threads=1)
    seen = []
    checker.measure(model, meets=lambda m: seen.append([f.agreement for f in m.fidelity]) or True)
    assert seen and all(a == [1.0] for a in seen)  # the same model on both sides: every decision agrees


def test_reordered_keeps_each_image_with_its_label():
    images, _ = labelled([True, False, True])
    seen = []
    images.frame = lambda i: seen.append(i) or np.zeros((4, 4, 3), np.uint8)
    r = images.reordered([2, 0, 1])
    assert r.labels.tolist() == [GREEN, GREEN, 2] and r.count == 3
    r.frame(0), r.frame(2)
    assert seen == [2, 1]


def test_without_agreement_a_step_reads_no_check_image(tmp_path):
    """A --max-drop-only step decides on the labelled score alone: the check images wait for the chosen step."""
    model = channel_mean_model(tmp_path / "m.onnx")
    images, frames = labelled([True] * 4)
    checks, check_frames = labelled([True] * 3)
    checker = Checker(model, prepare(model, {"x": (1, 3, 4, 4)}), "nchw", checks, images, threads=1)
    check_frames.reads = 0
    m = checker.measure(model, agreement=False)
    assert (m.fidelity, check_frames.reads, m.labelled.top1) == ([], 0, 1.0)
    m = checker.measure(model)
    assert [f.name for f in m.fidelity] == ["scores"] and check_frames.reads == 3


@settings(max_examples=40, deadline=None)
@given(**PATTERNS)
def test_two_runs_at_once_give_the_one_at_a_time_answer(sess, right, threshold, fixed):
    """Batches run two at a time score the same images in the same order; a stopped pass reads at most the one
    batch that was running when the answer became certain."""
    total = len(right) - len(right) % fixed if fixed else len(right)
    meets = lambda t: t.top1 * max(total, 1) >= threshold - 1e-9  # noqa: E731
    images, _ = labelled(right)
    one = top_k(sess, images, BATCH, fixed, meets)
    images, frames = labelled(right)
    two = top_k(sess, images, BATCH, fixed, meets, callers=2)

    def seen(t: TopK) -> tuple:
        return t.images, t.top1, t.top5, t.scored, None if t.hits is None else t.hits.tolist()

    assert seen(two) == seen(one)
    assert frames.reads <= (two.scored or total) + (fixed or BATCH)


def test_runs_at_once_come_back_in_order_and_a_stop_leaves_no_thread(sess):
    import threading

    from edge.calib.check import ahead

    batches = [np.full((2, 3, 4, 4), k, np.float32) for k in range(7)]
    got = [(item[1], float(out[0][0, 0])) for item, out in ahead(sess, ((b, k) for k, b in enumerate(batches)), 3)]
    assert got == [(k, float(k)) for k in range(7)]  # the mean of a constant batch is its value
    threads = threading.active_count()
    for (_, k), _ in ahead(sess, ((b, k) for k, b in enumerate(batches)), 2):
        if k == 2:
            break  # the caller stops: the generator is closed here, its pool joined
    assert threading.active_count() == threads


@pytest.mark.parametrize(
    "threads, cores, want", [(1, 8, (1, 1)), (2, 8, (2, 1)), (3, 8, (2, 1)), (8, 2, (2, 4)), (0, 2, (2, 1)), (0, 1, (1, 1))]
)
def test_the_cores_are_split_into_runs_at_once(monkeypatch, threads, cores, want):
    """Two runs at once from two cores up, each with an equal share of the cores (0: all of this machine's)."""
    import edge.calib.check as check

    monkeypatch.setattr(check, "cores", lambda: cores)
    assert check.split(threads) == want


def test_the_images_fp32_got_wrong_come_right_after_those_before_got_wrong(sess, tmp_path):
    """FP32 gets images 90..99 wrong; the k = 0 check (given here) got 0..9 wrong. A candidate that misses 95 of 100
    the way FP32 does is certain after 0..9 (right) and six of 90..99: two batches, not the 96 images the set's own
    order after 0..9 would need. Once a complete pass got 90..99 wrong, they go first: one batch."""
    right = [True] * 90 + [False] * 10
    model = channel_mean_model(tmp_path / "m.onnx")
    images, frames = labelled(right)
    checker = Checker(model, prepare(model, {"x": (1, 3, 4, 4)}), "nchw", images.head(1), images, threads=1)
    before = TopK(100, 0.9, 1.0, np.array([False] * 10 + [True] * 90))
    checker.wrong_first(before)
    meets = lambda m: m.labelled.top1 >= 0.95  # noqa: E731
    frames.reads = 0
    assert not meets(checker.measure(model, meets=meets))
    assert frames.reads == 1 + 2 * BATCH  # one read is the agreement image
    met = checker.measure(model, meets=lambda m: m.labelled.top1 >= 0.85)
    assert met.labelled.complete and met.labelled.top1 == 0.9
    frames.reads = 0
    assert not meets(checker.measure(model, meets=meets))
    assert frames.reads == 1 + BATCH


def test_top5_counts_a_label_among_the_five_highest_scores_only(sess):
    """Seven classes: the model's three channel means and four scores below them (-1 ... -4). Green is first, red
    (2) second or third, class 4 (score -2) fifth, class 5 sixth, class 6 seventh: top-1 counts the greens, top-5
    the greens, reds and class 4s. A set of one image scores 0 or 1."""
    labels = np.array([GREEN] * 5 + [2] * 3 + [4] * 2 + [5] * 3 + [6] * 4)
    images, _ = labelled([True] * len(labels))
    images.labels = labels
    images.scores = lambda out: np.concatenate([out, -np.arange(1, 5, dtype=out.dtype) + 0 * out[:, :1]], axis=1)
    t = top_k(sess, images, BATCH, None)
    assert (t.top1, t.top5) == (5 / 17, 10 / 17)
    one = top_k(sess, images.head(1), BATCH, None)
    assert (one.images, one.top1, one.top5) == (1, 1.0, 1.0)


def test_a_fixed_batch_models_own_fp32_pass_runs_whole_batches_of_its_size(tmp_path):
    """Batch 4 fixed in the file, 10 check images and no kept reference: FP32 and INT8 both run two batches of 4
    (ONNX Runtime refuses any other batch size) and the short last one is left out."""
    model = channel_mean_model(tmp_path / "m.onnx", batch=4)
    images, frames = labelled([True] * 10)
    checker = Checker(model, prepare(model), "nchw", images, threads=1)
    m = checker.measure(model, labelled=False)
    assert [(f.name, f.positions, f.agree) for f in m.fidelity] == [("scores", 8, 8)]
    assert frames.reads == 10  # each batch read once for both; the short last one read, then left out


def test_the_first_fp32_pass_is_kept_and_later_checks_do_not_run_fp32_again(tmp_path):
    model = channel_mean_model(tmp_path / "m.onnx")
    images, _ = labelled([True] * 5)
    checker = Checker(model, prepare(model, {"x": (1, 3, 4, 4)}), "nchw", images, threads=1)
    first = checker.measure(model, labelled=False)

    class Spent:
        def run(self, *args, **kwargs):
            raise AssertionError("FP32 ran again")

    checker._fp32_session = Spent()
    again = checker.measure(model, labelled=False)
    assert [(f.positions, f.agree) for f in again.fidelity] == [(f.positions, f.agree) for f in first.fidelity] == [(5, 5)]


@pytest.mark.parametrize("threads", [1, 2])  # 2: two runs at once, one image each (the model's batch is 1)
@pytest.mark.parametrize("gt, want", [([10, 12, 50, 40], 1.0), ([30, 30, 62, 62], 0.0)])
def test_a_detectors_labelled_check_is_cocos_map_of_its_detections(tmp_path, gt, want, threads):
    """A detector whose one detection is always (10, 12)-(50, 40), class 0, on 64 x 64 images, against labels that
    are that box (COCO mAP 1) or one it overlaps by IoU 200 / 1944 = 0.10 (mAP 0), as pycocotools scores them."""
    import cv2

    from edge.calib.decisions import TaskDecisions
    from edge.calib.detection_eval import DetectionScore, DetectionSet
    from edge.config import TaskConfig
    from edge.runtime.engines import TensorInfo
    from edge.runtime.postprocess import heads, resolved_task
    from tests.headmodels import constant_model

    rows = np.zeros((1, 300, 6), np.float32)
    rows[0, 0] = [10, 12, 50, 40, 0.9, 0]
    model = load_model(constant_model(tmp_path / "det.onnx", {"output0": rows}, (1, 3, 64, 64)))
    spec = PreprocessSpec(width=64, height=64)
    files = []
    for i in range(3):
        files.append(tmp_path / f"{i}.png")
        cv2.imwrite(str(files[-1]), np.full((64, 64, 3), 60 * i, np.uint8))
    dset = DetectionSet("t", files, [np.array([gt], float)] * 3, [np.array([0])] * 3)
    infos = [TensorInfo("output0", (1, 300, 6), np.dtype(np.float32))]
    head = heads.choose(TaskConfig(), infos, spec, ["thing"])
    task = TaskDecisions(head, heads.build(head, resolved_task(TaskConfig(), head.kind), infos, spec, ["thing"]), spec)
    images = ImageSet("frames", spec, lambda i: cv2.imread(str(files[i])), 3)
    checker = Checker(model, prepare(model), "nchw", images, dset, threads=threads, task=task)
    m = checker.measure(model)
    assert isinstance(m.labelled, DetectionScore) and m.labelled.images == 3
    assert (m.labelled.map50, m.labelled.map) == (want, want)
    # the same model on both sides: its detections agree, compared through the head's decoder
    assert [(f.name, f.positions, f.agree) for f in m.fidelity if f.name == "detections"] == [("detections", 3, 3)]


def test_a_fixed_batch_classifiers_labelled_set_is_scored_in_whole_batches_of_its_size(tmp_path):
    """Batch 4 fixed in the file, 10 labelled images: 8 scored (the short last batch left out), with or without a
    budget's test, which ONNX Runtime would refuse at any other batch size."""
    model = channel_mean_model(tmp_path / "m.onnx", batch=4)
    images, _ = labelled([True] * 10)
    checker = Checker(model, prepare(model), "nchw", images.head(4), images, threads=1)
    full = checker.measure(model)
    assert (full.labelled.images, full.labelled.top1) == (8, 1.0)
    tested = checker.measure(model, meets=lambda m: m.labelled.top1 >= 0.5)
    assert (tested.labelled.images, tested.labelled.top1) == (8, 1.0)


def test_runs_really_overlap_up_to_the_callers_given():
    """``callers`` runs of the one session at once: a session whose run waits for a second run to start passes only
    if two are in flight together, and never sees more than ``callers``."""
    import threading

    from edge.calib.check import ahead

    class Meeting:
        def __init__(self) -> None:
            self.meet, self.lock, self.now, self.most = threading.Barrier(2, timeout=10), threading.Lock(), 0, 0

        def get_inputs(self):
            return [type("I", (), {"name": "x"})()]

        def run(self, _names, feed):
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)
            self.meet.wait()  # breaks (and the test fails) if no other run starts within 10 s
            with self.lock:
                self.now -= 1
            return [feed["x"]]

    s = Meeting()
    got = [int(out[0]) for _, out in ahead(s, ((np.array(k),) for k in range(6)), 2)]
    assert got == list(range(6)) and s.most == 2


def _three_colours(count: int) -> ImageSet:
    """Images red, green and blue in turn (BGR frames): the channel-mean model decides each one's colour."""
    colours = [(0, 0, 255), (0, 255, 0), (255, 0, 0)]
    frames = [np.full((4, 4, 3), colours[i % 3], np.uint8) for i in range(count)]
    return ImageSet("colours", SPEC, lambda i: frames[i], count)


def test_a_kept_reference_is_compared_batch_by_batch_with_its_own_images(tmp_path):
    """20 images checked in batches of 8, 8 and 4: once the first check keeps FP32's outputs, a second check of the
    same model agrees on all 20 only if each batch meets its own images' FP32 decisions (batch 3's colours differ
    from those of any other 4 images at a multiple of 4)."""
    assert BATCH == 8
    model = channel_mean_model(tmp_path / "m.onnx")
    checker = Checker(model, prepare(model, {"x": (1, 3, 4, 4)}), "nchw", _three_colours(20), threads=1)
    first = checker.measure(model, labelled=False)
    again = checker.measure(model, labelled=False)
    assert [(f.positions, f.agree) for f in first.fidelity] == [(f.positions, f.agree) for f in again.fidelity] == [(20, 20)]


def test_a_reference_the_statistics_pass_kept_is_used_instead_of_running_fp32(tmp_path):
    model = channel_mean_model(tmp_path / "m.onnx")
    graph = prepare(model, {"x": (1, 3, 4, 4)})
    kept = Checker(model, graph, "nchw", _three_colours(10), threads=1)
    kept.measure(model, labelled=False)  # fills its reference

    class Spent:
        def run(self, *args, **kwargs):
            raise AssertionError("FP32 ran although its outputs were handed over")

    checker = Checker(model, graph, "nchw", _three_colours(10), threads=1, reference=kept._kept)
    checker._fp32_session = Spent()
    assert [(f.positions, f.agree) for f in checker.measure(model, labelled=False).fidelity] == [(10, 10)]
