"""Lightning's LightningModule attributes on interlock.Module: each works with Lightning's meaning or names the way."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import interlock
from conftest import TinyModule, loader, only
from interlock.core.module import takes_batch_idx
from interlock.listeners.csv_logger import CSVLogger


class Probe(TinyModule):
    """Records what the module sees of the run while it trains."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Any, ...]] = []
        self.example_input_array = torch.zeros(2, 4)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append((self.device, self.dtype, self.global_rank, self.local_rank, self.precision, self.logger))
        return super().training_step(batch, batch_idx)


def test_outside_a_run_the_attributes_have_lightnings_defaults() -> None:
    """Unattached: the CPU, float32, rank 0, no logger, an empty loggers list, 32-true."""
    m = TinyModule()
    assert (m.device, m.dtype, m.on_gpu) == (torch.device("cpu"), torch.float32, False)
    assert (m.global_rank, m.local_rank, m.logger, m.loggers, m.precision) == (0, 0, None, [], "32-true")
    assert m.example_input_array is None


def test_device_and_dtype_follow_the_parameters() -> None:
    """``.double()`` makes dtype float64, as Lightning's tracked dtype; a module without parameters is float32."""
    m = TinyModule().double()
    assert m.dtype is torch.float64
    assert interlock.Module().dtype is torch.get_default_dtype()


def test_during_a_run_the_module_sees_ranks_precision_and_the_logger(tmp_path: Path) -> None:
    """In a fit, rank 0 of 1 and the run's CSVLogger listener are what self.global_rank / self.logger show."""
    torch.manual_seed(0)
    m = Probe()
    logger = CSVLogger()
    trainer = interlock.Trainer(
        max_epochs=1,
        limit_train_batches=1,
        **{**only(), "logger": logger},
        default_root_dir=tmp_path,
        precision="64-true",
    )
    trainer.fit(m, loader(), loader())
    assert m.seen == [(torch.device("cpu"), torch.float64, 0, 0, "64-true", logger)]
    assert m.loggers == [logger]


def test_print_prints_on_rank_zero_only(capsys: pytest.CaptureFixture[str]) -> None:
    """self.print writes on global rank 0 and nothing elsewhere."""
    m = TinyModule()
    m.print("hello", 1)
    assert capsys.readouterr().out == "hello 1\n"
    m.attach(interlock.core.module.ModuleView(None, lambda: None, lambda *a: None, global_rank=1))
    m.print("hidden")
    assert capsys.readouterr().out == ""


@settings(max_examples=20, deadline=None)
@given(st.recursive(st.floats(-1e3, 1e3) | st.integers(-5, 5), lambda c: st.lists(c, max_size=3), max_leaves=6))
def test_all_gather_in_one_process_returns_the_data_as_tensors(data: Any) -> None:
    """Single-process all_gather adds no dimension: every number comes back as a tensor of its value."""
    out = TinyModule().all_gather(data)

    def check(given: Any, got: Any) -> None:
        if isinstance(given, list):
            assert isinstance(got, list) and len(got) == len(given)
            for a, b in zip(given, got, strict=True):
                check(a, b)
        else:
            assert isinstance(got, torch.Tensor) and got.shape == () and got.item() == pytest.approx(given)

    check(data, out)


def test_freeze_and_unfreeze() -> None:
    """freeze: no parameter requires grad and eval mode; unfreeze: all do and training mode."""
    m = TinyModule()
    assert m.freeze() is m and not m.training and not any(p.requires_grad for p in m.parameters())
    assert m.unfreeze() is m and m.training and all(p.requires_grad for p in m.parameters())


def test_to_torchscript_script_and_trace_compute_the_forward(tmp_path: Path) -> None:
    """Scripted and traced modules give the module's outputs; file_path saves a loadable file."""
    m = Probe()
    x = torch.randn(3, 4)
    scripted = m.to_torchscript(file_path=tmp_path / "m.pt")
    traced = m.to_torchscript(method="trace")
    torch.testing.assert_close(scripted(x), m(x))
    torch.testing.assert_close(traced(x), m(x))
    torch.testing.assert_close(torch.jit.load(str(tmp_path / "m.pt"))(x), m(x))
    assert m.training  # the mode is restored


