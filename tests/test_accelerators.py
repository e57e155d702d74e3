"""Accelerators: device flags, selection, transfer, memory and dtype support (GPUs mocked)."""

from __future__ import annotations

import contextlib
from collections import OrderedDict, defaultdict, namedtuple
from collections.abc import Iterator
from unittest import mock

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from interlock.accelerators import (
    ACCELERATOR_FLAGS,
    ACCELERATORS,
    Accelerator,
    CPUAccelerator,
    CUDAAccelerator,
    MPSAccelerator,
    select_accelerator,
)

Batch = namedtuple("Batch", ["x", "y"])


@contextlib.contextmanager
def fake_hardware(cuda: int = 0, mps: bool = False) -> Iterator[None]:
    """Pretend ``cuda`` CUDA devices and (optionally) an MPS device exist."""
    with (
        mock.patch.object(torch.cuda, "is_available", lambda: cuda > 0),
        mock.patch.object(torch.cuda, "device_count", lambda: cuda),
        mock.patch.object(torch.backends.mps, "is_available", lambda: mps),
    ):
        yield


# --- device flags -------------------------------------------------------------------------------------------------


@given(st.integers(1, 8), st.data())
def test_cuda_counts_select_the_first_n_devices(total, data):
    """devices=N and devices='N' select indices 0..N-1 when N devices exist."""
    n = data.draw(st.integers(1, total))
    with fake_hardware(cuda=total):
        acc = CUDAAccelerator()
        assert acc.parse_devices(n) == list(range(n))
        assert acc.parse_devices(str(n)) == list(range(n))
        assert acc.parse_devices(f" {n} ") == list(range(n))


@given(st.integers(1, 8))
def test_cuda_all_devices_spellings(total):
    """-1, '-1' and 'auto' select every visible CUDA device."""
    with fake_hardware(cuda=total):
        acc = CUDAAccelerator()
        for flag in (-1, "-1", "auto", "AUTO"):
            assert acc.parse_devices(flag) == list(range(total))


@given(st.integers(1, 8).flatmap(lambda n: st.tuples(st.just(n), st.permutations(range(n)), st.integers(1, n))))
def test_cuda_index_lists_round_trip(args):
    """Distinct in-range indices come back as given, from a list or a comma string ('1,' is index 1)."""
    total, order, k = args
    indices = list(order[:k])
    with fake_hardware(cuda=total):
        acc = CUDAAccelerator()
        assert acc.parse_devices(indices) == indices
        assert acc.parse_devices(tuple(indices)) == indices
        if len(indices) > 1:  # a lone number without a comma is a count
            assert acc.parse_devices(",".join(map(str, indices))) == indices
        assert acc.parse_devices(", ".join(map(str, indices)) + ",") == indices


@given(st.integers(max_value=-2))
def test_negative_counts_other_than_minus_one_are_refused(n):
    """devices=-2 and below are errors naming the flag."""
    with fake_hardware(cuda=2), pytest.raises(ValueError, match=rf"devices={n}\b.*at least 1"):
        CUDAAccelerator().parse_devices(n)


@given(st.integers(1, 4), st.integers(1, 10))
def test_asking_for_more_cuda_devices_than_exist_is_refused(total, extra):
    """devices=N beyond the device count raises and says how many exist."""
    with fake_hardware(cuda=total), pytest.raises(ValueError, match=f"only {total} are available"):
        CUDAAccelerator().parse_devices(total + extra)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (0, "at least 1"),
        ("0", "at least 1"),
        ([0, 0], "repeats index 0"),
        ("1,1", "repeats index 1"),
        ([2], "has index 2, but only 2 cuda devices exist"),
        ([], "selects no device"),
        ([-1, 0], "negative index"),
        ("two", "not an integer"),
        ("0,x", "not an integer"),
        ("", "not an integer"),
        (True, "not a device count"),
        (1.5, "not a count"),
        ([0.5], "not a device index"),
        (None, "not a count"),
    ],
)
def test_bad_cuda_device_flags_raise_clear_errors(flag, message):
    """Each malformed devices flag raises a ValueError naming the flag, the problem and the accelerator."""
    with fake_hardware(cuda=2), pytest.raises(ValueError, match=message) as info:
        CUDAAccelerator().parse_devices(flag)
    assert f"devices={flag!r}" in str(info.value)
    assert "accelerator='cuda'" in str(info.value)


def test_cuda_without_devices_refuses_every_request():
    """With no CUDA device, neither a count nor 'all' can be satisfied."""
    with fake_hardware(cuda=0):
        acc = CUDAAccelerator()
        for flag in (1, -1, "auto", [0]):
            with pytest.raises(ValueError, match="devices="):
                acc.parse_devices(flag)


@given(st.integers(1, 512))
def test_cpu_accepts_any_positive_process_count(n):
    """On CPU devices=N means N processes, for any positive N."""
    assert CPUAccelerator().parse_devices(n) == list(range(n))
    assert CPUAccelerator().parse_devices(str(n)) == list(range(n))


