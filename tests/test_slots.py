"""Typed slots: actions declare the slots they read and write; bound once those are filled, again if replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interlock
from conftest import TinyModule, loader, only
from interlock import Extension, Fill
from interlock.core.registry import Registry
from interlock.core.run import Run, RunPlan
from interlock.core.slots import OptimSlot, SlotError

BUILTIN = Path(__file__).resolve().parents[1] / "statecharts" / "trainer.yaml"
SETUP_FIRST = "      - module.check\n"
FIT_ENTRY = "    entry: [rng.seed, optim.configure, signals.install]\n"


@attrs.define(eq=False)
class Box:
    """A slot holding one number: which fill made it."""

    n: int


def box_extension(log: list[tuple[str, int]], binds: list[int]) -> Extension:
    """``box.fill`` fills a new Box numbered by the fills so far; ``box.read`` logs the Box it was bound to."""
    ext = Extension("box", slots={"box": Box})
    fills = [0]

    @ext.action("box.fill", writes=("box",))
    def fill(run: Run, params: Any) -> Any:
        def act() -> Fill:
            fills[0] += 1
            return Fill(Box(fills[0]))

        return act

    @ext.action("box.read", reads=("box",))
    def read(run: Run, params: Any) -> Any:
        box = run.slot(Box)  # taken once, at binding: never looked up again
        binds.append(box.n)
        return lambda: log.append((str(params.get("where", "?")), box.n))

    return ext


def chart_with(tmp_path: Path, setup: list[str], fit: list[str]) -> Path:
    """The built-in chart with ``setup`` after ``module.check`` and ``fit`` after fit's own entry actions."""
    text = BUILTIN.read_text()
    assert text.count(SETUP_FIRST) == 1 and text.count(FIT_ENTRY) == 1
    text = text.replace(SETUP_FIRST, SETUP_FIRST + "".join(f"      - {a}\n" for a in setup))
    text = text.replace(FIT_ENTRY, FIT_ENTRY.replace("]\n", "".join(f", {a}" for a in fit) + "]\n"))
    path = tmp_path / "box.yaml"
    path.write_text(text)
    return path


def fit(chart: Path, root: Path, extensions: list[Extension], **kw: Any) -> interlock.Trainer:
    torch.manual_seed(0)
    trainer = interlock.Trainer(
        max_epochs=1, limit_train_batches=1, limit_val_batches=0, default_root_dir=root, chart=chart,
        extensions=extensions, **only(), **kw,
    )  # fmt: skip
    trainer.fit(TinyModule(), loader(16, 8))
    return trainer


def expected_reads(ops: list[str]) -> list[int]:
    """What each read sees: the number of fills before it."""
    out, fills = [], 0
    for op in ops:
        if op == "box.fill":
            fills += 1
        else:
            out.append(fills)
    return out


OPS = st.lists(st.sampled_from(["box.fill", "box.read"]), max_size=6)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(setup=OPS, fit_ops=OPS)
def test_a_reader_sees_the_slot_filled_last_in_any_sequence(
    tmp_path: Path, setup: list[str], fit_ops: list[str]
) -> None:
    """Fills and reads in any order, in a leaf's entry and a compound state's entry: each read sees the latest fill."""
    setup = ["box.fill", *setup]  # a read before any fill is an error (tested below)
    log: list[tuple[str, int]] = []
    binds: list[int] = []
    fit(chart_with(tmp_path, setup, fit_ops), tmp_path, [box_extension(log, binds)])
    assert [n for _, n in log] == expected_reads(setup + fit_ops)
    assert set(binds) >= {n for _, n in log}  # every read ran a callable bound to the slot it saw


def test_reading_a_slot_nothing_filled_names_the_slot_and_its_writers(tmp_path: Path) -> None:
    """An action whose slot is still empty raises SlotError naming the slot and the actions that fill it."""
    chart = chart_with(tmp_path, ["box.read", "box.fill"], [])
    with pytest.raises(SlotError, match=r"'box\.read' reads slot\(s\) \['box'\].*filled by box\.fill"):
        fit(chart, tmp_path, [box_extension([], [])])


def test_filling_a_slot_without_declaring_it_is_refused(tmp_path: Path) -> None:
    """An action that returns Fill for a slot it did not declare in writes= raises naming both."""
    ext = Extension("box", slots={"box": Box})
    ext.add_action("box.fill", lambda run: Fill(Box(1)))  # no writes=
    with pytest.raises(SlotError, match=r"action 'box\.fill' filled slot 'box' \(Box\) without declaring it"):
        fit(chart_with(tmp_path, ["box.fill"], []), tmp_path, [ext])


