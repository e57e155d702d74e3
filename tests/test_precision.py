"""Precision plugins: flags, dtypes, autocast, loss scaling and scaler state."""

from __future__ import annotations

import copy
import math
from collections import OrderedDict, defaultdict, namedtuple

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from interlock.plugins.precision import (
    PRECISION_ALIASES,
    PRECISION_FLAGS,
    Precision,
    apply_to_tensors,
    precision_plugin,
)

ALL_FLAGS = sorted(PRECISION_FLAGS)
Pair = namedtuple("Pair", ["x", "y"])


def _mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _data(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 8, generator=gen)
    return x, x @ torch.randn(8, 1, generator=gen) * 0.5


@given(st.sampled_from([*PRECISION_FLAGS, *PRECISION_ALIASES]))
def test_every_accepted_spelling_maps_to_a_canonical_flag(flag):
    """Canonical flags map to themselves and aliases map as Lightning does."""
    plugin = precision_plugin(flag)
    assert plugin.flag in PRECISION_FLAGS
    assert plugin.flag == PRECISION_ALIASES.get(flag, flag)
    assert (plugin.param_dtype, plugin.compute_dtype) == PRECISION_FLAGS[plugin.flag]


@given(st.sampled_from(ALL_FLAGS))
def test_flags_are_case_and_space_insensitive(flag):
    """' BF16-Mixed ' is read as 'bf16-mixed'."""
    assert precision_plugin(f"  {flag.upper()} ").flag == flag


@given(st.one_of(st.text(), st.integers(), st.floats(), st.booleans(), st.none()))
def test_unknown_flags_raise_a_value_error_that_lists_the_choices(flag):
    """Anything that is not a flag or alias is refused with the allowed values."""
    accepted = {*PRECISION_FLAGS, *PRECISION_ALIASES}
    normalised = flag.strip().lower() if isinstance(flag, str) else flag
    if not isinstance(flag, bool) and isinstance(flag, (int, str)) and normalised in accepted:
        return
    with pytest.raises(ValueError, match=r"precision=.*'bf16-mixed'"):
        precision_plugin(flag)


def test_aliases_follow_lightning():
    """16 means '16-mixed', 'bf16' means 'bf16-mixed', 32 and 64 mean true precision."""
    assert precision_plugin(16).flag == "16-mixed"
    assert precision_plugin("bf16").flag == "bf16-mixed"
    assert precision_plugin(32).flag == "32-true"
    assert precision_plugin("64").flag == "64-true"


def test_precision_plugin_passes_an_instance_through():
    """An already built plugin is returned as is."""
    plugin = Precision("bf16-true")
    assert precision_plugin(plugin) is plugin


@pytest.mark.parametrize("flag", ALL_FLAGS)
def test_training_follows_the_flag_and_reduces_the_loss(flag):
    """For every flag on CPU: parameter dtype and forward dtype match the flag and 30 steps lower the loss."""
    plugin = precision_plugin(flag)
    plugin.setup("cpu")
    model = plugin.convert_module(_mlp())
    assert {p.dtype for p in model.parameters()} == {plugin.param_dtype}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = plugin.convert_input(_data())
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        with plugin.autocast("cpu"):
            out = model(x)
        assert out.dtype == (plugin.compute_dtype or plugin.param_dtype)
        loss = torch.nn.functional.mse_loss(out.to(y.dtype), y)
        plugin.backward(loss)
        plugin.unscale_gradients(optimizer)
        plugin.optimizer_step(optimizer)
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    assert {p.dtype for p in model.parameters()} == {plugin.param_dtype}


@pytest.mark.parametrize("flag", ALL_FLAGS)
def test_autocast_is_enabled_only_for_mixed_flags(flag):
    """Mixed flags enable autocast with their compute dtype; true flags leave it off."""
    plugin = precision_plugin(flag)
    with plugin.autocast("cpu"):
        enabled = torch.is_autocast_enabled("cpu")
        dtype = torch.get_autocast_dtype("cpu")
    assert enabled == (plugin.compute_dtype is not None)
    if enabled:
        assert dtype == plugin.compute_dtype


