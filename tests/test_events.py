"""Events: patterns, every/once filters, ordered delivery, listeners, laziness."""

from __future__ import annotations

from typing import Any

import blinker
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import interlock
from conftest import TinyModule, loader, only
from interlock import Listener, LogMetrics, Stop, listen
from interlock.core import events as events_module
from interlock.core.events import EventBus, order_listeners

NAMES = ("fit.train.batch.end", "fit.train.batch.fetch", "fit.train.epoch_end", "validate.batch.end")


def test_pattern_is_a_glob_over_event_names() -> None:
    """A glob selects every matching event name; `*` crosses dots."""
    bus = EventBus(NAMES)
    assert bus.match("fit.train.batch.*") == NAMES[:2]
    assert bus.match("*.batch.end") == ("fit.train.batch.end", "validate.batch.end")
    assert bus.match("fit.*") == NAMES[:3]


def test_pattern_matching_nothing_is_an_error() -> None:
    """A pattern with a typo raises, naming the pattern and pointing at the chart."""
    with pytest.raises(ValueError, match=r"'fit.trian.\*' matches no event"):
        EventBus(NAMES).on("fit.trian.*", lambda e: None)


@pytest.mark.parametrize("kwargs", [{"every": 0}, {"every": -2}, {"every": True}, {"once": 0}, {"once": "x"}])
def test_bad_filters_are_rejected(kwargs: dict[str, Any]) -> None:
    """every= and once= must be positive ints (once may be True)."""
    with pytest.raises(ValueError, match="every=|once="):
        EventBus(NAMES).on("fit.*", lambda e: None, **kwargs)


def test_every_and_once_together_is_an_error() -> None:
    """A handler cannot filter with both every= and once=."""
    with pytest.raises(ValueError, match="not both"):
        EventBus(NAMES).on("fit.*", lambda e: None, every=2, once=True)


def _fit(trainer: interlock.Trainer, **kw: Any) -> None:
    trainer.fit(TinyModule(), loader(64, 8), **kw)


@settings(max_examples=15, deadline=None)
@given(every=st.integers(1, 9))
def test_every_n_calls_on_each_nth_occurrence(tmp_path_factory: Any, every: int) -> None:
    """every=N calls the handler on occurrences N, 2N, ... of the event."""
    trainer = interlock.Trainer(max_epochs=2, **only(), default_root_dir=tmp_path_factory.mktemp("r"))
    seen: list[int] = []
    trainer.on("fit.train.batch.end", lambda e: seen.append(e.count), every=every)
    _fit(trainer)
    assert seen == [c for c in range(1, 17) if c % every == 0]


def test_once_calls_only_on_the_chosen_occurrence(trainer_factory: Any) -> None:
    """once=True handles the first occurrence only; once=k the k-th only."""
    trainer = trainer_factory(max_epochs=2)
    first: list[int] = []
    third: list[int] = []
    trainer.on("fit.train.batch.end", lambda e: first.append(e.global_step), once=True)
    trainer.on("fit.train.batch.end", lambda e: third.append(e.global_step), once=3)
    _fit(trainer)
    assert first == [1] and third == [3]


def test_decorator_form_registers_and_returns_the_function(trainer_factory: Any) -> None:
    """`@trainer.on(pattern)` registers the function and leaves it usable."""
    trainer = trainer_factory(max_epochs=1)
    calls: list[str] = []

    @trainer.on("fit.train.epoch_*")
    def handler(event: interlock.Event, state: interlock.TrainerState) -> None:
        calls.append(f"{event.name}@{state.chart}")

    assert callable(handler)
    _fit(trainer)
    assert calls == ["fit.train.epoch_start@fit.train.epoch_start", "fit.train.epoch_end@fit.train.epoch_end"]


def test_delivery_is_in_registration_order_with_listeners_first(trainer_factory: Any) -> None:
    """Handlers of one event run in order: listeners (sorted by `after`), then trainer.on handlers."""
    order: list[str] = []

    class A(Listener):
        after = ("B",)

        @listen("fit.train.epoch_end")
        def mark(self, event: Any) -> None:
            order.append("A")

    class B(Listener):
        @listen("fit.train.epoch_end")
        def mark(self, event: Any) -> None:
            order.append("B")

    trainer = trainer_factory(max_epochs=1, **only(A(), B()))
    trainer.on("fit.train.epoch_end", lambda e: order.append("on1"))
    trainer.on("fit.train.epoch_end", lambda e: order.append("on2"))
    _fit(trainer)
    assert order == ["B", "A", "on1", "on2"]
    [(name, sources)] = trainer.subscribers()
    assert name == "fit.train.epoch_end" and sources[:2] == ["B", "A"]
    assert all(s.endswith("<lambda>") for s in sources[2:])


