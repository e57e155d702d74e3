"""Tests for the checkpoint file format and atomic writer."""

from __future__ import annotations

import collections
import datetime
import hashlib
import io
import json
import math
import os
import pickle
import shlex
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.core.errors import CheckpointError
from interlock.plugins.checkpoint_io import (
    FORMAT_VERSION,
    MAGIC,
    TRAILER_BYTES,
    TorchCheckpointIO,
    check_serializable,
    frame,
)

IO = TorchCheckpointIO()
SAMPLE = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "step": 7, "listeners": {"x": [1, 2, 3]}}


# ---------------------------------------------------------------- helpers


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for directories)."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def header_for(payload: bytes, **overrides: Any) -> dict[str, Any]:
    """A header for ``payload`` with a matching hash and length unless overridden."""
    return {
        "format": "interlock-checkpoint",
        "version": FORMAT_VERSION,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "payload_bytes": len(payload),
        "created": "2024-01-01T00:00:00.000+00:00",
        **overrides,
    }


def raw_file(path: Path, payload: bytes, **overrides: Any) -> Path:
    """Write a file in the interlock layout around an arbitrary payload, with a matching hash by default."""
    path.write_bytes(frame(payload, header_for(payload, **overrides)))
    return path


def version_1_file(path: Path, payload: bytes, **overrides: Any) -> Path:
    """Write a file in format version 1's layout: MAGIC and the header line first, then the payload."""
    header = header_for(payload, **{"version": 1, **overrides})
    path.write_bytes(MAGIC + json.dumps(header).encode() + b"\n" + payload)
    return path


def torch_bytes(obj: Any, **kwargs: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, **kwargs)
    return buf.getvalue()