def test_convert_input_casts_floats_recursively_for_true_flags():
    """*-true casts floating tensors in nested containers; ints and non-tensors are untouched."""
    marker = object()
    batch = {
        "pair": Pair(torch.ones(2), torch.arange(3)),
        "list": [torch.zeros(1, dtype=torch.float64), "text", marker],
        "ordered": OrderedDict(a=torch.ones(1)),
        "default": defaultdict(list, b=torch.ones(1)),
        "tuple": (torch.ones(1), 3),
    }
    out = precision_plugin("16-true").convert_input(batch)
    assert isinstance(out["pair"], Pair)
    assert out["pair"].x.dtype == torch.float16
    assert out["pair"].y.dtype == torch.int64
    assert out["list"][0].dtype == torch.float16
    assert out["list"][1] == "text"
    assert out["list"][2] is marker
    assert isinstance(out["ordered"], OrderedDict)
    assert isinstance(out["default"], defaultdict)
    assert out["default"].default_factory is list
    assert out["default"]["b"].dtype == torch.float16
    assert out["tuple"][0].dtype == torch.float16
    assert out["tuple"][1] == 3


@pytest.mark.parametrize("flag", ["16-mixed", "bf16-mixed"])
def test_mixed_flags_leave_modules_and_inputs_alone(flag):
    """Mixed precision keeps float32 parameters and inputs; autocast does the casting."""
    plugin = precision_plugin(flag)
    model = _mlp()
    x = torch.randn(2, 8)
    assert plugin.convert_module(model) is model
    assert next(model.parameters()).dtype == torch.float32
    assert plugin.convert_input(x) is x


def test_apply_to_tensors_leaves_non_tensor_leaves_identical():
    """Objects that are not tensors or known containers come back as the same object."""
    obj = object()
    assert apply_to_tensors(obj, lambda t: t + 1) is obj
    assert apply_to_tensors({"k": [obj]}, lambda t: t + 1)["k"][0] is obj


def _scaled_step(plugin, model, optimizer, x, y, poison=False):
    optimizer.zero_grad()
    with plugin.autocast("cpu"):
        out = model(x)
    plugin.backward(torch.nn.functional.mse_loss(out.float(), y))
    if poison:
        next(model.parameters()).grad[0, 0] = float("inf")
    return plugin.optimizer_step(optimizer)


def test_scaler_skips_the_step_when_gradients_are_inf():
    """16-mixed: an inf gradient skips the step, leaves weights alone and halves the scale."""
    plugin = precision_plugin("16-mixed")
    plugin.setup("cpu")
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _data()
    before = copy.deepcopy(model.state_dict())
    scale = plugin.scaler.get_scale()
    assert _scaled_step(plugin, model, optimizer, x, y, poison=True) is False
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert plugin.scaler.get_scale() == scale * 0.5
    taken = [_scaled_step(plugin, model, optimizer, x, y) for _ in range(20)]  # backs off until fp16 grads fit
    assert any(taken)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_unscale_gradients_divides_by_the_scale():
    """After unscale_gradients the gradients are the scaled ones divided by the loss scale."""
    plugin = precision_plugin("16-mixed")
    plugin.setup("cpu")
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _data()
    with plugin.autocast("cpu"):
        out = model(x)
    plugin.backward(torch.nn.functional.mse_loss(out.float(), y) * 1e-6)
    scaled = [p.grad.clone() for p in model.parameters()]
    plugin.unscale_gradients(optimizer)
    scale = plugin.scaler.get_scale()
    for g, p in zip(scaled, model.parameters(), strict=True):
        torch.testing.assert_close(p.grad, g / scale)
    assert plugin.optimizer_step(optimizer) is True


def test_scaler_state_round_trips_as_plain_data():
    """state_dict is plain data and load_state_dict restores it, before or after setup."""
    plugin = precision_plugin("16-mixed")
    plugin.setup("cpu")
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _data()
    _scaled_step(plugin, model, optimizer, x, y, poison=True)
    for _ in range(3):
        _scaled_step(plugin, model, optimizer, x, y)
    state = plugin.state_dict()
    assert state and all(isinstance(v, (int, float)) for v in state.values())
    assert state["scale"] < 65536.0

    early = precision_plugin("16-mixed")
    early.load_state_dict(state)
    assert early.state_dict() == state
    early.setup("cpu")
    assert early.state_dict() == state
    assert early.scaler.get_scale() == state["scale"]

    late = precision_plugin("16-mixed")
    late.setup("cpu")
    late.load_state_dict(state)
    assert late.state_dict() == state