def test_filling_an_unregistered_slot_type_is_refused(tmp_path: Path) -> None:
    """Fill of a class nobody registered as a slot raises naming the class and the registered slots."""
    ext = Extension("box", actions={"box.fill": lambda run: Fill(Box(1))}, writes={"box.fill": ("box",)})
    with pytest.raises(SlotError, match=r"names slot 'box', which nobody registered"):
        interlock.Trainer(chart=chart_with(tmp_path, ["box.fill"], []), extensions=[ext], **only())
    ext.slot("box", Box)
    other = Extension(
        "other", actions={"other.fill": lambda run: Fill(torch.zeros(1))}, writes={"other.fill": ("box",)}
    )
    text = chart_with(tmp_path, ["other.fill"], []).read_text()
    (tmp_path / "other.yaml").write_text(text)
    with pytest.raises(SlotError, match=r"Tensor is not a registered slot type.*registered: optim \(OptimSlot\)"):
        fit(tmp_path / "other.yaml", tmp_path, [ext, other])


def test_names_taken_twice_are_errors_naming_both_owners(tmp_path: Path) -> None:
    """Two owners of one action, slot name, slot type or counter operation: Trainer() names both."""
    a = Extension("a", actions={"x.act": lambda run: None}, slots={"box": Box}, counters={"tick": lambda c: None})
    with pytest.raises(ValueError, match=r"action 'x\.act' is registered twice: by extension 'a' and by extension 'b'"):
        interlock.Trainer(extensions=[a, Extension("b", actions={"x.act": lambda run: None})], **only())
    with pytest.raises(ValueError, match=r"slot 'box' is registered twice: by extension 'a' and by extension 'b'"):
        interlock.Trainer(extensions=[a, Extension("b", slots={"box": Box})], **only())
    with pytest.raises(ValueError, match=r"slot type Box is registered twice: as 'box' by extension 'a' and as 'b2'"):
        interlock.Trainer(extensions=[a, Extension("b", slots={"b2": Box})], **only())
    with pytest.raises(ValueError, match=r"counter operation 'tick' is registered twice"):
        interlock.Trainer(extensions=[a, Extension("b", counters={"tick": lambda c: None})], **only())
    with pytest.raises(ValueError, match=r"'optim\.step' is registered twice: by interlock\.connectors\.optim and by"):
        interlock.Trainer(extensions=[Extension("b", actions={"optim.step": lambda run: None})], **only())
    with pytest.raises(ValueError, match=r"slot 'optim' is registered twice: by interlock\.connectors\.optim"):
        interlock.Trainer(extensions=[Extension("b", slots={"optim": Box})], **only())


def test_bad_extension_arguments_are_refused_clearly() -> None:
    """reads for a name the extension lacks, a guard writing, an unknown slot, a non-list: errors that say so."""
    with pytest.raises(ValueError, match=r"reads/writes name \['x\.missing'\]"):
        Extension("a", actions={"x.act": lambda run: None}, reads={"x.missing": ("optim",)})
    with pytest.raises(ValueError, match=r"guard 'x\.ok' cannot read or write slots"):
        Extension("a", guards={"x.ok": lambda facts: True}, writes={"x.ok": ("optim",)})
    with pytest.raises(SlotError, match=r"action 'x\.act' \(by extension 'a'\) names slot 'nope'"):
        interlock.Trainer(extensions=[Extension("a", actions={"x.act": lambda r: None}, reads={"x.act": ("nope",)})])
    with pytest.raises(TypeError, match=r"pass a list of interlock\.Extension objects"):
        interlock.Trainer(extensions=Extension("a"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"each item must be an interlock\.Extension"):
        interlock.Trainer(extensions=[{"x.act": print}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"give the extension a name"):
        Extension("")


def test_an_unfilled_slot_is_named_when_read() -> None:
    """run.slot(T) of a slot no action has filled raises naming the type and what is filled."""
    run = Run(plan=RunPlan("fit", interlock.Trainer(**only()).config, {}, "", "."), module=TinyModule())
    with pytest.raises(SlotError, match=r"slot OptimSlot is not filled in this stage \(filled: none\)"):
        run.slot(OptimSlot)
    assert run.optimizers == [] and run.schedulers == []


def test_an_extensions_counter_operation_runs_on_its_transitions(tmp_path: Path) -> None:
    """A counter operation registered by an extension is what a chart's count: names; others are refused."""
    text = BUILTIN.read_text()
    old = "                  - {trigger: stepped, target: end, count: [step, batch]}\n"
    assert text.count(old) == 1
    chart = tmp_path / "ticks.yaml"
    chart.write_text(text.replace(old, old.replace("[step, batch]", "[step, batch, tick]")))
    ticks: list[int] = []

    def tick(c: Any) -> None:
        ticks.append(c.global_step)

    with pytest.raises(interlock.ChartError, match=r"tick"):
        interlock.Trainer(chart=chart, **only())
    trainer = interlock.Trainer(
        chart=chart, max_epochs=2, limit_val_batches=0, extensions=[Extension("t", counters={"tick": tick})], **only()
    )
    trainer.fit(TinyModule(), loader(32, 8))
    assert ticks == list(range(1, 9)) and trainer.state.global_step == 8


class TwoSteps(TinyModule):
    """Manual optimization: ``steps[i]`` optimizer steps in batch ``i``."""

    automatic_optimization = False

    def __init__(self, steps: list[int]) -> None:
        super().__init__()
        self.steps, self.seen_at_step = steps, []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt = self.optimizers()
        x, y = batch
        for _ in range(self.steps[batch_idx]):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(self(x), y)
            self.manual_backward(loss)
            opt.step()
        return None


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.integers(0, 3), min_size=4, max_size=4))
def test_manual_steps_are_recorded_and_counted_by_the_chart(tmp_path: Path, steps: list[int]) -> None:
    """The user's optimizer records its steps in the optim slot; the chart's 'manual' count moves global_step."""
    module = TwoSteps(steps)
    trainer = interlock.Trainer(max_epochs=1, limit_val_batches=0, default_root_dir=tmp_path, **only())
    at_end: list[tuple[int, int]] = []

    def batch_end(event: interlock.Event) -> None:
        run = trainer.runtime.current_run
        assert run is not None
        at_end.append((event.global_step, run.slot(OptimSlot).manual_steps))

    trainer.on("#train_batch_end", batch_end)
    trainer.fit(module, loader(32, 8))
    totals = [sum(steps[: i + 1]) for i in range(4)]
    assert at_end == [(t, 0) for t in totals]  # counted, and the record cleared, when the batch ends
    assert trainer.state.global_step == sum(steps)