def same(a: Any, b: Any) -> bool:
    """Deep equality that also checks types, tensor dtypes and treats NaN as equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(0, 3), max_size=3))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
    if dtype.is_floating_point or dtype.is_complex:
        t = (torch.randn(shape, generator=gen) * 50).to(dtype)
    elif dtype is torch.bool:
        t = torch.randint(0, 2, shape, generator=gen).bool()
    else:
        low = 0 if dtype is torch.uint8 else -100
        t = torch.randint(low, 100, shape, generator=gen).to(dtype)
    if t.dim() == 2 and draw(st.booleans()):
        t = t.t()  # a non-contiguous view
    return t


leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=10),
    st.binary(min_size=1, max_size=10),
    tensors(),
)
keys = st.one_of(st.text(max_size=8), st.integers(-5, 5))
trees = st.recursive(
    leaves,
    lambda c: st.lists(c, max_size=4) | st.tuples(c, c) | st.dictionaries(keys, c, max_size=4),
    max_leaves=20,
)
checkpoints = st.dictionaries(st.text(max_size=8), trees, max_size=5)


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ckpt")


@pytest.fixture(scope="module")
def saved(shared_dir: Path) -> Path:
    path = shared_dir / "saved.ckpt"
    IO.save_checkpoint(SAMPLE, path)
    return path


# ---------------------------------------------------------------- round trip and layout


@settings(max_examples=60, deadline=None)
@given(ckpt=checkpoints)
def test_round_trip_preserves_nested_plain_data_and_tensors(shared_dir: Path, ckpt: dict[str, Any]) -> None:
    """Any nested dict/list/tuple of scalars and tensors loads back equal, with types and dtypes intact."""
    path = shared_dir / "roundtrip" / "ckpt.pt"
    IO.save_checkpoint(ckpt, path)
    assert same(IO.load_checkpoint(path), ckpt)
    assert os.listdir(path.parent) == ["ckpt.pt"]


def test_round_trip_of_torch_metadata_types(tmp_path: Path) -> None:
    """OrderedDict, Parameter, dtype, Size, device and a tensor view survive a round trip."""
    base = torch.arange(10.0)
    ckpt = {
        "sd": collections.OrderedDict(w=torch.nn.Parameter(torch.ones(2))),
        "dtype": torch.bfloat16,
        "size": torch.Size([2, 3]),
        "device": torch.device("cpu"),
        "view": base[2:5],
        "set": {1, 2},
    }
    IO.save_checkpoint(ckpt, tmp_path / "c")
    out = IO.load_checkpoint(tmp_path / "c")
    assert type(out["sd"]) is collections.OrderedDict
    assert type(out["sd"]["w"]) is torch.nn.Parameter
    assert (out["dtype"], out["size"], out["device"], out["set"]) == (
        torch.bfloat16,
        torch.Size([2, 3]),
        ckpt["device"],
        {1, 2},
    )
    assert torch.equal(out["view"], torch.tensor([2.0, 3.0, 4.0]))


def test_file_layout_is_torch_payload_then_magic_and_header_line(saved: Path) -> None:
    """The file is a plain torch.save payload, then MAGIC and a padded JSON header line with version/hash/length."""
    data = saved.read_bytes()
    payload, trailer = data[:-TRAILER_BYTES], data[-TRAILER_BYTES:]
    assert trailer.startswith(MAGIC) and trailer.endswith(b"\n")
    header = json.loads(trailer[len(MAGIC) :])
    assert header["version"] == FORMAT_VERSION
    assert header["format"] == "interlock-checkpoint"
    assert header["payload_bytes"] == len(payload)
    assert header["sha256"] == hashlib.sha256(payload).hexdigest()
    assert torch.load(io.BytesIO(payload), weights_only=True)["step"] == 7
    assert same(torch.load(saved, weights_only=True), SAMPLE)  # torch reads the file as it is


def test_version_1_files_still_load(tmp_path: Path) -> None:
    """A file in the earlier layout (header first) loads, and its header reads, as before."""
    path = version_1_file(tmp_path / "old.ckpt", torch_bytes(SAMPLE))
    assert same(IO.load_checkpoint(path), SAMPLE)
    assert IO.read_header(path)["version"] == 1
    with pytest.raises(CheckpointError, match="altered or corrupted"):
        IO.load_checkpoint(version_1_file(tmp_path / "bad.ckpt", torch_bytes(SAMPLE), sha256="0" * 64))
    with pytest.raises(CheckpointError, match="does not match where its header is"):
        IO.load_checkpoint(version_1_file(tmp_path / "mixed.ckpt", torch_bytes(SAMPLE), version=2))


@pytest.mark.parametrize("mmap_works", [True, False])
def test_large_checkpoint_hash_matches_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mmap_works: bool) -> None:
    """A multi-megabyte mix of large and tiny tensors gets the exact SHA-256 of its payload, with or without mmap."""
    if not mmap_works:
        import mmap

        def no_mmap(*args: Any, **kwargs: Any) -> None:
            raise OSError(19, "No such device")

        monkeypatch.setattr(mmap, "mmap", no_mmap)
    gen = torch.Generator().manual_seed(0)
    ckpt = {
        "big": [torch.randn(1_000_003, generator=gen) for _ in range(3)],
        "tiny": [torch.ones(k) for k in range(300)],
    }
    path = tmp_path / "big.ckpt"
    IO.save_checkpoint(ckpt, path)
    payload = path.read_bytes()[:-TRAILER_BYTES]
    assert IO.read_header(path)["sha256"] == hashlib.sha256(payload).hexdigest()
    assert same(IO.load_checkpoint(path), ckpt)


def test_save_creates_parent_directories_and_overwrites(tmp_path: Path) -> None:
    """Saving creates missing parent dirs, replaces an existing checkpoint and leaves no temp files."""
    path = tmp_path / "a" / "b" / "last.ckpt"
    IO.save_checkpoint({"step": 1}, path)
    IO.save_checkpoint({"step": 2}, path)
    assert IO.load_checkpoint(path) == {"step": 2}
    assert os.listdir(path.parent) == ["last.ckpt"]


def test_read_header_does_not_unpickle(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """read_header returns version, hash, length and creation time without calling torch.load."""

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("torch.load was called")

    monkeypatch.setattr(torch, "load", forbidden)
    header = IO.read_header(saved)
    payload = saved.read_bytes()[:-TRAILER_BYTES]
    assert header["version"] == FORMAT_VERSION
    assert header["sha256"] == hashlib.sha256(payload).hexdigest()
    assert header["payload_bytes"] == len(payload)
    assert datetime.datetime.fromisoformat(header["created"]).tzinfo is not None


# ---------------------------------------------------------------- bad input on load


def _plain_torch(p: Path) -> Path:
    torch.save({"a": 1}, p)
    return p


def _legacy_torch(p: Path) -> Path:
    torch.save({"a": 1}, p, _use_new_zipfile_serialization=False)
    return p


def _write(data: bytes) -> Any:
    return lambda p: (p.write_bytes(data), p)[1]


BAD_FILES = {
    "missing": (lambda p: p, r"no checkpoint at .*bad"),
    "directory": (lambda p: (p.mkdir(), p)[1], r"bad is a directory"),
    "empty": (_write(b""), r"bad is an empty file"),
    "cut in magic": (_write(MAGIC[:5]), r"bad is truncated"),
    "cut in header": (_write(MAGIC + b'{"format": "interl'), r"bad is truncated inside its header"),
    "cut in payload": (
        _write(torch_bytes({"a": 1})[:-30]),
        r"bad is truncated: .*ends before the trailer",
    ),
    "cut in trailer": (
        lambda p: _write(raw_file(p, torch_bytes({})).read_bytes()[:-3])(p),
        r"truncated inside its trailer",
    ),
    "plain torch.save": (_plain_torch, r"not an interlock checkpoint \(it looks like a plain torch.save file"),
    "legacy torch.save": (_legacy_torch, r"not an interlock checkpoint \(it looks like a raw pickle"),
    "text": (_write(b"hello, this is text\n"), r"not an interlock checkpoint \(it looks like a text file"),
    "header not json": (_write(MAGIC + b"{nope\n" + b"x"), r"header that is not valid JSON"),
    "newer version": (
        lambda p: raw_file(p, torch_bytes({}), version=FORMAT_VERSION + 1),
        rf"written by a newer interlock \(format {FORMAT_VERSION + 1} > {FORMAT_VERSION}\); upgrade interlock",
    ),
    "truncated payload": (
        lambda p: raw_file(p, torch_bytes({}), payload_bytes=len(torch_bytes({})) + 10),
        r"bad is truncated: its payload has",
    ),
    "hash mismatch": (lambda p: raw_file(p, torch_bytes({}), sha256="0" * 64), r"altered or corrupted"),
    "trailing bytes": (lambda p: _write(raw_file(p, torch_bytes({})).read_bytes() + b"!")(p), r"1 bytes after its"),
    "garbage payload": (lambda p: raw_file(p, b"garbage" * 10), r"bad"),
    "not a dict": (lambda p: raw_file(p, torch_bytes([1, 2])), r"holds a list, not a dict"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_files_give_clear_error_and_stay_untouched(tmp_path: Path, case: str) -> None:
    """Each kind of bad file raises a CheckpointError naming the file, and nothing on disk changes."""
    make, pattern = BAD_FILES[case]
    path = make(tmp_path / "bad")
    before = snapshot(tmp_path)
    with pytest.raises(CheckpointError, match=pattern) as info:
        IO.load_checkpoint(path)
    assert str(path) in str(info.value)
    assert "Traceback" not in str(info.value)
    assert snapshot(tmp_path) == before


class _Evil:
    """Pickles to a call of os.system that would create a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