@pytest.mark.parametrize("flag", ["32-true", "bf16-mixed", "16-true"])
def test_flags_without_a_scaler_have_empty_state(flag):
    """Without a scaler the state is empty and loading scaler state is ignored."""
    plugin = precision_plugin(flag)
    plugin.setup("cpu")
    plugin.load_state_dict({"scale": 8.0})
    assert plugin.state_dict() == {}
    assert plugin.scaler is None


def test_backward_without_setup_creates_the_scaler_for_the_loss_device():
    """16-mixed used without setup makes its scaler for the loss's device type."""
    plugin = precision_plugin("16-mixed")
    model = _mlp()
    x, y = _data()
    plugin.backward(torch.nn.functional.mse_loss(model(x), y))
    assert plugin.scaler is not None
    assert plugin.device_type == "cpu"


def test_32_true_step_is_bitwise_identical_to_a_plain_step():
    """32-true through the plugin gives exactly the weights a plain loop gives."""
    plain, wrapped = _mlp(), _mlp()
    plugin = precision_plugin("32-true")
    plugin.setup("cpu")
    wrapped = plugin.convert_module(wrapped)
    opt_a = torch.optim.Adam(plain.parameters(), lr=0.01)
    opt_b = torch.optim.Adam(wrapped.parameters(), lr=0.01)
    x, y = _data()
    for _ in range(5):
        opt_a.zero_grad()
        torch.nn.functional.mse_loss(plain(x), y).backward()
        opt_a.step()
        opt_b.zero_grad()
        xb, yb = plugin.convert_input((x, y))
        with plugin.autocast("cpu"):
            loss = torch.nn.functional.mse_loss(wrapped(xb), yb)
        plugin.backward(loss)
        plugin.unscale_gradients(opt_b)
        assert plugin.optimizer_step(opt_b) is True
    for a, b in zip(plain.parameters(), wrapped.parameters(), strict=True):
        assert torch.equal(a, b)


def test_closures_pass_through_without_a_scaler_and_are_refused_with_one():
    """optimizer_step(closure=...) works for 32-true and raises a clear error for 16-mixed."""
    model = _mlp()
    x, y = _data()
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=2)

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    assert precision_plugin("32-true").optimizer_step(optimizer, closure) is True
    scaled = precision_plugin("16-mixed")
    scaled.setup("cpu")
    with pytest.raises(ValueError, match="closure"):
        scaled.optimizer_step(optimizer, closure)


@pytest.mark.parametrize("bad", ["", None, 3])
def test_setup_rejects_non_device_types(bad):
    """setup() needs a device type string such as 'cpu'."""
    with pytest.raises(ValueError, match="device_type="):
        precision_plugin("16-mixed").setup(bad)


@pytest.mark.parametrize("flag", ALL_FLAGS)
def test_only_32_true_is_plain(flag):
    """`is_plain` (the fit loop calls backward and step itself) holds for 32-true alone."""
    assert Precision(flag).is_plain is (flag == "32-true")


def test_a_subclass_that_overrides_a_step_method_is_not_plain_and_is_used_by_fit(tmp_path):
    """A Precision subclass overriding backward or optimizer_step is called by the fit loop for every batch."""
    import interlock
    from conftest import TinyModule, loader, only

    calls = []

    class Counting(Precision):
        def backward(self, loss, **kwargs):
            calls.append("backward")
            super().backward(loss, **kwargs)

        def optimizer_step(self, optimizer, closure=None):
            calls.append("step")
            return super().optimizer_step(optimizer, closure)

    plugin = Counting("32-true")
    assert not plugin.is_plain
    trainer = interlock.Trainer(max_epochs=1, **only(), precision=plugin, accelerator="cpu", default_root_dir=tmp_path)
    trainer.fit(TinyModule(), loader(64, 8))
    assert calls == ["backward", "step"] * 8
