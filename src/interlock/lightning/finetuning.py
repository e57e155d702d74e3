"""Lightning's ``BaseFinetuning`` and ``BackboneFinetuning``: freeze modules before training, unfreeze them later.

A Lightning callback like any other (docs/porting.md#callbacks): ``freeze_before_training`` runs in
``setup`` (before ``configure_optimizers``), ``finetune_function`` at each epoch start for each
optimizer, which it changes in place as in Lightning (``unfreeze_and_add_param_group`` adds a
param group). The callback's state records the param groups it added, by parameter name, as
Lightning's does, and also which parameters are trainable and which batch norms track statistics:
a fit resumed from a checkpoint rebuilds the groups in ``on_fit_start``, before the optimizer's
state is loaded into them, and unfreezes what was unfrozen, so the resumed fit trains as the
uninterrupted one. (Lightning's rebuilds the groups only: after a resume the modules it had
unfrozen stay frozen, as ``freeze_before_training`` left them.)
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from interlock.lightning.callback import Callback

__all__ = ["BackboneFinetuning", "BaseFinetuning", "multiplicative"]

log = logging.getLogger("interlock")

Modules = torch.nn.Module | Iterable[Any]


def multiplicative(epoch: int) -> float:
    """``BackboneFinetuning``'s default ``lambda_func``: the backbone's learning rate doubles each epoch."""
    return 2.0


class BaseFinetuning(Callback):
    """Subclass it: freeze in ``freeze_before_training(pl_module)``, unfreeze in ``finetune_function``.

    ``finetune_function(pl_module, epoch, optimizer)`` runs at the start of every training epoch for
    each optimizer; add what it unfreezes with ``unfreeze_and_add_param_group`` (create the optimizer
    over the trainable parameters only: ``filter(lambda p: p.requires_grad, self.parameters())``).
    """

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False
        # the module's freezing after the last finetune_function: trainable parameters, batch norms tracking
        self._trainable: list[str] | None = None
        self._tracking: dict[str, bool] = {}

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"internal_optimizer_metadata": self._internal_optimizer_metadata}
        if self._trainable is not None:
            state.update(trainable=list(self._trainable), tracking=dict(self._tracking))
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restarting = True
        self._internal_optimizer_metadata = state_dict.get("internal_optimizer_metadata", state_dict)
        self._trainable = state_dict.get("trainable")  # absent from Lightning's checkpoints
        self._tracking = dict(state_dict.get("tracking", {}))

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """On a resumed fit: give each optimizer the param groups it had when saved (its state loads next)."""
        if not self._restarting:
            return
        self._restarting = False
        if not self._internal_optimizer_metadata:
            return
        by_name = dict(pl_module.named_parameters())
        for index, optimizer in enumerate(trainer.optimizers):
            groups = self._internal_optimizer_metadata.get(index)
            if groups is not None:
                optimizer.param_groups = _map_params(groups, by_name)
        if self._trainable is not None:  # unfreeze what the saved fit had unfrozen
            trainable = set(self._trainable)
            for name, param in by_name.items():
                param.requires_grad = name in trainable
            for name, module in pl_module.named_modules():
                if name in self._tracking and isinstance(module, _BatchNorm):
                    module.track_running_stats = self._tracking[name]

    # -- Lightning's static helpers ------------------------------------------------------------
    @staticmethod
    def flatten_modules(modules: Modules) -> list[torch.nn.Module]:
        """The leaf modules of ``modules`` (a module or nested iterables of them), and parents with own parameters."""
        if isinstance(modules, torch.nn.ModuleDict):
            modules = modules.values()
        if isinstance(modules, Iterable):
            found: list[torch.nn.Module] = []
            for m in modules:
                found.extend(BaseFinetuning.flatten_modules(m))
            every: Iterable[torch.nn.Module] = found
        else:
            every = modules.modules()
        return [m for m in every if not list(m.children()) or m._parameters]

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True, requires_grad: bool = True) -> Iterator[Any]:
        """The parameters of ``modules`` whose ``requires_grad`` is ``requires_grad`` (batch norms': with train_bn)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and not train_bn:
                continue
            for param in module.parameters(recurse=False):
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """Unfreeze the parameters of ``modules`` (batch norms track running statistics again)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: torch.nn.Module) -> None:
        """Freeze ``module``'s own parameters (a batch norm stops tracking running statistics)."""
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze ``modules``; with ``train_bn`` their batch norms stay trainable."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: torch.optim.Optimizer, params: Iterable[Any]) -> list[Any]:
        """``params`` less those already in ``optimizer`` (compared by value, as Lightning does), with a warning."""
        kept: list[Any] = []
        skipped: list[Any] = []
        for param in params:
            present = any(torch.equal(p, param) for group in optimizer.param_groups for p in group["params"])
            (skipped if present else kept).append(param)
        if skipped:
            warnings.warn(
                "The provided params to be frozen already exist within another group of this optimizer. Those "
                "parameters will be skipped.\nHINT: Did you init your optimizer in `configure_optimizer` as such:\n"
                f" {type(optimizer)}(filter(lambda p: p.requires_grad, self.parameters()), ...) ",
                UserWarning,
                stacklevel=2,
            )
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(
        modules: Modules,
        optimizer: torch.optim.Optimizer,
        lr: float | None = None,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
    ) -> None:
        """Unfreeze ``modules`` and add their parameters to ``optimizer`` as a new param group.

        Its learning rate is ``lr``, or the first group's divided by ``initial_denom_lr``.
        """
        BaseFinetuning.make_trainable(modules)
        rate = optimizer.param_groups[0]["lr"] / initial_denom_lr if lr is None else float(lr)
        params = BaseFinetuning.filter_on_optimizer(optimizer, BaseFinetuning.filter_params(modules, train_bn, True))
        if params:
            optimizer.add_param_group({"params": params, "lr": rate})

    # -- the hooks -----------------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.freeze_before_training(pl_module)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        """Run ``finetune_function`` for each optimizer; remember the param groups it added (by name)."""
        for index, optimizer in enumerate(trainer.optimizers):
            before = len(optimizer.param_groups)
            self.finetune_function(pl_module, trainer.current_epoch, optimizer)
            self._store(pl_module, index, before, optimizer.param_groups)

    def _store(self, pl_module: Any, index: int, before: int, groups: list[dict[str, Any]]) -> None:
        self._trainable = [n for n, p in pl_module.named_parameters() if p.requires_grad]
        self._tracking = {n: m.track_running_stats for n, m in pl_module.named_modules() if isinstance(m, _BatchNorm)}
        names = {p: n for n, p in pl_module.named_parameters()}
        known = self._internal_optimizer_metadata.get(index)
        if known is None:
            self._internal_optimizer_metadata[index] = _map_params(groups, names)
        elif len(groups) != before:
            known.extend(_map_params(groups[before:], names))

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        """Override: unfreeze what epoch ``epoch`` trains."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement finetune_function(pl_module, epoch, optimizer)"
        )

    def freeze_before_training(self, pl_module: Any) -> None:
        """Override: freeze what the fit starts without training."""
        raise NotImplementedError(f"{type(self).__name__} must implement freeze_before_training(pl_module)")


def _map_params(groups: list[dict[str, Any]], mapping: dict[Any, Any]) -> list[dict[str, Any]]:
    """Param groups with each parameter mapped (parameter -> name to store them, name -> parameter to restore)."""
    return [
        {**{k: v for k, v in g.items() if k != "params"}, "params": [mapping[p] for p in g["params"]]} for g in groups
    ]


class BackboneFinetuning(BaseFinetuning):
    """Train ``pl_module.backbone`` from epoch ``unfreeze_backbone_at_epoch``, its learning rate rising to the model's.

    At that epoch the backbone joins the optimizer at ``backbone_initial_lr`` (else the first group's
    times ``backbone_initial_ratio_lr``); each later epoch multiplies it by ``lambda_func(epoch + 1)``,
    capped at the first group's with ``should_align``. As Lightning's.
    """

    def __init__(
        self,
        unfreeze_backbone_at_epoch: int = 10,
        lambda_func: Callable[[int], float] = multiplicative,
        backbone_initial_ratio_lr: float = 10e-2,
        backbone_initial_lr: float | None = None,
        should_align: bool = True,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
        verbose: bool = False,
        rounding: int = 12,
    ) -> None:
        super().__init__()
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.previous_backbone_lr = state_dict["previous_backbone_lr"]
        super().load_state_dict(state_dict)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if not isinstance(getattr(pl_module, "backbone", None), torch.nn.Module):
            raise ValueError(
                f"BackboneFinetuning needs the module's backbone: {type(pl_module).__name__} has no nn.Module "
                "`backbone` attribute (Lightning's MisconfigurationException); name the part to fine-tune "
                "self.backbone, or subclass BaseFinetuning"
            )
        super().on_fit_start(trainer, pl_module)

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        current = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            backbone = (
                self.backbone_initial_lr
                if self.backbone_initial_lr is not None
                else current * self.backbone_initial_ratio_lr
            )
            self.previous_backbone_lr = backbone
            self.unfreeze_and_add_param_group(
                pl_module.backbone, optimizer, backbone, train_bn=self.train_bn, initial_denom_lr=self.initial_denom_lr
            )
        elif epoch > self.unfreeze_backbone_at_epoch:
            assert self.previous_backbone_lr is not None  # set at the unfreezing epoch (or restored)
            backbone = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            if self.should_align and backbone > current:
                backbone = current
            optimizer.param_groups[-1]["lr"] = backbone
            self.previous_backbone_lr = backbone
        else:
            return
        if self.verbose:
            log.info(f"Current lr: {round(current, self.rounding)}, Backbone lr: {round(backbone, self.rounding)}")