@pytest.mark.parametrize("kind", ["raw pickle", "torch zip"])
def test_malicious_payload_with_valid_hash_is_refused_without_executing(tmp_path: Path, kind: str) -> None:
    """A payload whose pickle would run os.system is refused as not plain data, and never runs."""
    control, marker = tmp_path / "control", tmp_path / "pwned"
    if kind == "raw pickle":
        payload = pickle.dumps(_Evil(marker), protocol=2)
        pickle.loads(pickle.dumps(_Evil(control), protocol=2))
    else:
        payload = torch_bytes({"x": _Evil(marker)})
        torch.load(io.BytesIO(torch_bytes({"x": _Evil(control)})), weights_only=False)
    assert control.exists(), "the payload is not actually live; the test would prove nothing"
    path = raw_file(tmp_path / "evil.ckpt", payload)
    with pytest.raises(CheckpointError, match="not plain data") as info:
        IO.load_checkpoint(path)
    assert "nothing in it was executed" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert not marker.exists()


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_truncation_anywhere_is_detected(saved: Path, shared_dir: Path, data: st.DataObject) -> None:
    """A checkpoint cut at any offset is rejected with CheckpointError by both load and read_header."""
    full = saved.read_bytes()
    cut = data.draw(st.integers(0, len(full) - 1), label="cut")
    path = shared_dir / "truncated.ckpt"
    path.write_bytes(full[:cut])
    with pytest.raises(CheckpointError):
        IO.load_checkpoint(path)
    with pytest.raises(CheckpointError):
        IO.read_header(path)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_any_flipped_payload_byte_is_detected(saved: Path, shared_dir: Path, data: st.DataObject) -> None:
    """Changing any byte of the payload is reported as altered or corrupted."""
    full = bytearray(saved.read_bytes())
    pos = data.draw(st.integers(0, len(full) - TRAILER_BYTES - 1), label="pos")
    full[pos] ^= data.draw(st.integers(1, 255), label="xor")
    path = shared_dir / "flipped.ckpt"
    path.write_bytes(bytes(full))
    with pytest.raises(CheckpointError, match="altered or corrupted"):
        IO.load_checkpoint(path)


