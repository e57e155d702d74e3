"""Faults at the edges of I/O: non-regular files, pickle bombs, closed pipes, slow disks, killed writers, full disks.

Each test here fails without the fix it guards (issue 13). A call that could hang without the
fix runs in a subprocess or a thread with a bounded timeout, so a regression fails instead of
hanging the suite.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interlock
from conftest import TinyModule, loader, only
from interlock import SaveCheckpoint, Trainer, TrainerState
from interlock.cli import inspect as inspect_module
from interlock.cli.main import STDOUT_CLOSED, main
from interlock.connectors.checkpoint import CHECKPOINT_FORMAT
from interlock.core.errors import CheckpointError, OutputError
from interlock.listeners import CSVLogger
from interlock.plugins import checkpoint_io
from interlock.plugins.checkpoint_io import FORMAT_VERSION, MAGIC, MAX_NODES, TorchCheckpointIO, check_bounded, frame

SRC = Path(interlock.__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
posix_only = pytest.mark.skipif(os.name != "posix", reason="FIFOs, flock and SIGKILL are POSIX")


# ---------------------------------------------------------------- helpers


DEEP = "@@deep@@"  # a string in a checkpoint that framed() replaces with lists nested deeper than torch.save can


def framed(path: Path, obj: Any, deep: int = 0) -> Path:
    """Write ``obj`` as a checkpoint file with a valid header and hash, whatever it holds (no checks on save).

    With ``deep``, the string :data:`DEEP` in ``obj`` becomes ``deep`` nested lists, written as pickle opcodes
    (torch.save itself would hit the recursion limit).
    """
    buf = io.BytesIO()
    torch.save(obj, buf)
    payload = buf.getvalue()
    if deep:
        pickled = b"X" + len(DEEP).to_bytes(4, "little") + DEEP.encode()
        nested_lists = b"]" * deep + b"K\x00" + b"a" * deep  # EMPTY_LIST x deep, BININT1 0, APPEND x deep
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(payload)) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
            for info in zin.infolist():
                data = zin.read(info.filename)
                if info.filename.endswith("data.pkl"):
                    assert data.count(pickled) == 1
                    data = data.replace(pickled, nested_lists)
                zout.writestr(info.filename, data)
        payload = out.getvalue()
    header = {
        "format": "interlock-checkpoint",
        "version": FORMAT_VERSION,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "payload_bytes": len(payload),
        "created": "2024-01-01T00:00:00.000+00:00",
    }
    path.write_bytes(frame(payload, header))
    return path


def bomb(depth: int, fanout: int = 2, kind: str = "list") -> Any:
    """``fanout`` references to one value, ``depth`` times over: tiny on disk, fanout**depth values as a tree."""
    value: Any = 0
    for _ in range(depth):
        if kind == "dict":
            value = {f"k{i}": value for i in range(fanout)}
        elif kind == "tuple":
            value = (value,) * fanout
        else:
            value = [value] * fanout
    return value


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def cycle() -> Any:
    loop: list[Any] = [1]
    loop.append(loop)
    return loop


def tree_size(obj: Any) -> tuple[int, int]:
    """(values, nesting depth) of ``obj`` walked naively as a tree: what a recursive walker would visit."""
    if isinstance(obj, dict):
        parts = [tree_size(x) for pair in obj.items() for x in pair]
    elif isinstance(obj, list | tuple | set):
        parts = [tree_size(x) for x in obj]
    else:
        return 1, 0
    return 1 + sum(n for n, _ in parts), 1 + max((d for _, d in parts), default=0)


def finishes(call: Callable[[], Any], seconds: float, unblock: Callable[[], None]) -> Any:
    """``call()``'s result or exception (returned, not raised), or pytest.fail if it has not returned in time.

    A call that hangs is released by ``unblock`` (e.g. opening the FIFO it waits on) before failing.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:
            box["result"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        unblock()
        thread.join(10)
        pytest.fail(f"the call did not return within {seconds} s")
    return box["result"]


def release_fifo(path: Path) -> Callable[[], None]:
    """Open the FIFO's write end once (without blocking), so a reader stuck in open() goes on."""

    def go() -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        os.close(fd)

    return go


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "interlock.cli", *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def real_checkpoint(root: Path) -> dict[str, Any]:
    """A real trainer checkpoint of TinyModule (saved after its second step), loaded back as a dict."""
    torch.manual_seed(0)
    trainer = Trainer(max_steps=2, default_root_dir=root, **only(), accelerator="cpu")
    trainer.on("fit.train.batch.end", lambda e: SaveCheckpoint(str(root / "real.ckpt")), once=2)
    trainer.fit(TinyModule(), loader())
    return TorchCheckpointIO().load_checkpoint(root / "real.ckpt")


# ---------------------------------------------------------------- 1. non-regular files


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def _directory(p: Path) -> Path:
    p.mkdir()
    return p


def _char_device(p: Path) -> Path:
    p.symlink_to("/dev/null")  # a link to a device: the device is what would be opened
    return p


def _link_to_fifo(p: Path) -> Path:
    os.mkfifo(p.with_name("real_fifo"))
    p.symlink_to(p.with_name("real_fifo"))
    return p


def _socket(p: Path) -> Path:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(p))
    sock.close()
    return p


