"""The user's model: a ``torch.nn.Module`` with Lightning's step names, hooks, ``self.log`` and hyper-parameters."""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import numbers
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import torch

from interlock.core.errors import add_note
from interlock.core.hooks import ModelHooks, default_hook, own_hook
from interlock.core.hparams import AttributeDict, HyperparametersMixin
from interlock.core.logging import LogEntry, check_log_options, check_reduce, is_metric, is_metric_collection
from interlock.core.state import mode_of

__all__ = [
    "AttributeDict",
    "ManualOptimizer",
    "Module",
    "ModuleView",
    "StepOutput",
    "overrides",
    "provide_checkpoint_loader",
    "takes_batch_idx",
]  # fmt: skip

StepOutput = torch.Tensor | Mapping[str, Any] | None
M = TypeVar("M", bound="Module")
_loader: list[Callable[..., Any]] = []  # filled by the layer that reads checkpoints (connectors.weights)


def takes_batch_idx(step: Callable[..., Any]) -> bool:
    """Whether a step method takes ``batch_idx`` (Lightning's rule: named so, ``*args``, or two parameters or more).

    ``training_step(self, batch)`` is called with the batch alone, as Lightning calls it.
    """
    fn = getattr(step, "__wrapped__", step)
    try:
        spec = inspect.getfullargspec(fn)
    except TypeError:  # no signature to read (a builtin): pass it
        return True
    args = spec.args[1:] if inspect.ismethod(fn) or (spec.args[:1] == ["self"]) else spec.args
    return "batch_idx" in args or spec.varargs is not None or len(args) >= 2


def overrides(module: Any, name: str) -> bool:
    """Whether ``module``'s class overrides :class:`Module`'s default ``name`` (or defines it, on another class)."""
    fn = own_hook(module, name)
    return fn is not None and fn is not getattr(Module, name, None)


def provide_checkpoint_loader(loader: Callable[..., Any]) -> None:
    """Install ``loader(cls, path, map_location, strict, init_args)``, what :meth:`Module.load_from_checkpoint` calls.

    The reader of checkpoint files lives in a higher layer than the module; it installs itself
    when ``interlock`` is imported.
    """
    _loader[:] = [loader]


#: What Lightning's LightningModule offers that an interlock Module does not, and what to use instead.
_LIGHTNING_ONLY = {
    "fabric": "an interlock Module is run by interlock.Trainer, never by Lightning Fabric, so it has no .fabric; "
    "use self.global_rank / self.device / self.all_gather(...) for what Fabric offered",
    "device_mesh": "interlock has no ModelParallelStrategy device mesh; use Trainer(strategy='fsdp') for sharding",
    "to_tensorrt": "interlock does not export to TensorRT; export with self.to_onnx(...) and build the engine with "
    "TensorRT's own tools",
    "CHECKPOINT_HYPER_PARAMS_KEY": "interlock checkpoints keep hyper-parameters under 'hyper_parameters' "
    "(interlock.lightning.LightningModule has Lightning's constants); read them with "
    "Module.load_from_checkpoint(path).hparams",
    "CHECKPOINT_HYPER_PARAMS_NAME": "the argument that held the hyper-parameters is under 'hparams_name' "
    "(interlock.lightning.LightningModule has Lightning's constants)",
    "CHECKPOINT_HYPER_PARAMS_TYPE": "interlock records plain hyper-parameters only, with no type "
    "(interlock.lightning.LightningModule has Lightning's constants)",
    "remove_ignored_hparams": "use save_hyperparameters(ignore=[...]) in __init__",
}


def _as_tensors(data: Any, device: torch.device) -> Any:
    """Numbers as tensors on ``device``, tensors moved there, inside any nesting of dicts, lists and tuples."""
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, bool | int | float):
        return torch.tensor(data, device=device)
    if isinstance(data, Mapping):
        return type(data)({k: _as_tensors(v, device) for k, v in data.items()})  # type: ignore[call-arg]
    if isinstance(data, list | tuple):
        return type(data)(_as_tensors(v, device) for v in data)
    return data


def _to_device(data: Any, device: torch.device) -> Any:
    """Tensors inside ``data`` moved to ``device`` (everything else as it is)."""
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, Mapping):
        return type(data)({k: _to_device(v, device) for k, v in data.items()})  # type: ignore[call-arg]
    if isinstance(data, list | tuple):
        return type(data)(_to_device(v, device) for v in data)
    return data