def test_listener_ordering_errors_are_clear() -> None:
    """Unknown `after` keys, duplicate keys and cycles are rejected with the keys named."""

    class A(Listener):
        after = ("Nope",)

    with pytest.raises(ValueError, match=r"'A' runs after \['Nope'\]"):
        order_listeners([A()])

    class C(Listener):
        pass

    with pytest.raises(ValueError, match="share the state key"):
        order_listeners([C(), C()])

    class X(Listener):
        after = ("Y",)

    class Y(Listener):
        after = ("X",)

    with pytest.raises(ValueError, match="cycle"):
        order_listeners([X(), Y()])


def test_removed_subscription_no_longer_receives(trainer_factory: Any) -> None:
    """Subscription.remove() stops delivery and disconnects the signal when nothing is left."""
    trainer = trainer_factory(max_epochs=1)
    seen: list[str] = []
    sub = trainer.on("fit.train.batch.end", lambda e: seen.append(e.name))
    sub.remove()
    assert not trainer.bus.signals["fit.train.batch.end"].receivers
    _fit(trainer)
    assert seen == []


def test_event_carries_counters_and_payload(trainer_factory: Any) -> None:
    """A batch-end event carries source, trigger, counters and the step outputs."""
    trainer = trainer_factory(max_epochs=1, accumulate_grad_batches=2)
    events: list[interlock.Event] = []
    trainer.on("fit.train.batch.end", events.append)
    _fit(trainer)
    assert [(e.source, e.trigger) for e in events[:2]] == [
        ("fit.train.batch.backward", "accumulate"),
        ("fit.train.batch.optimizer_step", "stepped"),
    ]
    assert [e.global_step for e in events] == [0, 1, 1, 2, 2, 3, 3, 4]
    assert [e.batch_idx for e in events] == list(range(1, 9))
    assert all(float(e.payload["outputs"].detach()) > 0 for e in events)


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the Event objects the runtime constructs from now on."""
    names: list[str] = []
    original = events_module.Event

    class CountingEvent(original):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, **k: Any) -> None:
            names.append(a[0])
            super().__init__(*a, **k)

    from interlock.trainer import runtime

    monkeypatch.setattr(runtime, "Event", CountingEvent)
    return names


def test_unlistened_events_build_no_event_object(trainer_factory: Any, built: list[str]) -> None:
    """With no handler, the runtime constructs no Event and no state snapshot during fit."""
    trainer = trainer_factory(max_epochs=1)
    trainer.on("fit.train.epoch_end", lambda e: None)
    _fit(trainer)
    assert built == ["fit.train.epoch_end"]


def test_observers_see_every_transition_before_handlers_without_events(trainer_factory: Any, built: list[str]) -> None:
    """An observer gets every transition as plain values, in order, before its handlers; no Event is built."""
    trainer = trainer_factory(max_epochs=1)
    seen: list[tuple[Any, ...]] = []
    order: list[str] = []
    trainer.observe(lambda *values: (seen.append(values), order.append("observer")))
    trainer.on("fit.train.epoch_end", lambda e: order.append("handler"))
    _fit(trainer)
    walk, at = [], "idle"
    for dst, trig, src, *_ in seen:  # each transition starts where the previous one ended, as the chart allows
        assert src == at and trainer.statechart.transition(src, trig) == dst
        walk.append(dst)
        at = dst
    assert walk[-1] == "finished" and len(walk) == sum(trainer.state.counts.values())
    assert built == ["fit.train.epoch_end"]
    assert order.count("handler") == 1
    assert order.index("handler") == [v[0] for v in seen].index("fit.train.epoch_end") + 1
    ends = [v for v in seen if v[0] == "fit.train.batch.end"]
    assert [(count, epoch, step, idx) for _, _, _, count, epoch, step, idx in ends] == [
        (i, 0, i, i) for i in range(1, 9)
    ]
    assert trainer.bus.observer_sources() == [
        "test_observers_see_every_transition_before_handlers_without_events.<locals>.<lambda>"
    ]


def test_a_listeners_observe_methods_are_registered_in_listener_order(trainer_factory: Any) -> None:
    """`@observe` methods are registered under the listener's key, in listener order, and are not handlers."""

    class Recorder(Listener):
        def __init__(self, key: str, log: list[str]) -> None:
            self.key, self.log = key, log

        @interlock.observe
        def record(self, name: str, *rest: Any) -> None:
            if name == "fit.train.epoch_end":
                self.log.append(self.key)

    log: list[str] = []
    trainer = trainer_factory(max_epochs=1, **only(Recorder("b", log), Recorder("a", log)))
    assert trainer.bus.observer_sources() == ["b.record", "a.record"]
    assert trainer.subscribers() == []
    _fit(trainer)
    assert log == ["b", "a"]