def test_trace_without_an_input_names_example_input_array() -> None:
    """Tracing with neither example_inputs nor example_input_array raises naming both."""
    with pytest.raises(ValueError, match="example_input_array"):
        TinyModule().to_torchscript(method="trace")


@pytest.mark.skipif(importlib.util.find_spec("onnx") is not None, reason="onnx is installed")
def test_to_onnx_without_onnx_names_the_package(tmp_path: Path) -> None:
    """to_onnx raises ImportError naming the onnx package when it is not installed."""
    with pytest.raises(ImportError, match="pip install onnx"):
        Probe().to_onnx(tmp_path / "m.onnx")


@pytest.mark.parametrize("name", ["fabric", "device_mesh", "to_tensorrt", "trainer"])
def test_lightning_only_attributes_name_the_alternative(name: str) -> None:
    """What Lightning offers and interlock cannot is an AttributeError that says what to use instead."""
    with pytest.raises(AttributeError) as info:
        getattr(TinyModule(), name)
    assert name in str(info.value) or "no .trainer" in str(info.value)
    assert len(str(info.value)) > 60


def test_an_unknown_attribute_is_still_a_plain_attribute_error() -> None:
    """Names Lightning does not have keep torch's own message."""
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        TinyModule().nope  # noqa: B018


_KINDS = st.sampled_from(["parameter", "buffer", "module", "none_buffer", "none_module"])


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "net", "w", "lin", "mask"]), _KINDS, max_size=5),
    st.sampled_from(["a", "b", "net", "w", "lin", "mask", "missing"]),
)
def test_attribute_lookup_finds_what_torch_finds(registered: dict[str, str], name: str) -> None:
    """Parameters, buffers and submodules (None ones too) are found as torch.nn.Module finds them; misses still miss."""
    m, twin = interlock.Module(), torch.nn.Module()
    for target in (m, twin):
        for key, kind in registered.items():
            if kind == "parameter":
                target.register_parameter(key, torch.nn.Parameter(torch.ones(1)))
            elif kind == "buffer":
                target.register_buffer(key, torch.zeros(1))
            elif kind == "module":
                target.add_module(key, torch.nn.Identity())
            elif kind == "none_buffer":
                target.register_buffer(key, None)
            else:
                target.add_module(key, None)
    if name not in registered:
        with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
            getattr(m, name)
        return
    got, expected = getattr(m, name), getattr(twin, name)
    assert type(got) is type(expected)
    kind = registered[name]
    where = "_parameters" if kind == "parameter" else "_buffers" if "buffer" in kind else "_modules"
    assert got is getattr(m, where)[name]


def test_attribute_lookup_before_torch_sets_up_its_dicts_is_an_attribute_error() -> None:
    """A name read in __init__ before Module.__init__ ran is an AttributeError (as in torch), so hasattr is False."""

    class Early(interlock.Module):
        def __init__(self) -> None:
            self.seen = hasattr(self, "net")
            super().__init__()

    assert Early().seen is False


def test_hparams_initial_is_a_copy() -> None:
    """hparams_initial equals hparams and changing it leaves hparams alone."""

    class H(TinyModule):
        def __init__(self, lr: float = 0.5) -> None:
            super().__init__(lr)
            self.save_hyperparameters()

    h = H()
    initial = h.hparams_initial
    initial["lr"] = 9.0
    assert h.hparams == {"lr": 0.5}


def test_takes_batch_idx_follows_lightnings_rule() -> None:
    """batch_idx is passed when named, with *args, or with two parameters or more."""

    class S:
        def one(self, batch: Any) -> None: ...
        def two(self, batch: Any, i: int) -> None: ...
        def named(self, batch: Any, batch_idx: int = 0) -> None: ...
        def var(self, *args: Any) -> None: ...

    s = S()
    assert [takes_batch_idx(f) for f in (s.one, s.two, s.named, s.var)] == [False, True, True, True]


