"""The live view: a small page with the annotated frames as an MJPEG stream and FPS, latency and power beside them.

    GET /             the page (it polls /stats.json once a second)
    GET /stream.mjpg  multipart/x-mixed-replace JPEG stream (at most view.max_viewers at once)
    GET /frame.jpg    one current frame
    GET /stats.json   fps, latency_ms, power_w, energy_j_per_frame, frames, dropped, viewers, encoded

Nothing is drawn or encoded while nobody watches. While someone does, the sink stage hands over at most
``view.max_fps`` frames a second (a reference, no copy) and a separate encoder thread draws and JPEG-encodes only
the newest one, so a slow browser or a slow encode never holds a frame up in the pipeline.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Optional, Tuple

import numpy as np

from edge.outputs import strict_json
from edge.redact import redact
from edge.runtime.outputs.httpserve import Handler
from edge.runtime.outputs.sinks import Sink, annotate
from edge.runtime.postprocess import Result
from edge.runtime.sources import Frame
from edge.runtime.status.live import Live

log = logging.getLogger("edge.view")

BOUNDARY = "edgeframe"
SNAPSHOT_WAIT_S = 3.0  # GET /frame.jpg: how long to wait for a frame to be encoded


class LiveView:
    def __init__(self, cfg: Any) -> None:
        self.max_fps, self.quality, self.width, self.max_viewers = cfg.max_fps, cfg.quality, cfg.width, cfg.max_viewers
        self.live: Optional[Live] = None
        self.viewers = 0
        self.served = 0  # stream connections over the run
        self.encoded = 0
        self._cond = threading.Condition()
        self._job: Optional[Tuple[np.ndarray, Optional[Result]]] = None  # the newest frame offered, not yet encoded
        self._jpeg: Optional[bytes] = None
        self._seq = 0
        self._wanted_until = 0.0  # a snapshot request wants frames until then
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._encode_loop, name="view-encode", daemon=True)
        self._thread.start()

    # -- the pipeline's side --------------------------------------------------
    def watched(self) -> bool:
        return self.viewers > 0 or time.monotonic() < self._wanted_until

    def offer(self, image: np.ndarray, result: Optional[Result]) -> None:
        """The newest frame (already annotated when ``result`` is None); replaces one the encoder has not taken."""
        with self._cond:
            self._job = (image, result)
            self._cond.notify_all()

    def _encode_loop(self) -> None:
        import cv2

        while not self._closing.is_set():
            with self._cond:
                if self._job is None:
                    self._cond.wait(0.5)
                    continue
                image, result = self._job
                self._job = None
            if result is not None:
                image = annotate(image, result)
            h, w = image.shape[:2]
            if w > self.width:
                image = cv2.resize(image, (self.width, max(1, round(h * self.width / w))), interpolation=cv2.INTER_AREA)
            ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, self.quality])
            if not ok:
                log.warning("view: OpenCV could not encode a %dx%d frame as JPEG", w, h)
                continue
            with self._cond:
                self._jpeg, self._seq = buf.tobytes(), self._seq + 1
                self.encoded += 1
                self._cond.notify_all()

    def _newer(self, seq: int, timeout: float) -> Tuple[Optional[bytes], int]:
        """The newest JPEG once it is newer than ``seq`` (or None after ``timeout`` or on close)."""
        with self._cond:
            self._cond.wait_for(lambda: self._seq > seq or self._closing.is_set(), timeout)
            return (self._jpeg, self._seq) if self._seq > seq else (None, seq)

    # -- HTTP routes ----------------------------------------------------------
    def page(self, h: Handler) -> None:
        info = self.live.info if self.live is not None else {}
        title = f"edge · {info.get('model', '')} · {info.get('backend', '')}"
        h.reply(200, PAGE.replace("{title}", _html(title)).encode(), "text/html; charset=utf-8")

    def stats(self, h: Handler) -> None:
        data = self.live.stats() if self.live is not None else {}
        data.update(viewers=self.viewers, encoded=self.encoded, max_fps=self.max_fps)
        h.reply(200, redact(json.dumps(strict_json(data))).encode(), "application/json")  # names may carry URIs

    def snapshot(self, h: Handler) -> None:
        with self._cond:
            seq = self._seq
            self._wanted_until = time.monotonic() + SNAPSHOT_WAIT_S
        jpeg, _ = self._newer(seq, SNAPSHOT_WAIT_S)
        if jpeg is None:
            h.reply(503, b"no frame yet (is the pipeline running?)\n", "text/plain")
        else:
            h.reply(200, jpeg, "image/jpeg")

    def stream(self, h: Handler) -> None:
        with self._cond:
            full = self.viewers >= self.max_viewers
            if not full:
                self.viewers += 1
                self.served += 1
        if full:
            h.reply(503, f"{self.max_viewers} viewers already (view.max_viewers)\n".encode(), "text/plain")
            return
        try:
            h.send_response(200)
            h.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={BOUNDARY}")
            h.send_header("Cache-Control", "no-store")
            h.end_headers()
            seq = 0
            while not self._closing.is_set() and not h.server.closing.is_set():
                jpeg, seq = self._newer(seq, 1.0)
                if jpeg is not None:
                    head = f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n".encode()
                    h.wfile.write(head + jpeg + b"\r\n")
        finally:
            with self._cond:
                self.viewers -= 1

    def close(self) -> None:
        self._closing.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=2.0)


class ViewSink(Sink):
    """Hands the live view a frame only while someone watches, at most view.max_fps a second."""

    name = "view"

    def __init__(self, view: LiveView, url: str) -> None:
        self.view, self.url = view, url
        self._next = 0.0

    def write(self, frame: Frame, result: Result, record: dict, annotated: Optional[np.ndarray]) -> None:
        if not self.view.watched():
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 1.0 / self.view.max_fps
        # The encoder runs later on its own thread, after the frame's buffer went back to the ring: it gets a copy.
        self.view.offer(frame.bgr(copy=True) if annotated is None else annotated, result if annotated is None else None)

    def close(self, failed: bool = False) -> Optional[str]:
        v = self.view
        return f"view: {v.encoded} frames encoded for {v.served} stream(s) at {self.url}/"


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body { margin: 0; background: #111; color: #eee; font: 18px/1.3 "DejaVu Sans", sans-serif; }
#bar { display: flex; gap: 28px; align-items: baseline; height: 44px; padding: 8px 12px 0; background: #222; }
#bar b { font-size: 26px; color: #fff; }
#bar .k { color: #9ab; font-size: 15px; }
#state { margin-left: auto; color: #9ab; font-size: 15px; }
#v { display: block; max-width: 100%; }
</style></head>
<body>
<div id="bar">
  <span><span class="k">FPS</span> <b id="fps">-</b></span>
  <span><span class="k">latency</span> <b id="lat">-</b></span>
  <span><span class="k">power</span> <b id="pow">-</b></span>
  <span><span class="k">frames</span> <b id="frames">-</b></span>
  <span id="state">{title}</span>
</div>
<img id="v" src="stream.mjpg" alt="live view">
<script>
const $ = (id) => document.getElementById(id);
const num = (v, d, unit) => (v === null || v === undefined) ? "n/a" : v.toFixed(d) + unit;
async function tick() {
  try {
    const s = await (await fetch("stats.json", {cache: "no-store"})).json();
    $("fps").textContent = num(s.fps, 1, "");
    $("lat").textContent = num(s.latency_ms, 1, " ms");
    $("pow").textContent = num(s.power_w, 2, " W");
    $("frames").textContent = s.frames + (s.dropped ? " (" + s.dropped + " dropped)" : "");
  } catch (e) {
    $("state").textContent = "not reachable";
  }
}
$("v").onerror = () => setTimeout(() => { $("v").src = "stream.mjpg?" + Date.now(); }, 2000);
tick();
setInterval(tick, 1000);
</script>
</body></html>
"""