def test_the_registry_lists_slot_declarations() -> None:
    """The built-in optimizer actions declare the optim slot: configure writes it, step reads it."""
    from interlock.loops import default_registry

    reg: Registry = default_registry()
    assert reg.actions["optim.configure"].writes == ("optim",)
    assert reg.actions["optim.step"].reads == ("optim", "hardware")
    assert reg.writers("optim") == ["optim.configure"]
    assert reg.slots["optim"].kind is OptimSlot


def test_the_plugins_and_the_signal_flag_are_slots_their_readers_declare() -> None:
    """``hardware`` and ``signals`` are typed slots; every built-in binder that reads one declares it."""
    import inspect

    from interlock.connectors.hardware_slot import HardwareSlot
    from interlock.connectors.signals import SignalsSlot
    from interlock.loops import default_registry

    reg: Registry = default_registry()
    assert reg.slots["hardware"].kind is HardwareSlot and reg.slots["signals"].kind is SignalsSlot
    assert [f.name for f in attrs.fields(HardwareSlot)] == ["accelerator", "devices", "precision", "strategy"]
    readers = {"hardware": 0, "signals": 0}
    for entry in (*reg.actions.values(), *reg.guards.values()):
        source = inspect.getsource(entry.bind)
        for name, kind in (("hardware", HardwareSlot), ("signals", SignalsSlot)):
            if f"slot({kind.__name__})" in source:
                readers[name] += 1
                assert name in entry.reads, (entry.name, entry.reads)
    assert readers["hardware"] > 5 and readers["signals"] >= 3


def test_a_run_starts_with_the_trainers_plugins_and_a_signal_flag(tmp_path: Path) -> None:
    """The trainer's plugins fill the hardware slot of each run; fit's flag catches SIGINT, validate's none."""
    import signal

    from interlock.connectors.hardware_slot import HardwareSlot
    from interlock.connectors.signals import SignalsSlot

    trainer = interlock.Trainer(**only(), max_epochs=1, default_root_dir=str(tmp_path))
    seen: dict[str, tuple[Any, Any]] = {}
    session = trainer._session()
    real = session.runtime.run

    def spy(stage: str, run: Run) -> None:
        seen[stage] = (run.slot(HardwareSlot), run.slot(SignalsSlot).flag.signals)
        real(stage, run)

    session.runtime.run = spy  # type: ignore[method-assign]
    session.run("fit", TinyModule(), {"train": loader(8, 4), "val": None}, None)
    session.run("validate", TinyModule(), {"val": loader(8, 4)}, None)
    assert seen["fit"][0] is trainer.hardware and signal.SIGINT in seen["fit"][1]
    assert seen["validate"][0] is trainer.hardware and seen["validate"][1] == ()