def test_cpu_auto_and_all_mean_one_process():
    """'auto' and -1 on CPU select a single process."""
    for flag in ("auto", -1, "-1"):
        assert CPUAccelerator().parse_devices(flag) == [0]


def test_cpu_still_refuses_zero_and_duplicates():
    """CPU applies the same shape checks as GPUs."""
    for flag in (0, -3, [1, 1]):
        with pytest.raises(ValueError, match="devices="):
            CPUAccelerator().parse_devices(flag)


def test_mps_has_one_device_when_available():
    """MPS exposes exactly one device, none when unavailable."""
    with fake_hardware(mps=True):
        acc = MPSAccelerator()
        assert acc.device_count() == 1
        assert acc.parse_devices("auto") == [0]
        with pytest.raises(ValueError, match="only 1 are available"):
            acc.parse_devices(2)
    with fake_hardware(mps=False):
        assert MPSAccelerator.device_count() == 0
        assert not MPSAccelerator.is_available()


# --- selection ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cuda", "mps", "expected"),
    [(2, True, CUDAAccelerator), (0, True, MPSAccelerator), (0, False, CPUAccelerator), (1, False, CUDAAccelerator)],
)
def test_auto_prefers_cuda_then_mps_then_cpu(cuda, mps, expected):
    """accelerator='auto' picks the best available hardware."""
    with fake_hardware(cuda=cuda, mps=mps):
        assert type(select_accelerator("auto")) is expected


@pytest.mark.parametrize(("cuda", "mps", "expected"), [(1, True, CUDAAccelerator), (0, True, MPSAccelerator)])
def test_gpu_alias_resolves_to_cuda_or_mps(cuda, mps, expected):
    """accelerator='gpu' means CUDA if present, else MPS."""
    with fake_hardware(cuda=cuda, mps=mps):
        assert type(select_accelerator("gpu")) is expected


def test_gpu_without_a_gpu_is_an_error():
    """accelerator='gpu' on a CPU-only machine raises and suggests 'cpu' or 'auto'."""
    with fake_hardware(), pytest.raises(ValueError, match=r"accelerator='gpu'.*use accelerator='cpu' or 'auto'"):
        select_accelerator("gpu")


@pytest.mark.parametrize("flag", ["cuda", "mps"])
def test_named_but_unavailable_accelerators_are_errors(flag):
    """Asking for missing hardware by name raises instead of falling back."""
    with fake_hardware(), pytest.raises(ValueError, match=f"accelerator='{flag}' was requested"):
        select_accelerator(flag)


def test_named_accelerators_resolve_case_insensitively():
    """' CPU ' and 'Cuda' resolve to their accelerators."""
    with fake_hardware(cuda=1):
        assert isinstance(select_accelerator(" CPU "), CPUAccelerator)
        assert isinstance(select_accelerator("Cuda"), CUDAAccelerator)


@given(st.text())
def test_unknown_accelerator_flags_list_the_choices(flag):
    """Any other string raises a ValueError listing every accepted flag."""
    if flag.strip().lower() in ACCELERATOR_FLAGS:
        return
    with fake_hardware(), pytest.raises(ValueError, match=r"not supported; choose one of 'auto', 'cpu', 'cuda'"):
        select_accelerator(flag)


def test_instances_and_classes_pass_through():
    """An Accelerator instance is used as is; a class is instantiated."""
    acc = CPUAccelerator()
    assert select_accelerator(acc) is acc
    assert isinstance(select_accelerator(CPUAccelerator), CPUAccelerator)
    with pytest.raises(ValueError, match="accelerator=3"):
        select_accelerator(3)


def test_registry_holds_the_three_accelerators():
    """ACCELERATORS maps each name to its class."""
    expected = {"cpu": CPUAccelerator, "cuda": CUDAAccelerator, "mps": MPSAccelerator}
    assert expected == ACCELERATORS
    assert all(issubclass(cls, Accelerator) and cls.name == name for name, cls in ACCELERATORS.items())


# --- devices, transfer, sync, memory --------------------------------------------------------------------------------


def test_device_objects():
    """CPU returns 'cpu' for any index, CUDA 'cuda:i'; negative indices are refused."""
    assert CPUAccelerator().device(3) == torch.device("cpu")
    assert CUDAAccelerator().device(1) == torch.device("cuda", 1)
    assert MPSAccelerator().device(0).type == "mps"
    with pytest.raises(ValueError, match="index=-1"):
        CUDAAccelerator().device(-1)


def test_cuda_setup_device_sets_the_current_device():
    """setup_device calls torch.cuda.set_device with the device, and rejects other device types."""
    with mock.patch.object(torch.cuda, "set_device") as set_device:
        CUDAAccelerator().setup_device("cuda:1")
    set_device.assert_called_once_with(torch.device("cuda", 1))
    with pytest.raises(ValueError, match="not a cuda device"):
        CUDAAccelerator().setup_device("cpu")
    CPUAccelerator().setup_device("cpu")