def _gather(data: Any, group: Any, sync_grads: bool) -> Any:
    """``all_gather`` of every tensor inside ``data``: stacked across processes, as they are in one process."""
    if isinstance(data, Mapping):
        return type(data)({k: _gather(v, group, sync_grads) for k, v in data.items()})  # type: ignore[call-arg]
    if isinstance(data, list | tuple):
        return type(data)(_gather(v, group, sync_grads) for v in data)
    if not isinstance(data, torch.Tensor):
        return data
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return data
    tensor = data.contiguous()
    if sync_grads:
        import torch.distributed.nn.functional as dist_fn

        return torch.stack(dist_fn.all_gather(tensor, group=group or dist.group.WORLD))
    out = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, tensor, group=group)
    return torch.stack(out)


_NO_TRAINER = (
    "an interlock Module has no .trainer: the module never holds the trainer. Read the epoch and step with "
    "self.current_epoch / self.global_step, log with self.log(...), reach optimizers with self.optimizers(); "
    "for anything else write a Listener (it receives (event, state) and returns updates); code ported from "
    "Lightning can subclass interlock.lightning.LightningModule, whose self.trainer is a read-only view, see "
    "docs/porting.md"
)


class ModuleView:
    """What a running stage shows the module: live counters, optimizers, schedulers, backward. Read-only use.

    The runtime sets one on the module for the stage (``Module.attach``); it is not the trainer.
    ``optim()`` gives the stage's ``optim`` slot as it is now (``None`` before ``optim.configure``
    filled it): the optimizers, the schedulers, and the record of manual optimizer steps.
    """

    __slots__ = (
        "ahead", "backward", "counters", "global_rank", "local_rank", "loggers", "optim", "optimizer_step",
        "precision", "trained", "trainer", "world_size",
    )  # fmt: skip

    def __init__(
        self,
        counters: Any,
        optim: Callable[[], Any],
        backward: Callable[..., None],
        optimizer_step: Callable[..., Any] | None = None,
        *,
        global_rank: int = 0,
        local_rank: int = 0,
        world_size: int = 1,
        loggers: Sequence[Any] = (),
        precision: str = "32-true",
        trained: Callable[[], bool] = lambda: False,
        trainer: Callable[[], Any] | None = None,
    ) -> None:
        self.counters, self.optim, self.backward = counters, optim, backward
        self.trainer = trainer  # the stage's read-only trainer view (what a LightningModule's self.trainer gives)
        self.trained = trained  # whether the fit's training has ended (on_train_end ran, or a later stage runs)
        self.optimizer_step = optimizer_step
        self.global_rank, self.local_rank, self.world_size = global_rank, local_rank, world_size
        self.loggers, self.precision = list(loggers), precision
        self.ahead = 0  # 1 while a step counted after the hook's moment shows (lr_scheduler_step, Lightning's)

    @property
    def optimizers(self) -> list[Any]:
        slot = self.optim()
        return [] if slot is None else list(slot.optimizers)

    @property
    def schedulers(self) -> list[Any]:
        slot = self.optim()
        return [] if slot is None else list(slot.schedulers)