NOT_REGULAR = {
    "fifo": (_fifo, "a FIFO"),
    "directory": (_directory, "a directory"),
    "character device": (_char_device, "a character device"),
    "link to a fifo": (_link_to_fifo, "a FIFO"),
    "socket": (_socket, "a socket"),
}


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path (a unix socket's path must fit in about 100 bytes)."""
    with tempfile.TemporaryDirectory(prefix="il-") as tmp:
        yield Path(tmp)


@posix_only
@pytest.mark.parametrize("reader", ["load_checkpoint", "read_header"])
@pytest.mark.parametrize("case", list(NOT_REGULAR))
def test_non_regular_files_are_refused_at_once_naming_file_and_expectation(
    short_tmp: Path, case: str, reader: str
) -> None:
    """A FIFO, directory, device or socket is refused at once, naming the file, what it is and what is wanted."""
    make, kind = NOT_REGULAR[case]
    path = make(short_tmp / "x.ckpt")
    outcome = finishes(lambda: getattr(TorchCheckpointIO(), reader)(path), 20, release_fifo(path))
    assert isinstance(outcome, CheckpointError), outcome
    message = str(outcome)
    assert str(path) in message and kind in message and "must be a regular file" in message


@posix_only
def test_inspect_of_a_fifo_exits_2_at_once(tmp_path: Path) -> None:
    """`interlock inspect FIFO` exits 2 with a one-line error instead of waiting for a writer forever."""
    fifo = _fifo(tmp_path / "pipe.ckpt")
    try:
        done = run_cli("inspect", str(fifo), timeout=90)
    except subprocess.TimeoutExpired:
        release_fifo(fifo)()
        pytest.fail("interlock inspect waited on the FIFO")
    assert done.returncode == 2, done.stderr
    assert f"error: {fifo} is a FIFO (named pipe)" in done.stderr and "Traceback" not in done.stderr


@posix_only
def test_resume_from_a_fifo_fails_at_once(tmp_path: Path) -> None:
    """fit(ckpt_path=FIFO) raises CheckpointError naming the FIFO instead of hanging in the load."""
    fifo = _fifo(tmp_path / "last.ckpt")
    trainer = Trainer(max_epochs=1, default_root_dir=tmp_path, **only(), accelerator="cpu")
    outcome = finishes(lambda: trainer.fit(TinyModule(), loader(), ckpt_path=fifo), 60, release_fifo(fifo))
    assert isinstance(outcome, CheckpointError) and f"{fifo} is a FIFO" in str(outcome), outcome


# ---------------------------------------------------------------- 2. bounded work per load


shapes = st.tuples(st.integers(1, 14), st.integers(1, 4), st.sampled_from(["list", "tuple", "dict"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes, max_nodes=st.integers(1, 40_000), max_depth=st.integers(1, 20))
def test_a_load_is_refused_exactly_when_the_tree_exceeds_a_limit(
    tmp_path: Path, shape: tuple[int, int, str], max_nodes: int, max_depth: int
) -> None:
    """A load succeeds iff the checkpoint, walked as a tree, has at most max_nodes values and max_depth nesting;
    the refusal names the file, the limit and a key path inside the bad value."""
    depth, fanout, kind = shape
    ckpt = {"state": {"x": bomb(depth, fanout, kind)}}
    if fanout**depth > 50_000:  # the naive count below would take too long; it is over max_nodes anyway
        size, height = max_nodes + 1, depth + 2
    else:
        size, height = tree_size(ckpt)
    path = framed(tmp_path / "b.ckpt", ckpt)
    reader = TorchCheckpointIO(max_nodes=max_nodes, max_depth=max_depth)
    if size <= max_nodes and height <= max_depth:
        assert reader.load_checkpoint(path) == ckpt
        assert check_bounded(ckpt, max_nodes=max_nodes, max_depth=max_depth) == size
        return
    with pytest.raises(CheckpointError) as info:
        reader.load_checkpoint(path)
    message = str(info.value)
    assert f"checkpoint {path}" in message
    assert (f"{max_depth} (MAX_DEPTH)" if height > max_depth else f"{max_nodes:,} values") in message
    assert "at the top level" in message or "['state']" in message


def test_a_2_to_the_60_bomb_is_refused_in_milliseconds_with_default_limits(tmp_path: Path) -> None:
    """A file of 2 KB that expands to 2**60 values is refused quickly, naming the file, the limit and the path."""
    path = framed(tmp_path / "bomb.ckpt", {"format": CHECKPOINT_FORMAT, "state": {"listeners": {"b": bomb(60)}}})
    assert path.stat().st_size < 4096
    started = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        TorchCheckpointIO().load_checkpoint(path)
    assert time.perf_counter() - started < 10
    message = str(info.value)
    assert str(path) in message and f"{MAX_NODES:,}" in message and "['state']['listeners']['b'][0]" in message
    assert "pickle bomb" in message and "TorchCheckpointIO(max_nodes=...)" in message


BAD_TREES: dict[str, Callable[[], Any]] = {
    "bomb": lambda: bomb(60),
    "deep": lambda: DEEP,  # framed(..., deep=5000) makes it 5000 nested lists
    "cycle": cycle,
}
BAD_MESSAGES = {"bomb": "pickle bomb", "deep": "(MAX_DEPTH)", "cycle": "reference cycle"}


@pytest.mark.parametrize("case", list(BAD_TREES))
def test_inspect_refuses_bad_trees_before_walking_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """`interlock inspect` on a bomb, 5000-deep nesting or a cycle exits 2 naming the file; it never walks it."""

    def walked(value: Any) -> Any:
        raise AssertionError("inspect walked the checkpoint before its size was checked")

    monkeypatch.setattr(inspect_module, "plain", walked)
    ckpt = {"format": CHECKPOINT_FORMAT, "state": {"metrics": {"m": BAD_TREES[case]()}}, "state_dict": {}}
    path = framed(tmp_path / f"{case}.ckpt", ckpt, deep=5000 if case == "deep" else 0)
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"checkpoint {path}" in err and BAD_MESSAGES[case] in err and "Traceback" not in err


def test_inspect_of_a_bomb_exits_2_in_a_real_process(tmp_path: Path) -> None:
    """The real `interlock inspect` process on a 2**60 bomb ends with status 2 instead of running forever."""
    path = framed(
        tmp_path / "bomb.ckpt", {"format": CHECKPOINT_FORMAT, "state": {"metrics": {"m": bomb(60)}}, "state_dict": {}}
    )
    try:
        done = run_cli("inspect", str(path), timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("interlock inspect kept walking the pickle bomb")
    assert done.returncode == 2 and f"checkpoint {path} holds more than" in done.stderr, done.stderr


@pytest.mark.parametrize("case", list(BAD_TREES))
def test_resume_refuses_bad_trees_before_the_state_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """fit(ckpt_path=...) with a bomb, deep nesting or a cycle in its trainer state fails with CheckpointError
    naming the file, before TrainerState.from_dict (freeze) walks it, and before any weight changes."""
    ckpt = real_checkpoint(tmp_path / "first")
    ckpt["state"]["listeners"] = {"Evil": {"x": BAD_TREES[case]()}}
    path = framed(tmp_path / "evil.ckpt", ckpt, deep=5000 if case == "deep" else 0)
    real_from_dict = TrainerState.from_dict.__func__  # type: ignore[attr-defined]

    def guarded(cls: type[TrainerState], data: Any) -> TrainerState:
        if "Evil" in dict(data.get("listeners", {})):
            raise AssertionError("the trainer state was rebuilt (walked) before its size was checked")
        return real_from_dict(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(TrainerState, "from_dict", classmethod(guarded))
    torch.manual_seed(1)
    module = TinyModule()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    trainer = Trainer(max_epochs=2, default_root_dir=tmp_path / "second", **only(), accelerator="cpu")
    with pytest.raises(CheckpointError) as info:
        trainer.fit(module, loader(), ckpt_path=path)
    assert f"checkpoint {path}" in str(info.value) and BAD_MESSAGES[case] in str(info.value)
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())


def test_what_interlock_saves_it_can_load() -> None:
    """A save is checked against the load limits: a bomb or over-deep value is refused before anything is written."""
    with tempfile.TemporaryDirectory() as tmp:
        writer = TorchCheckpointIO()
        for value, pattern in ((bomb(60), "pickle bomb"), (nested(150), "MAX_DEPTH")):
            with pytest.raises(CheckpointError, match=pattern):
                writer.save_checkpoint({"x": value}, Path(tmp) / "c.ckpt")
        assert os.listdir(tmp) == []


def test_limits_are_validated() -> None:
    """Limits that are not positive ints, or a depth the walkers after a load could not recurse into, are refused."""
    for kwargs in ({"max_nodes": 0}, {"max_depth": 401}, {"max_depth": 1.5}, {"max_pending": 0}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            TorchCheckpointIO(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- 3. a closed stdout


@posix_only
@pytest.mark.parametrize("tensors", [1, 3000], ids=["short output", "long output"])
def test_inspect_into_a_closed_pipe_exits_141_quietly(tmp_path: Path, tensors: int) -> None:
    """`interlock inspect CKPT | head`: the reader is gone before anything is written; the command stops with
    status 141 and prints no traceback (whether it fails in print or in the final flush)."""
    path = tmp_path / "c.ckpt"
    model = {f"layer{i}.weight": torch.zeros(2, 2) for i in range(tensors)}
    TorchCheckpointIO().save_checkpoint({"format": CHECKPOINT_FORMAT, "state": {}, "state_dict": model}, path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "interlock.cli", "inspect", str(path)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader exits before the command writes (it is still importing torch)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("interlock inspect did not exit")
    assert proc.returncode == STDOUT_CLOSED == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err


def test_main_returns_141_when_stdout_breaks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """In-process: a BrokenPipeError from printing becomes status 141, not an exception."""
    path = tmp_path / "c.ckpt"
    TorchCheckpointIO().save_checkpoint({"format": CHECKPOINT_FORMAT, "state": {}, "state_dict": {}}, path)

    class Closed(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert main(["inspect", str(path)]) == 141


# ---------------------------------------------------------------- 4. bounded backlog, swept leftovers


def temps(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if checkpoint_io._TEMP_NAME.fullmatch(n))


def _slow_file_fsync(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    real = os.fsync

    def fsync(fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            time.sleep(seconds)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("max_pending", [1, 2, 3])
def test_background_saves_never_have_more_than_max_pending_temp_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_pending: int
) -> None:
    """With a slow fsync, many quick saves never leave more than max_pending temporary files at once, and the
    newest save is the one in place at the end."""
    _slow_file_fsync(monkeypatch, 0.15)
    most = 0
    real_open = os.open

    def counting_open(path: Any, flags: int, *args: Any) -> int:
        nonlocal most
        fd = real_open(path, flags, *args)
        if checkpoint_io._TEMP_NAME.fullmatch(os.path.basename(os.fspath(path))):
            most = max(most, len(temps(Path(path).parent)))
        return fd

    monkeypatch.setattr(os, "open", counting_open)
    writer = TorchCheckpointIO(background=True, max_pending=max_pending)
    for step in range(8):
        writer.save_checkpoint({"step": step, "w": torch.full((1000,), float(step))}, tmp_path / "last.ckpt")
    writer.wait()
    monkeypatch.undo()
    assert most == max_pending  # reached, never exceeded
    assert TorchCheckpointIO().load_checkpoint(tmp_path / "last.ckpt")["step"] == 7
    assert os.listdir(tmp_path) == ["last.ckpt"]


def test_a_save_beyond_the_bound_waits_for_the_oldest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With max_pending saves in flight, the next save_checkpoint blocks until the oldest is in place."""
    gate, real = threading.Event(), os.fsync

    def fsync(fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            assert gate.wait(60), "the test never opened the gate"
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    writer = TorchCheckpointIO(background=True, max_pending=2)
    writer.save_checkpoint({"step": 1}, tmp_path / "a.ckpt")
    writer.save_checkpoint({"step": 2}, tmp_path / "b.ckpt")
    third = threading.Thread(target=writer.save_checkpoint, args=({"step": 3}, tmp_path / "c.ckpt"))
    third.start()
    third.join(0.5)
    assert third.is_alive() and len(temps(tmp_path)) == 2
    gate.set()
    third.join(30)
    assert not third.is_alive()
    writer.wait()
    assert sorted(os.listdir(tmp_path)) == ["a.ckpt", "b.ckpt", "c.ckpt"]


HEX = "0123456789abcdef"
temp_names = st.builds(
    lambda name, token: f".{name}.{token}.tmp",
    st.sampled_from(["last.ckpt", "epoch=1-step=20.ckpt", "a.b", "x"]),
    st.text(HEX, min_size=12, max_size=12),
)
near_misses = st.one_of(
    st.builds(lambda t: f".last.ckpt.{t}.tmp", st.text(HEX, min_size=11, max_size=11)),  # 11 digits
    st.builds(lambda t: f".last.ckpt.{t}.tmp", st.text("ABCDEF0123", min_size=12, max_size=12).filter(str.isupper)),
    st.builds(lambda t: f"last.ckpt.{t}.tmp", st.text(HEX, min_size=12, max_size=12)),  # no leading dot
    st.builds(lambda t: f".last.ckpt.{t}.tmp2", st.text(HEX, min_size=12, max_size=12)),
    st.sampled_from(["metrics.csv.tmp", "notes.tmp", "last.ckpt.bak", "..tmp", ".tmp"]),
)
entries = st.lists(
    st.one_of(
        st.tuples(
            temp_names,
            st.sampled_from(["magic", "magic prefix", "zip", "zip prefix", "empty", "not ours", "dir", "link"]),
        ),
        st.tuples(near_misses, st.sampled_from(["magic", "zip", "empty"])),
    ),
    max_size=8,
    unique_by=lambda e: e[0],
)


@posix_only
@settings(max_examples=60, deadline=None)
@given(found=entries)
def test_the_first_save_into_a_directory_removes_only_abandoned_interlock_temp_files(
    found: list[tuple[str, str]],
) -> None:
    """Of whatever lies in the directory, exactly the regular files named like interlock's temporary files whose
    content starts like a checkpoint are removed; everything else is left byte for byte."""
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as elsewhere:
        root = Path(tmp)
        outside = Path(elsewhere) / "target"
        outside.write_bytes(MAGIC + b"{}")
        expected_gone = set()
        for name, content in found:
            path = root / name
            if content == "dir":
                path.mkdir()
            elif content == "link":
                path.symlink_to(outside)
            else:
                data = {
                    "magic": MAGIC + b"x" * 600,  # format version 1 began with MAGIC
                    "magic prefix": MAGIC[:5],
                    "zip": b"PK\x03\x04" + b"x" * 600,  # version 2 begins with the torch.save payload
                    "zip prefix": b"PK",
                    "empty": b"",
                    "not ours": b"hello",
                }
                path.write_bytes(data[content])
                if content != "not ours" and checkpoint_io._TEMP_NAME.fullmatch(name):
                    expected_gone.add(name)
        before = {p.name: (p.is_dir(), p.is_symlink(), p.read_bytes() if p.is_file() else None) for p in root.iterdir()}
        TorchCheckpointIO().save_checkpoint({"step": 1}, root / "last.ckpt")
        after = {p.name: (p.is_dir(), p.is_symlink(), p.read_bytes() if p.is_file() else None) for p in root.iterdir()}
        assert set(before) - set(after) == expected_gone
        assert {k: v for k, v in before.items() if k not in expected_gone} == {
            k: v for k, v in after.items() if k != "last.ckpt"
        }
        assert outside.read_bytes() == MAGIC + b"{}"


WRITER = textwrap.dedent(
    """
    import os, stat, sys, time
    import torch
    from interlock.plugins.checkpoint_io import TorchCheckpointIO

    real = os.fsync

    def stuck(fd):
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            print("in fsync", flush=True)
            time.sleep(3600)
        real(fd)

    os.fsync = stuck
    TorchCheckpointIO().save_checkpoint({"w": torch.ones(1000)}, sys.argv[1])
    """
)


@posix_only
def test_a_killed_writers_temp_file_is_swept_but_a_live_ones_is_not(tmp_path: Path) -> None:
    """A real process stuck in fsync keeps its temporary file through another writer's first save; once it is
    SIGKILLed, the next writer to save into the directory removes the file it left."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path / "last.ckpt")], env=ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "in fsync\n"  # bounded by the pytest timeout if the child dies silently
        left = temps(tmp_path)
        assert len(left) == 1
        TorchCheckpointIO().save_checkpoint({"step": 1}, tmp_path / "other.ckpt")
        assert temps(tmp_path) == left  # its writer is alive
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert temps(tmp_path) == left  # killed mid-save: the temporary file stays behind
    TorchCheckpointIO().save_checkpoint({"step": 2}, tmp_path / "other.ckpt")
    assert temps(tmp_path) == []
    assert sorted(os.listdir(tmp_path)) == ["other.ckpt"]


@posix_only
@pytest.mark.parametrize("flock_works", [True, False], ids=["flock", "no flock between writers of one process"])
def test_a_live_writer_in_this_process_keeps_its_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flock_works: bool
) -> None:
    """A second writer's sweep never removes a temporary file another writer of this process is still filling,
    even where locks do not separate writers of one process (POSIX locks on NFS)."""
    if not flock_works:
        monkeypatch.setattr(checkpoint_io.fcntl, "flock", lambda fd, op: None)
    gate, real = threading.Event(), os.fsync

    def fsync(fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode) and threading.current_thread().name.startswith("interlock-ckpt"):
            assert gate.wait(60), "the test never opened the gate"
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    first = TorchCheckpointIO(background=True)
    first.save_checkpoint({"step": 1, "w": torch.ones(100)}, tmp_path / "last.ckpt")
    pending = temps(tmp_path)
    assert len(pending) == 1
    TorchCheckpointIO().save_checkpoint({"step": 2}, tmp_path / "other.ckpt")
    assert temps(tmp_path) == pending
    gate.set()
    first.wait()
    assert TorchCheckpointIO().load_checkpoint(tmp_path / "last.ckpt")["step"] == 1


# ---------------------------------------------------------------- 5. a full disk while logging


def _is_metrics_file(fd: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith("metrics.csv")
    except OSError:
        return False


def disk_full_after(monkeypatch: pytest.MonkeyPatch, room: int) -> None:
    """Writes to metrics.csv* accept ``room`` more bytes in all (a short write at the edge), then raise ENOSPC."""
    real = os.write
    left = room

    def write(fd: int, data: Any) -> int:
        nonlocal left
        if not _is_metrics_file(fd):
            return real(fd, data)
        if left <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real(fd, bytes(memoryview(data)[:left]))
        left -= n
        return n

    monkeypatch.setattr(os, "write", write)


linux_only = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
rows_strategy = st.lists(st.floats(0, 10, allow_nan=False, width=32), min_size=1, max_size=6)


@linux_only
@settings(max_examples=25, deadline=None)
@given(first=rows_strategy, more=rows_strategy, room=st.integers(0, 400), widen=st.booleans())
def test_csv_disk_full_raises_a_clear_error_and_leaves_the_file_as_it_was(
    first: list[float], more: list[float], room: int, widen: bool
) -> None:
    """When the disk fills during a rewrite (a new column) or an append, CSVLogger raises an OutputError (an
    OSError with ENOSPC) naming the file, the cause and the fix; the file holds exactly what it held and no .tmp
    is left. With room enough, the file holds every row."""
    rows = [{"stage": "val", "epoch": i, "global_step": i, "loss": v} for i, v in enumerate(first)]
    wide = {"acc": 1.0} if widen else {}
    extra = [{"stage": "val", "epoch": 9, "global_step": 9, "loss": v, **wide} for v in more]
    with tempfile.TemporaryDirectory() as clean:  # what the file holds when the disk has room
        logger = CSVLogger(save_dir=clean)
        _deliver(
            logger, TrainerState(history=rows + extra, listeners=_deliver(logger, TrainerState(history=rows)).listeners)
        )
        expected = (Path(clean) / "metrics.csv").read_bytes()
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        logger = CSVLogger(save_dir=tmp)
        path = Path(tmp) / "metrics.csv"
        state = _deliver(logger, TrainerState(history=rows))
        before = path.read_bytes()
        needed = len(expected) if widen else len(expected) - len(before)  # a rewrite writes it all
        disk_full_after(mp, room)
        grown = TrainerState(history=rows + extra, listeners=state.listeners)
        if room >= needed:
            _deliver(logger, grown)
            assert path.read_bytes() == expected
        else:
            with pytest.raises(OutputError) as info:
                _deliver(logger, grown)
            assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
            message = str(info.value)
            assert f"no space left on device writing {path}" in message and "CSVLogger(save_dir=...)" in message
            assert path.read_bytes() == before
        assert sorted(os.listdir(tmp)) == ["metrics.csv"]


def _deliver(logger: CSVLogger, state: TrainerState) -> TrainerState:
    from interlock.core.chart import load_chart
    from interlock.core.events import Event, EventBus
    from interlock.core.updates import merge, reduce

    chart = load_chart()
    bus = EventBus(chart.leaves, chart.tags)
    logger.bind_tags(bus.tags)
    for pattern, fn, every, once in logger.subscriptions():
        bus.on(pattern, fn, every=every, once=once, source=logger.key)
    event = Event("fit.train.val.end", "t", "src", 1, state.epoch, state.global_step, 0)
    return reduce(state, merge(bus.send(event, lambda: state)))


@linux_only
def test_disk_full_while_logging_fails_the_run_through_the_chart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fit whose metrics.csv cannot be written fails (status 'failed', through teardown) with the clear
    OutputError, and leaves no metrics.csv.tmp behind."""
    disk_full_after(monkeypatch, 0)
    trainer = Trainer(max_epochs=2, default_root_dir=tmp_path, **only(CSVLogger()), accelerator="cpu")
    with pytest.raises(OutputError, match=r"no space left on device writing .*metrics\.csv; free space"):
        trainer.fit(TinyModule(), loader(), loader())
    assert trainer.state.status == "failed" and trainer.state.chart == "failed"
    assert not list(tmp_path.rglob("*.tmp"))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (every write: ENOSPC)")
def test_a_trace_on_a_full_disk_fails_once_with_the_error_that_says_what_to_do(tmp_path: Path) -> None:
    """The trace's write fails: OutputError naming enable_trace=False, and no bare OSError later (close, exit)."""
    from _together import run_script

    done = run_script(
        tmp_path,
        textwrap.dedent(
            """
            import sys
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            import interlock
            from interlock.core.errors import OutputError
            from interlock.listeners import EventTrace

            class M(interlock.Module):
                def __init__(self):
                    super().__init__()
                    self.net = torch.nn.Linear(2, 1)
                def training_step(self, batch, batch_idx):
                    return self.net(batch[0]).pow(2).mean()
                def configure_optimizers(self):
                    return torch.optim.SGD(self.parameters(), lr=0.1)

            trainer = interlock.Trainer(max_epochs=1, enable_trace=False, enable_checkpointing=False, logger=False,
                                        enable_progress_bar=False, default_root_dir=sys.argv[1],
                                        listeners=[EventTrace(path="/dev/full")])
            try:
                trainer.fit(M(), DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4))
            except OutputError as exc:
                print("raised:", exc)
            """
        ),
    )
    assert done.returncode == 0, done.stderr
    assert "raised: could not write the event trace /dev/full" in done.stdout and "enable_trace=False" in done.stdout
    assert "OSError" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