def test_move_to_device_recurses_and_keeps_container_types():
    """Tensors in nested containers move; containers keep their types; other objects are untouched."""
    marker = object()
    batch = {
        "b": Batch(torch.ones(1), [torch.zeros(2), "s"]),
        "o": OrderedDict(t=torch.ones(1)),
        "d": defaultdict(int, t=torch.ones(1)),
        "t": (torch.ones(1), marker, 5),
    }
    out = CPUAccelerator().move_to_device(batch, "cpu")
    assert isinstance(out["b"], Batch)
    assert out["b"].y[1] == "s"
    assert isinstance(out["o"], OrderedDict)
    assert isinstance(out["d"], defaultdict) and out["d"].default_factory is int
    assert out["t"][1] is marker and out["t"][2] == 5
    assert out["b"].x.device.type == "cpu"


def test_move_to_cuda_uses_non_blocking_copies():
    """Transfers to CUDA ask for non-blocking copies; to CPU they do not."""
    calls = []

    def fake_to(self, device, non_blocking=False):
        calls.append((torch.device(device).type, non_blocking))
        return self

    with mock.patch.object(torch.Tensor, "to", fake_to):
        CUDAAccelerator().move_to_device([torch.ones(1), {"a": torch.ones(1)}], torch.device("cuda", 0))
        CPUAccelerator().move_to_device(torch.ones(1), "cpu")
    assert calls == [("cuda", True), ("cuda", True), ("cpu", False)]


def test_synchronize_calls_the_backend():
    """CUDA and MPS synchronize through torch; CPU needs nothing."""
    with mock.patch.object(torch.cuda, "synchronize") as sync:
        CUDAAccelerator().synchronize("cuda:0")
    sync.assert_called_once_with(torch.device("cuda", 0))
    with mock.patch.object(torch.mps, "synchronize") as mps_sync:
        MPSAccelerator().synchronize()
    mps_sync.assert_called_once_with()
    CPUAccelerator().synchronize("cpu")


def test_cpu_memory_stats_report_resident_memory():
    """CPU memory stats are non-negative integers with the resident set in allocated_bytes."""
    stats = CPUAccelerator().memory_stats()
    assert all(isinstance(v, int) and v >= 0 for v in stats.values())
    assert stats["allocated_bytes"] > 0
    assert stats.get("peak_bytes", stats["allocated_bytes"]) >= stats["allocated_bytes"]


def test_cuda_and_mps_memory_stats_come_from_torch():
    """GPU memory stats read torch's allocator counters."""
    with (
        mock.patch.object(torch.cuda, "memory_allocated", return_value=10),
        mock.patch.object(torch.cuda, "max_memory_allocated", return_value=30),
        mock.patch.object(torch.cuda, "memory_reserved", return_value=64),
    ):
        assert CUDAAccelerator().memory_stats("cuda:0") == {
            "allocated_bytes": 10,
            "peak_bytes": 30,
            "reserved_bytes": 64,
        }
    with (
        mock.patch.object(torch.mps, "current_allocated_memory", return_value=5),
        mock.patch.object(torch.mps, "driver_allocated_memory", return_value=7),
    ):
        assert MPSAccelerator().memory_stats() == {"allocated_bytes": 5, "driver_allocated_bytes": 7}


def test_dtype_support():
    """CPU computes every float dtype, MPS has no float64, CUDA bf16 follows the GPU."""
    cpu, mps = CPUAccelerator(), MPSAccelerator()
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64, torch.bool):
        assert cpu.supports_dtype(dtype)
    assert not mps.supports_dtype(torch.float64)
    assert mps.supports_dtype(torch.float16) and mps.supports_dtype(torch.int32)
    for supported in (True, False):
        with mock.patch.object(torch.cuda, "is_bf16_supported", return_value=supported):
            assert CUDAAccelerator().supports_dtype(torch.bfloat16) is supported
    assert CUDAAccelerator().supports_dtype(torch.float64)


def test_default_backends():
    """gloo for CPU and MPS, nccl for CUDA."""
    assert CPUAccelerator().default_backend() == "gloo"
    assert MPSAccelerator().default_backend() == "gloo"
    assert CUDAAccelerator().default_backend() == "nccl"


def test_teardown_empties_the_cache_only_when_available():
    """CUDA teardown releases cached memory when CUDA is there, and is harmless otherwise."""
    with fake_hardware(cuda=1), mock.patch.object(torch.cuda, "empty_cache") as empty:
        CUDAAccelerator().teardown()
    empty.assert_called_once_with()
    with fake_hardware(), mock.patch.object(torch.cuda, "empty_cache") as empty:
        CUDAAccelerator().teardown()
        MPSAccelerator().teardown()
        CPUAccelerator().teardown()
    empty.assert_not_called()