# ---------------------------------------------------------------- failed saves


def test_unserializable_value_never_touches_disk(tmp_path: Path) -> None:
    """A bad value raises naming its key path; the old file is byte-identical and no files appear."""
    path = tmp_path / "last.ckpt"
    IO.save_checkpoint(SAMPLE, path)
    before = snapshot(tmp_path)
    bad = {"listeners": {"x": [1, 2, object()]}}
    with pytest.raises(CheckpointError, match=r"checkpoint\['listeners'\]\['x'\]\[2\] is a builtins.object"):
        IO.save_checkpoint(bad, path)
    with pytest.raises(CheckpointError):
        IO.save_checkpoint(bad, tmp_path / "new" / "dir" / "c.ckpt")
    assert snapshot(tmp_path) == before


def _fail_on_second_write(monkeypatch: pytest.MonkeyPatch) -> None:
    real, calls = os.write, []

    def write(fd: int, data: Any) -> int:
        calls.append(fd)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def _raise(exc: BaseException) -> Any:
    def fail(*args: Any, **kwargs: Any) -> None:
        raise exc

    return fail


FAILURES = {
    "replace": (lambda mp: mp.setattr(os, "replace", _raise(OSError(28, "No space left on device"))), "No space"),
    "fsync": (lambda mp: mp.setattr(os, "fsync", _raise(OSError(5, "Input/output error"))), "Input/output error"),
    "disk full mid-payload": (_fail_on_second_write, "No space left on device"),
    "torch.save error": (lambda mp: mp.setattr(torch, "save", _raise(RuntimeError("boom"))), "cannot serialize.*boom"),
}


@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
@pytest.mark.parametrize("failing", list(FAILURES))
def test_failure_during_save_keeps_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str, background: bool
) -> None:
    """Any failure while writing raises CheckpointError naming the cause (in the background: from wait()); the
    old file is intact, the temp gone."""
    writer = TorchCheckpointIO(background=background)
    path = tmp_path / "last.ckpt"
    writer.save_checkpoint(SAMPLE, path)
    writer.wait()
    before = snapshot(tmp_path)
    patch, pattern = FAILURES[failing]
    patch(monkeypatch)
    with pytest.raises(CheckpointError, match=pattern) as info:
        writer.save_checkpoint({"step": 99, "w": torch.ones(100_000)}, path)
        writer.wait()
    assert str(path) in str(info.value)
    monkeypatch.undo()
    assert snapshot(tmp_path) == before