class _Rows:
    """A recorder keeping every row; asks for flush_due every ``limit`` rows (and by time when ``due`` is set)."""

    def __init__(self, limit: int = 10**9, due: float = float("inf")) -> None:
        self.rows: list[Any] = []
        self.kept: list[Any] = []
        self.due, self.limit = due, limit
        self.calls: list[tuple[str, int]] = []

    def flush_due(self, name: str) -> None:
        self.calls.append((name, len(self.rows)))
        self.kept += self.rows
        self.rows.clear()


def test_a_recorder_gets_every_transition_as_the_observers_see_it_and_is_asked_to_flush(
    trainer_factory: Any, built: list[str]
) -> None:
    """Rows are the observers' values with a time first, in order; flush_due comes at every limit-th row and by time."""
    trainer = trainer_factory(max_epochs=2)
    seen: list[tuple[Any, ...]] = []
    trainer.observe(lambda *values: seen.append(values))
    every = _Rows(limit=7)
    timed = _Rows(due=0.0)  # due at once: asked at every row (it never moves due on)
    trainer.bus.record(every, source="every")
    trainer.bus.record(timed, source="timed")
    _fit(trainer)
    rows = every.kept + every.rows
    assert [r[1:] for r in rows] == seen and len(seen) == sum(trainer.state.counts.values())
    assert all(isinstance(r[0], float) for r in rows) and [r[0] for r in rows] == sorted(r[0] for r in rows)
    assert [n for _, n in every.calls] == [7] * (len(seen) // 7)
    assert [name for name, _ in every.calls] == [seen[7 * i + 6][0] for i in range(len(seen) // 7)]
    assert [name for name, _ in timed.calls] == [v[0] for v in seen]
    assert built == []  # no Event was built for them
    assert trainer.bus.observer_sources()[-2:] == ["every.record", "timed.record"]
    trainer.bus.remove_sources({"every"})
    assert trainer.bus.recorders == [timed] and trainer.bus.observer_sources()[-1:] == ["timed.record"]


def test_record_refuses_what_is_no_recorder(trainer_factory: Any) -> None:
    """A recorder without rows, due, limit and flush_due is refused at registration, naming what it lacks."""
    with pytest.raises(TypeError, match="has no 'limit'"):
        trainer_factory().bus.record(type("R", (), {"rows": [], "due": 0.0})())


def test_observe_rejects_what_is_not_callable(trainer_factory: Any) -> None:
    """A non-callable observer is refused at registration, naming it."""
    with pytest.raises(TypeError, match="observer must be callable, got 3"):
        trainer_factory().observe(3)


def test_handlers_return_updates_applied_by_the_trainer(trainer_factory: Any) -> None:
    """A handler's LogMetrics lands in state.metrics; its Stop ends the run at the next boundary."""
    trainer = trainer_factory(max_epochs=5)

    def handler(event: interlock.Event, state: interlock.TrainerState) -> list[interlock.Update]:
        if state.global_step == 3:
            return [LogMetrics({"marker": 3.0}), Stop("enough")]
        return []

    trainer.on("fit.train.batch.end", handler)
    _fit(trainer)
    assert trainer.state.metrics["marker"] == 3.0
    assert trainer.state.should_stop and trainer.state.stop_reason == "enough"
    assert trainer.state.global_step == 3 and trainer.state.status == "finished"


def test_handler_returning_garbage_fails_the_run_with_a_clear_error(trainer_factory: Any) -> None:
    """A handler that returns a non-update raises TypeError naming the handler; the run ends failed."""
    trainer = trainer_factory(max_epochs=1)

    def bad(event: Any) -> Any:
        return {"stop": True}

    trainer.on("fit.train.epoch_end", bad)
    with pytest.raises(TypeError, match="handler .*bad returned"):
        _fit(trainer)
    assert trainer.state.chart == "failed" and trainer.state.status == "failed"


def test_raw_blinker_receivers_get_the_event_and_a_state_ref(trainer_factory: Any) -> None:
    """Code may connect to the blinker signal directly; it receives the event and `state_ref`."""
    trainer = trainer_factory(max_epochs=1)
    got: list[tuple[str, int]] = []

    def receiver(event: interlock.Event, state_ref: Any) -> interlock.Update:
        got.append((event.name, state_ref().global_step))
        return LogMetrics({"raw": 1.0})

    trainer.bus.signals["fit.train.epoch_end"].connect(receiver, weak=False)
    _fit(trainer)
    assert got == [("fit.train.epoch_end", 8)]
    assert trainer.state.metrics["raw"] == 1.0


def test_a_handler_cannot_mutate_the_state_it_receives(trainer_factory: Any) -> None:
    """Writing into the state a handler receives raises; the run fails and the state is unchanged."""
    trainer = trainer_factory(max_epochs=1)

    def meddle(event: interlock.Event, state: interlock.TrainerState) -> None:
        state.metrics["hacked"] = 1.0  # type: ignore[index]

    trainer.on("fit.train.epoch_end", meddle)
    with pytest.raises(TypeError):
        _fit(trainer)
    assert "hacked" not in trainer.state.metrics


class Recorder(TinyModule):
    """Records the input each training step sees."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append(batch[0].clone())
        return super().training_step(batch, batch_idx)


def test_payload_mappings_cannot_be_written(trainer_factory: Any) -> None:
    """A handler cannot add or change payload keys: the next handler sees what the transition carried."""
    trainer = trainer_factory(max_epochs=1, limit_train_batches=1)
    errors: list[str] = []
    seen: list[set[str]] = []

    def writer(event: interlock.Event) -> None:
        try:
            event.payload["injected"] = 1  # type: ignore[index]
        except TypeError as exc:
            errors.append(str(exc))

    trainer.on("fit.train.batch.step", writer)
    trainer.on("fit.train.batch.step", lambda e: seen.append(set(e.payload)))
    trainer.fit(TinyModule(), loader(32, 16))
    assert errors and "does not support item assignment" in errors[0]
    assert seen == [{"batch", "batch_idx", "device", "lr"}]  # what the chart declares on the state


def test_a_handler_changing_a_payload_tensor_cannot_change_the_step(trainer_factory: Any) -> None:
    """Zeroing the payload's batch in place leaves what training_step sees, and the weights, unchanged."""
    runs = []
    for tamper in (False, True):
        torch.manual_seed(0)
        module = Recorder()
        trainer = trainer_factory(max_epochs=1)
        if tamper:

            def zero_batch(event: interlock.Event) -> None:
                event.payload["batch"][0].zero_()

            def zero_loss(event: interlock.Event) -> None:
                event.payload["outputs"].mul_(0)

            trainer.on("fit.train.batch.step", zero_batch)
            trainer.on("fit.train.batch.backward", zero_loss)
        trainer.fit(module, loader(32, 16))
        runs.append(module)
    plain, tampered = runs
    assert all(torch.equal(a, b) for a, b in zip(plain.seen, tampered.seen, strict=True))
    assert all(x.abs().sum() > 0 for x in tampered.seen)
    for a, b in zip(plain.state_dict().values(), tampered.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_payload_copies_are_made_only_when_read(trainer_factory: Any, monkeypatch: Any) -> None:
    """Events nobody reads the payload of cost no copy; a reading handler gets one copy per event."""
    from interlock.core import events

    copies: list[int] = []
    original = events.read_only
    monkeypatch.setattr(events, "read_only", lambda v: copies.append(1) or original(v))
    trainer = trainer_factory(max_epochs=1)
    trainer.on("*", lambda e: None)
    trainer.fit(TinyModule(), loader(32, 16))
    assert copies == []
    counts = []
    for reads in (1, 3):
        copies.clear()
        trainer = trainer_factory(max_epochs=1)

        def read(event: interlock.Event, state: Any, n: int = reads) -> None:
            for _ in range(n):
                assert event.payload["batch_idx"] in (0, 1)

        trainer.on("fit.train.batch.step", read)
        trainer.fit(TinyModule(), loader(32, 16))
        counts.append(len(copies))
    assert counts[0] > 0 and counts[0] == counts[1]  # built once per event, however often it is read


def test_blinker_sends_exactly_when_a_receiver_is_connected_to_the_signal(
    trainer_factory: Any, monkeypatch: Any
) -> None:
    """No `Signal.send` while the bus's handlers are a signal's only receiver; a direct receiver sees every transition.

    The documented rule (README, concepts.md): the bus's ordered handlers are called without blinker's
    `send`; a receiver connected to a leaf's blinker signal gets every transition into it, through `send`.
    """
    sends: list[str] = []
    original = blinker.Signal.send

    def counting(self: blinker.Signal, *args: Any, **kwargs: Any) -> Any:
        sends.append(str(getattr(self, "name", "")))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(blinker.Signal, "send", counting)
    handled: list[str] = []
    trainer = trainer_factory(max_epochs=1)
    trainer.on("*", lambda event: handled.append(event.name))
    _fit(trainer)
    assert handled and sends == []

    trainer = trainer_factory(max_epochs=1)
    raw: list[str] = []
    observed: list[str] = []
    for signal in trainer.bus.signals.values():
        signal.connect(lambda event, state_ref=None: raw.append(event.name), weak=False)
    trainer.bus.observe(lambda name, *rest: observed.append(name))
    _fit(trainer)
    assert len(raw) > 30 and raw == observed and sends == raw