class ManualOptimizer:
    """An optimizer as ``self.optimizers()`` gives it (Lightning's ``LightningOptimizer``).

    ``step()`` goes through the precision plugin and records one optimizer step in the stage's
    ``optim`` slot; the chart's ``manual`` counter operation turns the record into ``global_step``
    when the batch ends (this object writes no counter). Everything else is the optimizer's own.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, view: ModuleView) -> None:
        self.optimizer, self._view = optimizer, view

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        view = self._view
        out = (
            self.optimizer.step(closure)
            if view.optimizer_step is None
            else view.optimizer_step(self.optimizer, closure)
        )
        slot = view.optim()
        if slot is not None:
            slot.manual_steps += 1
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)


_torch_getattr = torch.nn.Module.__getattr__


class Module(ModelHooks, HyperparametersMixin, torch.nn.Module):
    """Subclass and implement the steps you use.

    A step returns a loss tensor or a dict with ``"loss"`` and other scalars;
    every returned scalar becomes a metric (``train_<name>``, ``val_<name>``,
    ``test_<name>``). ``self.log(name, value)`` records a metric under ``name``
    with Lightning's options (docs/porting.md). Lightning's hook methods
    (``on_train_epoch_end``, ...) are called at their states of the chart. There is
    no ``self.trainer`` (``interlock.lightning.LightningModule`` adds a read-only view of it for ported
    code): the module never sees the trainer; ``self.current_epoch``
    and ``self.global_step`` read the counters. ``metric_modes`` says which
    metrics are better when higher (``"max"``); by default names containing
    ``loss`` or ``err`` are ``"min"`` and all others ``"max"``.
    Set ``automatic_optimization = False`` to step the optimizers yourself in
    ``training_step`` (``self.optimizers()``, ``self.manual_backward(loss)``).
    """

    metric_modes: ClassVar[Mapping[str, str]] = {}
    automatic_optimization: bool = True
    #: when the trainer zeroes the gradients: ``True``, right after each optimizer step (they are freed before the
    #: next forward, as in a plain PyTorch loop); ``False`` (``interlock.lightning.LightningModule``), Lightning's
    #: moment: before backward at each accumulation window's first batch and before validation inside fit, so
    #: ``on_train_batch_end`` and the code after ``fit`` still see the last step's gradients
    zero_grad_after_step: ClassVar[bool] = True
    #: ``prepare_data`` runs once per machine (``True``) or once in all (``False``), as Lightning's
    prepare_data_per_node: bool = True
    #: whether loading a checkpoint's weights requires every name to match (Lightning's ``strict_loading``; set it
    #: False in ``__init__`` to resume or ``load_from_checkpoint`` with some weights left out, e.g. frozen ones)
    strict_loading: bool = True

    #: properties TorchScript leaves alone (to_torchscript), as Lightning lists them
    __jit_unused_properties__: ClassVar[list[str]] = [
        "hparams", "hparams_initial", "current_epoch", "global_step", "device", "dtype", "on_gpu", "global_rank",
        "local_rank", "precision", "loggers", "logger", "example_input_array",
    ]  # fmt: skip

    @classmethod
    def load_from_checkpoint(
        cls: type[M],
        checkpoint_path: str | os.PathLike[str],
        map_location: Any = None,
        strict: bool | None = None,
        **init_args: Any,
    ) -> M:
        """A module built from the checkpoint's hyper-parameters (``init_args`` override them), with its weights.

        Lightning's meaning: returned in training mode, as built (call ``.eval()`` for inference),
        on ``map_location`` (default: the CPU). Reads an interlock checkpoint or a Lightning
        ``.ckpt``, without running code in it. ``strict=False`` ignores missing and unexpected
        weight names; ``None`` (the default) reads the module's :attr:`strict_loading` (Lightning's).
        """
        if not _loader:
            raise RuntimeError("import interlock before loading a checkpoint (it installs the checkpoint reader)")
        return _loader[0](cls, checkpoint_path, map_location, strict, init_args)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> StepOutput:
        raise NotImplementedError(f"{type(self).__name__} must implement training_step(batch, batch_idx) to fit")

    def validation_step(self, batch: Any, batch_idx: int) -> StepOutput:
        raise NotImplementedError(
            f"{type(self).__name__} has no validation_step(batch, batch_idx); implement it or pass no val_dataloaders"
        )

    def test_step(self, batch: Any, batch_idx: int) -> StepOutput:
        raise NotImplementedError(f"{type(self).__name__} must implement test_step(batch, batch_idx) to test")

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        """Default: the forward pass on the whole batch, as Lightning's (``batch_idx``, ``dataloader_idx`` unused)."""
        batch = kwargs["batch"] if "batch" in kwargs else args[0]
        try:
            return self(batch)
        except TypeError as exc:  # an (inputs, targets) batch given to a forward that takes the inputs
            if isinstance(batch, list | tuple):
                add_note(
                    exc,
                    f"interlock: the default {type(self).__name__}.predict_step passes the whole batch (a "
                    f"{type(batch).__name__} of {len(batch)}) to forward, as Lightning's does; define "
                    "predict_step(self, batch, batch_idx) to pick the inputs, e.g. return self(batch[0])",
                )
            raise

    def configure_optimizers(self) -> Any:
        """Return an optimizer, a list of them, or a dict with ``optimizer`` and ``lr_scheduler``."""
        raise NotImplementedError(f"{type(self).__name__} must implement configure_optimizers() to fit")

    def mode_of(self, metric: str) -> str:
        """``"min"`` or ``"max"``: which direction is better for ``metric``."""
        return mode_of(metric, self.metric_modes)

    # -- logging ---------------------------------------------------------------------
    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        metric_attribute: str | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """Record a metric, as Lightning's ``LightningModule.log`` (same options, order and defaults).

        ``on_step``/``on_epoch`` default by where it is called (``training_step``: step only;
        evaluation steps and epoch hooks: epoch only); with both, the metric is named
        ``<name>_step`` and ``<name>_epoch``. The epoch value is ``reduce_fx`` over the epoch
        (``"mean"``: weighted by ``batch_size``, inferred from the batch when not given).
        ``logger=None`` means ``True``; ``add_dataloader_idx=False`` keeps the name as given with
        several evaluation loaders; ``rank_zero_only=True`` never syncs the value (log it from rank 0
        alone). The value is buffered here and leaves with the step's outputs as updates.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"self.log name must be a non-empty str, got {name!r}")
        if isinstance(value, Mapping) or is_metric_collection(value):
            raise TypeError(f"self.log({name!r}) got a dict; use self.log_dict({{...}}) for several metrics")
        check_log_options(self, name, value, enable_graph, sync_dist_group, add_dataloader_idx, metric_attribute)
        if is_metric(value):  # a torchmetrics Metric: its batch value on step, compute() at the epoch end
            metrics = self.__dict__.setdefault("_interlock_metrics", {})
            metrics[name] = value
        elif isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(
                    f"self.log({name!r}) needs a scalar, got a tensor of shape {tuple(value.shape)}; reduce it first"
                )
            value = value.detach()
        elif isinstance(value, bool) or (isinstance(value, numbers.Real) and not isinstance(value, int | float)):
            value = float(value)  # True, a numpy scalar: Lightning logs them as floats
        elif not isinstance(value, int | float):
            raise TypeError(f"self.log({name!r}, {value!r}): the value must be a number or a one-element tensor")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"self.log({name!r}, batch_size={batch_size!r}): give an int >= 1 or leave it None")
        entry = LogEntry(
            name, value, on_step, on_epoch, check_reduce(name, reduce_fx), bool(prog_bar),
            logger is None or bool(logger), bool(sync_dist) and not rank_zero_only, batch_size,
            bool(add_dataloader_idx),
        )  # fmt: skip
        logs = self.__dict__.get("_interlock_logs")
        if logs is None:
            self.__dict__["_interlock_logs"] = [entry]
        else:
            logs.append(entry)

    def log_dict(
        self,
        dictionary: Mapping[str, Any],
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """``self.log`` for each item of ``dictionary``, with the same options (Lightning's order)."""
        if not isinstance(dictionary, Mapping) and not is_metric_collection(dictionary):
            raise TypeError(f"self.log_dict needs a dict of name -> value, got {type(dictionary).__name__}")
        for name, value in dictionary.items():
            self.log(
                name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, enable_graph, sync_dist, sync_dist_group,
                add_dataloader_idx, batch_size, rank_zero_only=rank_zero_only,
            )  # fmt: skip

    # -- what the running stage shows the module --------------------------------------------
    def attach(self, view: ModuleView | None) -> None:
        """Called by the runtime: show the module the running stage's view (``None``: none)."""
        self.__dict__["_interlock_view"] = view

    def _view(self, what: str) -> ModuleView:
        view = self.__dict__.get("_interlock_view")
        if view is None:
            raise RuntimeError(f"self.{what} is only available while a Trainer runs this module (fit/validate/...)")
        return view  # type: ignore[no-any-return]

    @property
    def current_epoch(self) -> int:
        """The current training epoch (0-based), as Lightning's; 0 outside a run.

        Once training has ended (from ``on_train_end`` on, and in a later test or predict) it is the
        number of epochs trained, as Lightning's ``trainer.current_epoch``.
        """
        view = self.__dict__.get("_interlock_view")
        if view is None:
            return 0
        counters = view.counters
        return int(counters.epoch) + 1 if counters.train_batches and view.trained() else int(counters.epoch)

    @property
    def global_step(self) -> int:
        """Optimizer steps taken so far, as Lightning's; 0 outside a run.

        Under manual optimization a step counts as soon as ``opt.step()`` returns (the counters take
        the steps recorded in the ``optim`` slot when the batch ends; read here, they are added).
        """
        view = self.__dict__.get("_interlock_view")
        if view is None:
            return 0
        slot = view.optim()
        pending = slot.manual_steps if slot is not None else 0
        return int(view.counters.global_step) + int(view.ahead) + int(pending)

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        """The optimizer, or the list of them when there are several (as Lightning's).

        Each one's ``step()`` goes through the precision plugin and counts as an optimizer step (``global_step``).
        """
        view = self._view("optimizers()")
        opts = [ManualOptimizer(o, view) for o in view.optimizers]
        return opts[0] if len(opts) == 1 else opts

    def lr_schedulers(self) -> Any:
        """The LR scheduler, the list of them, or ``None`` (as Lightning's)."""
        scheds = [s.scheduler for s in self._view("lr_schedulers()").schedulers]
        if not scheds:
            return None
        return scheds[0] if len(scheds) == 1 else scheds

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward through the precision plugin (loss scaling under ``16-mixed``), for manual optimization."""
        self._view("manual_backward()").backward(loss, *args, **kwargs)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Only ``optimizer``'s parameters require grad until :meth:`untoggle_optimizer` (as Lightning's)."""
        optimizer = getattr(optimizer, "optimizer", optimizer)
        mine = {id(p) for g in optimizer.param_groups for p in g["params"]}
        saved: dict[int, bool] = {}
        for opt in self._view("toggle_optimizer()").optimizers:
            for group in opt.param_groups:
                for p in group["params"]:
                    if id(p) not in mine and id(p) not in saved:
                        saved[id(p)] = p.requires_grad
                        p.requires_grad = False
        self.__dict__["_interlock_toggled"] = saved

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Restore ``requires_grad`` as it was before :meth:`toggle_optimizer`."""
        saved = self.__dict__.pop("_interlock_toggled", {})
        for p in self.parameters():
            if id(p) in saved:
                p.requires_grad = saved[id(p)]

    def clip_gradients(
        self, optimizer: Any, gradient_clip_val: float | None = None, gradient_clip_algorithm: str | None = None
    ) -> None:
        """Clip the gradients of ``optimizer``'s parameters (``"norm"``, the default, or ``"value"``), as Lightning's.

        In a run, a value or algorithm not given is the Trainer's (``gradient_clip_val``,
        ``gradient_clip_algorithm``), and one the Trainer sets differently is an error: use only one
        of them. A value of 0 (or less) clips nothing.
        """
        view = self.__dict__.get("_interlock_view")
        flags = view.trainer() if view is not None and view.trainer is not None else None
        set_val = None if flags is None else flags.gradient_clip_val
        set_algorithm = None if flags is None else flags.gradient_clip_algorithm  # None unless one was passed
        if gradient_clip_val is None:
            gradient_clip_val = set_val or 0.0
        elif set_val is not None and set_val != gradient_clip_val:
            raise ValueError(
                f"Trainer(gradient_clip_val={set_val!r}) is set and clip_gradients(gradient_clip_val="
                f"{gradient_clip_val!r}) was passed: use only one of them (as Lightning requires)"
            )
        if gradient_clip_algorithm is None:
            algorithm = set_algorithm or "norm"
        else:
            algorithm = str(gradient_clip_algorithm).lower()
            if set_algorithm is not None and set_algorithm != algorithm:
                raise ValueError(
                    f"Trainer(gradient_clip_algorithm={set_algorithm!r}) is set and clip_gradients("
                    f"gradient_clip_algorithm={gradient_clip_algorithm!r}) was passed: use only one of them "
                    "(as Lightning requires)"
                )
        if isinstance(gradient_clip_val, bool) or not isinstance(gradient_clip_val, int | float):
            raise TypeError(f"clip_gradients(gradient_clip_val={gradient_clip_val!r}): expected an int or a float")
        if algorithm not in ("norm", "value"):
            raise ValueError(
                f"clip_gradients(gradient_clip_algorithm={gradient_clip_algorithm!r}): choose 'norm' or 'value'"
            )
        if gradient_clip_val <= 0:
            return
        optimizer = getattr(optimizer, "optimizer", optimizer)
        params = [p for g in optimizer.param_groups for p in g["params"]]
        if algorithm == "norm":
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
        else:
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)

    # -- Lightning's overridable steps: called only when a subclass overrides them (overrides()) ------
    def optimizer_step(
        self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Callable[[], Any] | None = None
    ) -> None:
        """Step ``optimizer`` (Lightning's hook; override to change the step, e.g. a learning-rate warm-up).

        ``optimizer.step(closure=optimizer_closure)`` goes through the precision plugin: the closure
        gives the step's loss (the training step and backward ran before), then the gradients are
        clipped. Call it exactly as Lightning's docs show.
        """
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        """Zero the gradients (Lightning's hook): called before backward at the first batch of each accumulation."""
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step an LR scheduler when it is due (Lightning's hook); ``metric`` is its monitored value or ``None``."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backpropagate the (scaled, accumulation-divided) loss (Lightning's hook)."""
        loss.backward(*args, **kwargs)

    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: float | None = None, gradient_clip_algorithm: str | None = None
    ) -> None:
        """Clip before each optimizer step with the Trainer's settings (Lightning's hook): :meth:`clip_gradients`."""
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Alter a batch before it moves to the device (Lightning's hook; default: as it is)."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move a batch to ``device`` (Lightning's hook; default: every tensor in it)."""
        return _to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Alter a batch once it is on the device (Lightning's hook; default: as it is)."""
        return batch

    # Lightning's model-mode hooks: called only when a subclass overrides them (the loop otherwise puts back
    # each submodule's mode itself); here so that an override's super() call works, as in Lightning
    def on_validation_model_eval(self) -> None:
        """Put the module in eval mode before validation (Lightning's hook)."""
        self.eval()

    @default_hook
    def on_validation_model_zero_grad(self) -> None:
        """Release the gradients before validation inside fit, no window open (Lightning's hook; ``zero_grad()``)."""
        self.zero_grad()

    def on_validation_model_train(self) -> None:
        """Put the module back in training mode after validation (Lightning's hook)."""
        self.train()

    def on_test_model_eval(self) -> None:
        """Put the module in eval mode before testing (Lightning's hook)."""
        self.eval()

    def on_test_model_train(self) -> None:
        """Put the module back in training mode after testing (Lightning's hook)."""
        self.train()

    def on_predict_model_eval(self) -> None:
        """Put the module in eval mode before predicting (Lightning's hook)."""
        self.eval()

    def configure_model(self) -> None:
        """Build layers at set-up, after ``setup(stage)`` and before the optimizers (Lightning's hook)."""

    def configure_callbacks(self) -> Any:
        """Listeners (or Lightning callbacks) this module brings: added to the Trainer's, replacing the same types."""
        return []

    def prepare_data(self) -> None:
        """Download or write data (Lightning's hook): once per machine, before ``setup``."""

    # -- Lightning's attributes --------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """Where the module's first parameter (or buffer) lives; the CPU when it has none (Lightning's)."""
        for param in self.parameters():
            return param.device
        for buffer in self.buffers():
            return buffer.device
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the module's first floating parameter (torch's default dtype when it has none)."""
        for tensor in self.parameters():
            if tensor.is_floating_point():
                return tensor.dtype
        return torch.get_default_dtype()

    @property
    def on_gpu(self) -> bool:
        """Whether the module is on a CUDA device (Lightning's)."""
        return self.device.type == "cuda"

    def _shown(self, name: str, default: Any) -> Any:
        view = self.__dict__.get("_interlock_view")
        return default if view is None else getattr(view, name)

    @property
    def global_rank(self) -> int:
        """The index of this process among all processes of the run; 0 outside a run."""
        return int(self._shown("global_rank", 0))

    @property
    def local_rank(self) -> int:
        """The index of this process on its machine; 0 outside a run."""
        return int(self._shown("local_rank", 0))

    @property
    def precision(self) -> str:
        """The run's precision flag (``"32-true"``, ``"bf16-mixed"``, ...); ``"32-true"`` outside a run."""
        return str(self._shown("precision", "32-true"))

    @property
    def loggers(self) -> list[Any]:
        """The run's logger listeners (``CSVLogger``, ``TensorBoardLogger``); ``[]`` without one or outside a run."""
        return list(self._shown("loggers", ()))

    @property
    def logger(self) -> Any:
        """The run's first logger listener, or ``None`` (Lightning's ``self.logger``)."""
        loggers = self.loggers
        return loggers[0] if loggers else None

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` in the process of global rank 0 only (Lightning's)."""
        if self.global_rank == 0:
            print(*args, **kwargs)

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Every process's ``data`` (tensors, numbers, or collections of them), stacked on a new first dimension.

        Lightning's meaning: in one process the tensors come back as they are (no new dimension);
        under DDP each becomes ``(world_size, ...)``. ``sync_grads=True`` lets gradients flow back.
        """
        return _gather(_as_tensors(data, self.device), group, sync_grads)

    @property
    def example_input_array(self) -> Any:
        """An input ``forward`` accepts (a tensor, a tuple of positional args or a dict of keyword args), or None."""
        return self.__dict__.get("_example_input_array")

    @example_input_array.setter
    def example_input_array(self, example: Any) -> None:
        self.__dict__["_example_input_array"] = example

    def freeze(self) -> Module:
        """No parameter requires grad, and eval mode (for inference); returns the module."""
        for param in self.parameters():
            param.requires_grad = False
        return self.eval()

    def unfreeze(self) -> Module:
        """Every parameter requires grad, and training mode; returns the module."""
        for param in self.parameters():
            param.requires_grad = True
        return self.train()

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Iterator[None]:
        """:meth:`toggle_optimizer` for the ``with`` block, then :meth:`untoggle_optimizer`."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def _example(self, given: Any, what: str, flag: str) -> Any:
        if given is not None:
            return given
        if self.example_input_array is None:
            raise ValueError(
                f"{type(self).__name__}.{what} needs an input to trace: pass {flag}=..., or set "
                "self.example_input_array in __init__"
            )
        return self.example_input_array

    @torch.no_grad()
    def to_onnx(self, file_path: Any = None, input_sample: Any = None, **kwargs: Any) -> Any:
        """Export to ONNX with ``torch.onnx.export`` (Lightning's); needs the ``onnx`` package."""
        if importlib.util.find_spec("onnx") is None:
            raise ImportError(
                f"{type(self).__name__}.to_onnx() needs the onnx package: pip install onnx (or export with "
                "torch.onnx.export(model, input_sample, path) yourself)"
            )
        mode = self.training
        sample = _to_device(self._example(input_sample, "to_onnx()", "input_sample"), self.device)
        out = torch.onnx.export(
            self, sample, str(file_path) if isinstance(file_path, os.PathLike) else file_path, **kwargs
        )
        self.train(mode)
        return out

    @torch.no_grad()
    def to_torchscript(
        self, file_path: str | os.PathLike[str] | None = None, method: str = "script", example_inputs: Any = None,
        **kwargs: Any,
    ) -> Any:  # fmt: skip
        """The module as TorchScript, by ``torch.jit.script`` or ``"trace"`` (Lightning's); saved when ``file_path``."""
        mode = self.training
        if method == "script":
            scripted = torch.jit.script(self.eval(), **kwargs)
        elif method == "trace":
            inputs = _to_device(
                self._example(example_inputs, "to_torchscript(method='trace')", "example_inputs"), self.device
            )
            scripted = torch.jit.trace(self.eval(), example_inputs=inputs, **kwargs)
        else:
            raise ValueError(f"to_torchscript(method={method!r}); choose 'script' or 'trace'")
        self.train(mode)
        if file_path is not None:
            torch.jit.save(scripted, str(file_path))
        return scripted

    def __getstate__(self) -> dict[str, Any]:
        """Pickled and deep-copied without the running stage's view and the log buffer."""
        state = dict(super().__getstate__())
        state.pop("_interlock_view", None)
        state.pop("_interlock_logs", None)
        state.pop("_interlock_toggled", None)
        state.pop("_interlock_metrics", None)
        for name in state.pop("_interlock_uncompiled", {}):  # a copy is the plain module (torch.compile it again)
            state.pop(name, None)
        return state

    def __getattr__(self, name: str) -> Any:
        # torch.nn.Module.__getattr__'s lookup (parameters, buffers, submodules, in that order), in this frame:
        # a training step reads its submodules on every batch, one Python call each instead of two
        d = self.__dict__
        found = d.get("_parameters")
        if found is not None and name in found:
            return found[name]
        found = d.get("_buffers")
        if found is not None and name in found:
            return found[name]
        found = d.get("_modules")
        if found is not None and name in found:
            return found[name]
        try:  # what torch finds that the lookup above does not (a later torch may look in more places)
            return _torch_getattr(self, name)
        except AttributeError:
            if name == "trainer":
                raise AttributeError(_NO_TRAINER) from None
            if name in _LIGHTNING_ONLY:
                raise AttributeError(f"{type(self).__name__}.{name}: {_LIGHTNING_ONLY[name]}") from None
            raise