def test_killed_writer_never_leaves_a_half_file_at_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The target only changes by rename: a writer killed just before it keeps the old content."""
    path = tmp_path / "last.ckpt"
    IO.save_checkpoint(SAMPLE, path)
    old = path.read_bytes()
    seen: dict[str, Any] = {}

    class Killed(BaseException):
        pass

    def killed_replace(src: Any, dst: Any) -> None:
        seen["dst"] = Path(dst)
        seen["tmp_parent"] = Path(src).parent
        seen["tmp_content"] = IO.load_checkpoint(src)  # the temp is already complete and valid
        raise Killed

    monkeypatch.setattr(os, "replace", killed_replace)
    with pytest.raises(Killed):
        IO.save_checkpoint({"step": 99}, path)
    monkeypatch.undo()
    assert seen["dst"] == path and seen["tmp_parent"] == tmp_path
    assert seen["tmp_content"] == {"step": 99}
    assert path.read_bytes() == old
    assert os.listdir(tmp_path) == ["last.ckpt"]


# ---------------------------------------------------------------- background saves


def _gate_fsync(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """From now on, file fsyncs block until the returned event is set (directory fsyncs pass)."""
    gate, real = threading.Event(), os.fsync

    def fsync(fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            assert gate.wait(30), "the test never opened the gate"
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return gate


def test_background_save_returns_before_the_file_is_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """save_checkpoint returns while the fsync is pending; the target keeps its old bytes until the new file is
    durable, and two saves to one path land in the order they were made."""
    writer = TorchCheckpointIO(background=True)
    path = tmp_path / "last.ckpt"
    IO.save_checkpoint({"step": 1}, path)
    old = path.read_bytes()
    gate = _gate_fsync(monkeypatch)
    writer.save_checkpoint({"step": 2}, path)
    writer.save_checkpoint({"step": 3, "w": torch.ones(10)}, path)
    assert path.read_bytes() == old
    gate.set()
    writer.wait()
    assert IO.load_checkpoint(path)["step"] == 3
    assert os.listdir(tmp_path) == ["last.ckpt"]


def test_replaced_file_is_removed_only_after_its_replacement_is_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """remove_checkpoint(old, replaced_by=new) waits behind new's pending save: old exists until new does."""
    writer = TorchCheckpointIO(background=True)
    old, new = tmp_path / "epoch=0.ckpt", tmp_path / "epoch=1.ckpt"
    IO.save_checkpoint({"epoch": 0}, old)
    gate = _gate_fsync(monkeypatch)
    writer.save_checkpoint({"epoch": 1}, new)
    writer.remove_checkpoint(old, replaced_by=new)
    assert old.exists() and not new.exists()
    gate.set()
    writer.wait()
    assert not old.exists() and writer.load_checkpoint(new) == {"epoch": 1}


def test_failed_background_save_keeps_the_file_it_replaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the replacement cannot be put in place, the old file stays, no temp remains, and wait() names the file."""
    writer = TorchCheckpointIO(background=True)
    old, new = tmp_path / "epoch=0.ckpt", tmp_path / "epoch=1.ckpt"
    IO.save_checkpoint({"epoch": 0}, old)
    monkeypatch.setattr(os, "replace", _raise(OSError(28, "No space left on device")))
    writer.save_checkpoint({"epoch": 1}, new)
    writer.remove_checkpoint(old, replaced_by=new)
    with pytest.raises(CheckpointError, match=r"cannot write checkpoint .*epoch=1\.ckpt: No space left"):
        writer.wait()
    assert os.listdir(tmp_path) == ["epoch=0.ckpt"]
    writer.wait()  # the error is reported once


def test_a_failed_background_save_is_raised_by_the_next_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error from the worker is not lost: once that save has finished, the next save raises it."""
    writer = TorchCheckpointIO(background=True)
    monkeypatch.setattr(os, "replace", _raise(OSError(5, "Input/output error")))
    writer.save_checkpoint({"step": 1}, tmp_path / "a.ckpt")
    done = threading.Event()
    writer._pool().submit(done.set)  # queued behind the failing save
    assert done.wait(30)
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match=r"a\.ckpt: Input/output error"):
        writer.save_checkpoint({"step": 2}, tmp_path / "b.ckpt")
    assert os.listdir(tmp_path) == []


