"""Data modules: the data of a run in one object, with Lightning's protocol.

A data module downloads once (``prepare_data``), builds its datasets per stage
(``setup(stage)``), hands out loaders (``train_dataloader`` ...), cleans up
(``teardown(stage)``) and may keep state that checkpoints carry
(``state_dict``/``load_state_dict``). The trainer calls these from the chart's
``data.prepare``, ``data.load`` and ``data.teardown`` actions. A Lightning
``LightningDataModule`` works as it is: only the method names matter.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from interlock.core.hparams import HyperparametersMixin

__all__ = [
    "LOADER_METHODS",
    "DataModule",
    "check_datamodule",
    "is_datamodule",
    "provide_datamodule_loader",
    "provides",
]

D = TypeVar("D", bound="DataModule")
_loader: list[Callable[..., Any]] = []  # filled by the layer that reads checkpoints (connectors.weights)


def provide_datamodule_loader(loader: Callable[..., Any]) -> None:
    """Install ``loader(cls, path, map_location, init_args)``, what :meth:`DataModule.load_from_checkpoint` calls."""
    _loader[:] = [loader]


#: the loader method of each data key
LOADER_METHODS = {
    "train": "train_dataloader",
    "val": "val_dataloader",
    "test": "test_dataloader",
    "predict": "predict_dataloader",
}

#: classes whose loader methods are placeholders (not overridden means "no such data")
_PLACEHOLDERS = ("DataModule", "LightningDataModule", "DataHooks")


class DataModule(HyperparametersMixin):
    """Subclass and implement the hooks you need; every one is optional.

    ``prepare_data`` runs once per machine (local rank 0) before the others; assign
    no state there. ``setup(stage)`` runs in every process with ``stage`` one of
    ``"fit"``, ``"validate"``, ``"test"``, ``"predict"``; ``teardown(stage)`` after, or
    ``on_exception(exception)`` instead when the stage failed or was interrupted (Lightning's order).
    Set ``prepare_data_per_node = False`` to prepare once in all (global rank 0).
    ``save_hyperparameters()`` in ``__init__`` records its arguments, as on a module: checkpoints keep
    them, the loggers log them beside the module's, and :meth:`load_from_checkpoint` rebuilds it.
    """

    prepare_data_per_node: bool = True

    @classmethod
    def from_datasets(
        cls: type[D],
        train_dataset: Any = None,
        val_dataset: Any = None,
        test_dataset: Any = None,
        predict_dataset: Any = None,
        batch_size: int = 1,
        num_workers: int = 0,
        **datamodule_kwargs: Any,
    ) -> D:
        """A data module serving these datasets (each may be a list or dict of datasets), as Lightning's.

        Each loader is ``DataLoader(ds, batch_size, shuffle, num_workers, pin_memory=True)``, shuffled
        for training unless the dataset is iterable; ``batch_size`` and ``num_workers`` also go to
        ``__init__`` when it takes them, and ``datamodule_kwargs`` always do.
        """
        from torch.utils.data import DataLoader, Dataset, IterableDataset

        def loader(ds: Any, shuffle: bool = False) -> Any:
            if isinstance(ds, Mapping):
                return {k: loader(v, shuffle) for k, v in ds.items()}
            if isinstance(ds, list | tuple):
                return type(ds)(loader(v, shuffle) for v in ds)
            if not isinstance(ds, Dataset):
                return ds
            shuffle = shuffle and not isinstance(ds, IterableDataset)
            return DataLoader(ds, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers, pin_memory=True)

        params = {} if cls.__init__ is object.__init__ else inspect.signature(cls.__init__).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        given = {"batch_size": batch_size, "num_workers": num_workers}
        datamodule = cls(**datamodule_kwargs, **{k: v for k, v in given.items() if takes_any or k in params})
        for key, dataset in (("train", train_dataset), ("val", val_dataset), ("test", test_dataset),
                             ("predict", predict_dataset)):  # fmt: skip
            if dataset is not None:
                setattr(datamodule, LOADER_METHODS[key], functools.partial(loader, dataset, key == "train"))
        return datamodule

    @classmethod
    def load_from_checkpoint(
        cls: type[D],
        checkpoint_path: str | os.PathLike[str],
        map_location: Any = None,
        hparams_file: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> D:
        """The data module built from a checkpoint's data-module hyper-parameters (``kwargs`` override them).

        Lightning's meaning: its ``load_state_dict`` then gets what the checkpoint kept of it.
        Reads an interlock or a Lightning checkpoint, without running code in it.
        """
        if hparams_file is not None:
            raise TypeError(
                f"{cls.__name__}.load_from_checkpoint(hparams_file={str(hparams_file)!r}): interlock reads the "
                "hyper-parameters from the checkpoint only; pass values to override as keyword arguments"
            )
        if not _loader:
            raise RuntimeError("import interlock before loading a checkpoint (it installs the checkpoint reader)")
        return _loader[0](cls, checkpoint_path, map_location, kwargs)  # type: ignore[no-any-return]

    def prepare_data(self) -> None:
        """Download or write data to disk (one process per machine)."""

    def setup(self, stage: str) -> None:
        """Build the datasets of ``stage`` (every process)."""

    def teardown(self, stage: str) -> None:
        """Release what ``setup(stage)`` built (a stage that ended well)."""

    def on_exception(self, exception: BaseException) -> None:
        """The stage failed or was interrupted with ``exception`` (called instead of ``teardown``)."""

    def train_dataloader(self) -> Any:
        """The training loader."""
        raise NotImplementedError(f"{type(self).__name__} has no train_dataloader(); implement it to fit")

    def val_dataloader(self) -> Any:
        """The validation loader, or a list of loaders."""
        raise NotImplementedError(f"{type(self).__name__} has no val_dataloader(); implement it to validate")

    def test_dataloader(self) -> Any:
        """The test loader, or a list of loaders."""
        raise NotImplementedError(f"{type(self).__name__} has no test_dataloader(); implement it to test")

    def predict_dataloader(self) -> Any:
        """The predict loader, or a list of loaders."""
        raise NotImplementedError(f"{type(self).__name__} has no predict_dataloader(); implement it to predict")

    # Lightning's batch-transfer hooks, the defaults (a subclass's override is used in place of the module's);
    # here so that an override's super() call works
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Alter a batch before it moves to the device (default: as it is)."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        """Move a batch to ``device`` (default: every tensor in it)."""
        from interlock.core.module import _to_device  # the module's default (core.module imports this file)

        return _to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Alter a batch once it is on the device (default: as it is)."""
        return batch

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of this data module (default: nothing)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take back what :meth:`state_dict` returned."""


def provides(datamodule: Any, key: str) -> bool:
    """Whether ``datamodule`` implements the loader method of ``key`` (not just inherits a placeholder)."""
    name = LOADER_METHODS[key]
    if callable(getattr(datamodule, "__dict__", {}).get(name)):  # set on the instance (from_datasets)
        return True
    fn = getattr(type(datamodule), name, None)
    if fn is None or not callable(fn):
        return False
    owner = getattr(fn, "__qualname__", "").split(".")[0]
    return owner not in _PLACEHOLDERS


def is_datamodule(value: Any) -> bool:
    """``value`` is a data module (it has loader methods and is not itself iterable), as Lightning tells them apart."""
    if value is None or hasattr(value, "__iter__"):
        return False
    return isinstance(value, DataModule) or any(callable(getattr(value, m, None)) for m in LOADER_METHODS.values())


def check_datamodule(datamodule: Any, loaders: dict[str, Any], method: str) -> None:
    """``TypeError`` unless ``datamodule`` is usable and no loader was passed with it."""
    if datamodule is None:
        return
    given = [name for name, value in loaders.items() if value is not None]
    if given:
        raise TypeError(
            f"Trainer.{method}() got both {', '.join(given)} and datamodule={type(datamodule).__name__}(): pass the "
            "loaders or the data module, not both (a data module hands out its own loaders)"
        )
    if not any(callable(getattr(datamodule, name, None)) for name in LOADER_METHODS.values()):
        raise TypeError(
            f"Trainer.{method}(datamodule={datamodule!r:.80}) has none of {', '.join(LOADER_METHODS.values())}: "
            "pass an interlock.DataModule (or a LightningDataModule)"
        )
