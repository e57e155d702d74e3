"""Feature probes: a case that needs a feature another branch is building is skipped until it is here.

Each probe answers from the API (a signature, an attribute) or, where the feature has no
name of its own, from a tiny interlock run; answers are cached for the session.
"""

from __future__ import annotations

import functools
import inspect
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import interlock
from interlock.listeners import EarlyStopping, ModelCheckpoint


def _params(fn: Any) -> set[str]:
    return set(inspect.signature(fn).parameters)


class _Probe(interlock.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(2, 2)
        self.seen: list[str] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).sum()

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self.net(batch[0]).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_train_start(self) -> None:
        self.seen.append("on_train_start")


def _loader() -> DataLoader[Any]:
    return DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)


def _trainer(root: str) -> interlock.Trainer:
    quiet = {"logger": False, "enable_trace": False, "enable_progress_bar": False, "enable_checkpointing": False}
    return interlock.Trainer(max_epochs=1, default_root_dir=root, num_sanity_val_steps=0, **quiet)


def _hooks_called() -> bool:
    module = _Probe()
    with tempfile.TemporaryDirectory() as root:
        _trainer(root).fit(module, _loader())
    return module.seen == ["on_train_start"]


def _current_epoch_is_lightnings() -> bool:
    from parity.run import current_epoch

    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(root)
        trainer.fit(_Probe(), _loader())
        return current_epoch(trainer) == 1  # Lightning: max_epochs after a completed fit


def _eval_returns_list() -> bool:
    with tempfile.TemporaryDirectory() as root:
        return isinstance(_trainer(root).validate(_Probe(), _loader()), list)


def _several_eval_loaders() -> bool:
    with tempfile.TemporaryDirectory() as root:
        try:
            result = _trainer(root).validate(_Probe(), [_loader(), _loader()])
        except Exception:
            return False
    return isinstance(result, list) and len(result) == 2


# name: (what is pending, where it is being built, the probe)
PROBES: dict[str, tuple[str, Callable[[], bool]]] = {
    "self_log": (
        "Module.log / log_dict (issue #12, branch fid-log)",
        lambda: hasattr(interlock.Module, "log") and hasattr(interlock.Module, "log_dict"),
    ),
    "module_hooks": ("Lightning hooks on the module (issue #12, branch fid-log)", _hooks_called),
    "manual_optimization": (
        "manual optimization (issue #12, branch fid-log)",
        lambda: hasattr(interlock.Module, "manual_backward") and hasattr(interlock.Module, "optimizers"),
    ),
    "datamodule": (
        "fit/validate/test/predict(datamodule=) (issue #12, branch fid-data)",
        lambda: "datamodule" in _params(interlock.Trainer.fit) and hasattr(interlock, "DataModule"),
    ),
    "several_eval_loaders": ("several validation/test loaders (issue #12, branch fid-data)", _several_eval_loaders),
    "eval_returns_list": ("validate/test return list[dict] (issue #12, branch fid-data)", _eval_returns_list),
    "current_epoch": (
        "current_epoch after fit as Lightning's (issue #12 item 7, branch fid-data)",
        _current_epoch_is_lightnings,
    ),
    "trainer_flags": (
        "Trainer(min_epochs, min_steps, overfit_batches, log_every_n_steps, logger, enable_*) (branch fid-cb)",
        lambda: (
            {
                "min_epochs",
                "min_steps",
                "overfit_batches",
                "log_every_n_steps",
                "logger",
                "enable_checkpointing",
                "enable_progress_bar",
            }
            <= _params(interlock.Trainer)
        ),
    ),
    "checkpoint_args": (
        "ModelCheckpoint(save_weights_only, auto_insert_metric_name, save_on_train_epoch_end, ...) (branch fid-cb)",
        lambda: (
            {"save_weights_only", "auto_insert_metric_name", "save_on_train_epoch_end", "enable_version_counter"}
            <= _params(ModelCheckpoint)
        ),
    ),
    "early_stopping_args": (
        "EarlyStopping(verbose, check_on_train_epoch_end) and checks on training metrics (branch fid-cb)",
        lambda: {"verbose", "check_on_train_epoch_end"} <= _params(EarlyStopping),
    ),
}

# Outcome fields compared only once their probe passes (today's value is known to differ everywhere)
FIELD_PROBES = {"current_epoch": "current_epoch"}


@functools.cache
def present(name: str) -> bool:
    """Whether the feature ``name`` is on this branch."""
    return PROBES[name][1]()


def missing(names: tuple[str, ...]) -> list[str]:
    """What is pending among ``names``, as sentences for a skip reason."""
    return [PROBES[n][0] for n in names if not present(n)]