def test_a_background_writer_pickles_after_its_saves_are_in_place(tmp_path: Path) -> None:
    """Pickling waits for pending saves and carries only the mode; the copy reads what the original wrote."""
    writer = TorchCheckpointIO(background=True)
    writer.save_checkpoint(SAMPLE, tmp_path / "c.ckpt")
    copy = pickle.loads(pickle.dumps(writer))
    assert copy.background is True
    assert copy.load_checkpoint(tmp_path / "c.ckpt")["step"] == 7


def test_save_rejects_non_dict_and_directory_target(tmp_path: Path) -> None:
    """Saving a non-dict, or onto a directory, fails early with a message naming the problem."""
    with pytest.raises(CheckpointError, match="a checkpoint must be a dict"):
        IO.save_checkpoint([1, 2], tmp_path / "c")  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="it is a directory"):
        IO.save_checkpoint({}, tmp_path)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- check_serializable


class _MyTensor(torch.Tensor):
    pass


@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        ({"a": [1, (2, lambda: 0)]}, r"checkpoint\['a'\]\[1\]\[1\] is a builtins.function"),
        ({"t": torch.ones(2).as_subclass(_MyTensor)}, r"checkpoint\['t'\] is a .*_MyTensor.*as_subclass"),
        ({"p": Path("x")}, r"checkpoint\['p'\] .*str\(value\)"),
        ({"m": torch.nn.Linear(1, 1)}, r"checkpoint\['m'\] .*state_dict\(\)"),
        ({object(): 1}, r"checkpoint has a key .* use str or int keys"),
        ({"d": collections.defaultdict(list)}, r"checkpoint\['d'\] is a collections.defaultdict.*plain dict"),
        ({"b": [b""]}, r"checkpoint\['b'\]\[0\] is b''"),
    ],
)
def test_check_serializable_names_first_bad_value(value: Any, pattern: str) -> None:
    """Values weights_only loading would refuse are reported with their key path and a fix."""
    with pytest.raises(CheckpointError, match=pattern):
        check_serializable(value)


def test_check_serializable_reports_cycles_and_accepts_shared_values() -> None:
    """A container that contains itself is refused; the same tensor used twice is fine."""
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(CheckpointError, match=r"state\[1\] contains itself"):
        check_serializable(loop, where="state")
    shared = torch.ones(2)
    check_serializable({"a": shared, "b": [shared], "c": (shared,)})


# ---------------------------------------------------------------- remove


def test_remove_checkpoint_deletes_only_checkpoints(tmp_path: Path) -> None:
    """remove deletes a checkpoint, ignores a missing one, and refuses to delete other files."""
    path = tmp_path / "c.ckpt"
    IO.save_checkpoint({"a": 1}, path)
    IO.remove_checkpoint(path)
    assert not path.exists()
    IO.remove_checkpoint(path)
    other = _plain_torch(tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match=r"refusing to remove .*model.pt.*plain torch.save"):
        IO.remove_checkpoint(other)
    assert other.exists()


def test_remove_checkpoint_replaces_a_damaged_checkpoint_of_ours(tmp_path: Path) -> None:
    """A checkpoint of ours whose payload or header is damaged is still ours by its marker: it can be removed."""
    for name, damaged in (
        ("no-time.ckpt", lambda p: raw_file(p, torch_bytes({"a": 1}), created=None)),
        ("old.ckpt", lambda p: version_1_file(p, b"garbage", payload_bytes=99)),
    ):
        path = damaged(tmp_path / name)
        with pytest.raises(CheckpointError):
            IO.load_checkpoint(path)
        IO.remove_checkpoint(path)
        assert not path.exists()