class NoIndex(TinyModule):
    """Steps written without batch_idx, as Lightning allows."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        self.steps += 1
        return super().training_step(batch, 0)

    def validation_step(self, batch: Any) -> Any:  # type: ignore[override]
        self.log("v", 1.0)

    def test_step(self, batch: Any) -> Any:  # type: ignore[override]
        self.log("t", 2.0)

    def predict_step(self, batch: Any) -> Any:  # type: ignore[override]
        return self(batch[0])


def test_steps_without_batch_idx_run(tmp_path: Path) -> None:
    """training/validation/test/predict steps taking only the batch are called with the batch alone."""
    m = NoIndex()
    trainer = interlock.Trainer(max_epochs=1, **only(), default_root_dir=tmp_path)
    trainer.fit(m, loader(), loader(32))
    assert m.steps == 4 and trainer.state.metrics["v"] == 1.0
    assert trainer.test(m, loader())[0] == {"t": 2.0}
    assert len(trainer.predict(m, loader())) == 4


def test_a_module_defining_an_override_interlock_never_calls_is_refused(tmp_path: Path) -> None:
    """training_epoch_end (removed in Lightning 2.0) raises at set-up naming on_train_epoch_end."""

    class Old(TinyModule):
        def training_epoch_end(self, outputs: Any) -> None: ...

    with pytest.raises(TypeError, match=r"training_epoch_end.*on_train_epoch_end"):
        interlock.Trainer(max_epochs=1, **only(), default_root_dir=tmp_path).fit(Old(), loader())


def test_the_deprecated_configure_sharded_model_is_called_where_configure_model_runs(tmp_path: Path) -> None:
    """configure_sharded_model (renamed in Lightning 2.1) warns and runs at each stage; defining both is refused."""
    calls: list[str] = []

    class Old(TinyModule):
        def configure_sharded_model(self) -> None:
            calls.append("sharded")
            if not hasattr(self, "extra"):
                self.extra = torch.nn.Linear(2, 2)

    trainer = interlock.Trainer(max_epochs=1, **only(), default_root_dir=tmp_path)
    module = Old()
    with pytest.warns(DeprecationWarning, match="configure_sharded_model.*configure_model"):
        trainer.fit(module, loader())
        trainer.test(module, loader())
    assert calls == ["sharded", "sharded"] and isinstance(module.extra, torch.nn.Linear)

    class Both(Old):
        def configure_model(self) -> None: ...

    with pytest.raises(RuntimeError, match="Both `Both.configure_model`, and `Both.configure_sharded_model`"):
        trainer.fit(Both(), loader())


class EvalMode(TinyModule):
    """Keeps dropout active during validation through Lightning's model-mode hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.modes: list[str] = []

    def on_validation_model_eval(self) -> None:
        self.modes.append("eval")
        self.eval()
        self.net[2].train()

    def on_validation_model_train(self) -> None:
        self.modes.append("train")
        self.train()

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        self.modes.append(f"dropout.training={self.net[2].training}")


def test_model_mode_hooks_replace_eval_and_train(tmp_path: Path) -> None:
    """on_validation_model_eval/train are called instead of eval()/train() around validation, as in Lightning."""
    m = EvalMode()
    trainer = interlock.Trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0, limit_val_batches=1,
                                **only(), default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(m, loader(), loader())
    assert m.modes == ["eval", "dropout.training=True", "train"]


pl = pytest.importorskip("pytorch_lightning")


def test_a_pytorch_lightning_module_is_refused_naming_the_switch(tmp_path: Path) -> None:
    """A pl.LightningModule raises at set-up naming interlock.lightning.LightningModule (never trains silently)."""

    class Lit(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.net(batch[0]).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    with pytest.raises(TypeError, match=r"interlock\.lightning\.LightningModule"):
        interlock.Trainer(max_epochs=1, **only(), default_root_dir=tmp_path).fit(Lit(), loader())
