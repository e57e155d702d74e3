"""AsyncVote: when ranks vote, and how the interval follows the step time (collective faked in-process)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.plugins import ddp


class _Done:
    def wait(self) -> None:
        pass


def _votes(monkeypatch: pytest.MonkeyPatch, seconds_per_batch: float, batches: int, **kw: Any) -> list[int]:
    """The batches at which a single rank starts a vote, with a clock advancing ``seconds_per_batch`` a batch."""
    started: list[int] = []
    clock = {"now": 0.0}
    monkeypatch.setattr(ddp.time, "perf_counter", lambda: clock["now"])
    monkeypatch.setattr(ddp.dist, "all_reduce", lambda flags, op, async_op: (started.append(batch), _Done())[1])
    vote = ddp.AsyncVote(torch.device("cpu"), **kw)
    for batch in range(1, batches + 1):
        clock["now"] = batch * seconds_per_batch
        vote(batch, False, False)
    return started


def test_fast_steps_vote_rarely_and_slow_steps_every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first vote is `every` batches in; then about `latency` seconds of batches, within [1, max_every]."""
    assert _votes(monkeypatch, 0.001, 1000) == [9, 17, 273, 529, 785]  # 2 ms/batch: capped at 256
    assert _votes(monkeypatch, 0.1, 40) == [9, 17, 22, 27, 32, 37]  # 100 ms/batch, latency 0.5 s: every 5
    assert _votes(monkeypatch, 2.0, 22) == [9, 17, 18, 19, 20, 21, 22]  # 2 s/batch: every batch


@settings(max_examples=50, deadline=None)
@given(per_batch_us=st.integers(0, 10**9))
def test_interval_is_within_bounds(per_batch_us: int) -> None:
    """Every measured batch time gives an interval in [1, max_every]; an unmeasured one gives `every`."""
    vote = ddp.AsyncVote(torch.device("cpu"), every=8, latency=0.5, max_every=256)
    interval = vote.interval(per_batch_us)
    assert 1 <= interval <= 256
    assert interval == 8 if per_batch_us == 0 else interval == max(1, min(256, 500_000 // per_batch_us))


def test_a_request_is_seen_one_batch_after_the_vote_that_carries_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop raised at batch 2 travels in the vote of batch 5 and is agreed at batch 6, not before."""
    monkeypatch.setattr(ddp.dist, "all_reduce", lambda flags, op, async_op: _Done())
    vote = ddp.AsyncVote(torch.device("cpu"), every=4)
    results = [vote(batch, batch >= 2, False) for batch in range(1, 7)]
    assert results == [(False, False)] * 5 + [(True, False)]


@pytest.mark.parametrize("kw", [{"every": 0}, {"every": 9, "max_every": 8}, {"latency": 0.0}])
def test_bad_settings_are_refused(kw: dict[str, Any]) -> None:
    """Settings that cannot give an interval raise, naming the values."""
    with pytest.raises(ValueError, match="need 1 <= every <= max_every"):
        ddp.AsyncVote(torch.device("cpu"), **kw)
