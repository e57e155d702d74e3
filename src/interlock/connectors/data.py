"""Data: loaders that start at any position without replaying what came before.

A map-style loader's sampler is swapped for a :class:`PositionSampler`, which
produces exactly the order the original sampler would (``RandomSampler`` draws
its seed from the global torch RNG the same way) but records that seed, so an
epoch can be re-entered at batch ``k`` by slicing the index order: the cost does
not depend on ``k``. Iterable datasets with ``state_dict``/``load_state_dict``
use those; anything else is replayed, with a warning that says so.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler

from interlock.connectors.combined import CombinedData
from interlock.connectors.fastfetch import FastTensorLoader
from interlock.connectors.hardware_slot import HardwareSlot
from interlock.connectors.rng import get_rng_states, seed_workers, set_rng_states
from interlock.core.combined import CombinedLoader, flatten
from interlock.core.config import TrainerConfig
from interlock.core.datamodule import LOADER_METHODS, provides
from interlock.core.module import Module, overrides
from interlock.core.registry import Action, Guard, Registry
from interlock.core.run import Run, stage_def
from interlock.core.slots import DataSlot, DeviceSlot, DistSlot, Fill
from interlock.core.state import TrainerState, thaw
from interlock.core.step import Facts
from interlock.core.updates import SetDataPosition, SetStageFacts, Update

__all__ = [
    "EpochData",
    "Feed",
    "PositionSampler",
    "check_training_data",
    "draw_base_seeds",
    "feed_key",
    "generator_state",
    "load_datamodule_state",
    "loader_count",
    "num_batches",
    "prepare_feed",
    "prepare_loader",
    "register",
    "reposition",
    "set_generator_state",
    "split_loaders",
    "with_datamodule_state",
]


class PositionSampler(Sampler[int]):
    """Random or sequential indices that can start at any position.

    With ``shuffle`` the epoch's permutation comes from ``torch.randperm`` seeded
    by a value drawn from the global RNG when iteration starts, as
    ``RandomSampler`` does; ``seed`` fixes it instead (used on resume). With
    ``num_replicas > 1`` each rank takes every ``num_replicas``-th index of the
    (padded) order, as ``DistributedSampler`` does.
    """

    def __init__(
        self, size: int, shuffle: bool, num_replicas: int = 1, rank: int = 0, generator: torch.Generator | None = None
    ) -> None:
        self.size, self.shuffle = size, shuffle
        self.num_replicas, self.rank = num_replicas, rank
        self.start = 0
        self.skip = 0  # global samples of the epoch's order already consumed (a resume on another world size)
        self.seed: int | None = None
        #: the loader's own generator (``shuffle=True, generator=g``): the order comes from it, as in RandomSampler
        self.generator = generator
        #: ``generator``'s state when the epoch's order was drawn (hex), kept in the data position
        self.epoch_state: str | None = None
        #: the indices this epoch yields, kept when asked (a prediction writer's batch indices); ``None``: not kept
        self.seen: list[int] | None = None

    def __len__(self) -> int:
        return math.ceil(self.size / self.num_replicas)

    def order(self) -> list[int]:
        if self.shuffle and self.generator is not None:
            if self.epoch_state is None:
                self.epoch_state = generator_state(self.generator)
            else:
                set_generator_state(self.generator, self.epoch_state)
            order = torch.randperm(self.size, generator=self.generator).tolist()
        elif self.shuffle:
            if self.seed is None:
                self.seed = int(torch.empty((), dtype=torch.int64).random_().item())
            g = torch.Generator()
            g.manual_seed(self.seed)
            order = torch.randperm(self.size, generator=g).tolist()
        else:
            order = list(range(self.size))
        if self.skip:
            order = order[self.skip :]
        if self.num_replicas > 1:
            total = math.ceil(len(order) / self.num_replicas) * self.num_replicas
            order = (order * math.ceil(total / max(len(order), 1)))[:total]
            order = order[self.rank : total : self.num_replicas]
        return order

    def __iter__(self) -> Iterator[int]:
        # the indices come from a list iterator (no Python code per index); the order is drawn at the first index
        return itertools.chain.from_iterable(self._parts())

    def _parts(self) -> Iterator[list[int]]:
        order = self.order()[self.start :]
        if self.seen is not None:
            self.seen = order
        yield order
        if self.shuffle and self.generator is not None:
            torch.randperm(self.size, generator=self.generator)  # RandomSampler draws once more when exhausted


def generator_state(generator: torch.Generator) -> str:
    """A generator's state as plain data (hex), for the data position of a checkpoint."""
    return bytes(generator.get_state().numpy()).hex()


def set_generator_state(generator: torch.Generator, state: str) -> None:
    """Put back what :func:`generator_state` returned."""
    generator.set_state(torch.frombuffer(bytearray.fromhex(state), dtype=torch.uint8).clone())


def _rebuild(loader: DataLoader, sampler: Sampler[int]) -> DataLoader:
    """The same loader with another sampler (every other setting kept)."""
    kwargs: dict[str, Any] = {
        "batch_size": loader.batch_size,
        "drop_last": loader.drop_last,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    cls = FastTensorLoader if isinstance(loader, FastTensorLoader) else DataLoader  # fast_fetch() is kept
    return cls(loader.dataset, sampler=sampler, **kwargs)


def prepare_loader(
    loader: Iterable[Any], num_replicas: int = 1, rank: int = 0, unshuffle: str | None = None
) -> Iterable[Any]:
    """Make ``loader`` resumable (and sharded across ranks) where that is possible.

    After ``seed_everything(workers=True)`` a loader with workers and no ``worker_init_fn`` gets
    :func:`~interlock.connectors.rng.worker_init_function` first. ``unshuffle`` (a loop's name)
    turns shuffling off with Lightning's warning (``overfit_batches``).
    """
    seed_workers(loader, rank)
    if not isinstance(loader, DataLoader) or loader.batch_size is None:
        return loader
    sampler = loader.sampler
    if type(loader.batch_sampler) is not BatchSampler or type(sampler) not in (RandomSampler, SequentialSampler):
        return loader
    if isinstance(sampler, RandomSampler) and (sampler.replacement or sampler._num_samples is not None):
        return loader
    if not isinstance(loader.dataset, Sized):
        return loader
    size = len(loader.dataset)
    shuffle = isinstance(sampler, RandomSampler)
    if shuffle and unshuffle is not None:
        warnings.warn(
            f"You requested to overfit but enabled {unshuffle} dataloader shuffling. "
            f"We are turning off the {unshuffle} dataloader shuffling for you.",
            UserWarning,
            stacklevel=2,
        )
        shuffle = False
    generator = sampler.generator if isinstance(sampler, RandomSampler) and shuffle else None
    return _rebuild(loader, PositionSampler(size, shuffle, num_replicas, rank, generator))


def _length(loader: Iterable[Any]) -> int | None:
    """``len(loader)``, or ``None`` when it has none (a DataLoader over an IterableDataset may raise)."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None


def num_batches(loader: Iterable[Any], limit: int | float | None, flag: str = "the batch limit") -> int | None:
    """How many batches a loop takes from ``loader`` (``None``: until exhausted).

    A positive fraction that rounds to 0 of a non-empty loader is an error naming ``flag`` and
    the smallest fraction that takes one batch (Lightning's rule; ``0`` or ``0.0`` takes none).
    """
    length = _length(loader)
    if limit is None:
        return length
    if isinstance(limit, float):
        if length is None:
            if limit == 1.0:
                return None
            raise ValueError(
                f"a fractional batch limit ({limit}) needs a loader with a length; "
                "pass an int number of batches instead"
            )
        taken = int(length * limit)
        if taken == 0 and limit > 0 and length > 0:
            raise ValueError(
                f"{flag}={limit} of a loader of {length} batches is {length * limit:.3g} batches, which rounds to 0: "
                f"pass at least {flag}={1 / length:.4g} (one batch), or 0 to run none"
            )
        return taken
    return limit if length is None else min(limit, length)


class EpochData:
    """One loader, iterated epoch by epoch from a position."""

    def __init__(self, loader: Iterable[Any]) -> None:
        self.loader = loader
        self.sampler = getattr(loader, "sampler", None)
        if not isinstance(self.sampler, PositionSampler):
            self.sampler = None
        self.dataset = getattr(loader, "dataset", None)

    @property
    def seed(self) -> int | None:
        return self.sampler.seed if self.sampler is not None else None

    def set_epoch(self, epoch: int) -> None:
        """Tell samplers and datasets that follow the epoch (``set_epoch``) which one it is."""
        for obj in (getattr(self.loader, "sampler", None), getattr(self.loader, "batch_sampler", None), self.dataset):
            if obj is not None and hasattr(obj, "set_epoch") and not isinstance(obj, PositionSampler):
                obj.set_epoch(epoch)

    def keep_indices(self) -> bool:
        """Keep the indices each epoch yields (for :meth:`batch_indices`); ``False`` when the loader's are unknown."""
        if self.sampler is None:
            return False
        self.sampler.seen = self.sampler.seen or []
        return True

    def batch_indices(self, batch_idx: int) -> list[int]:
        """The dataset indices of batch ``batch_idx`` of this epoch (:meth:`keep_indices` first; ``[]``: unknown)."""
        seen: list[int] | None = self.sampler.seen if self.sampler is not None else None
        size: int | None = getattr(self.loader, "batch_size", None)
        if seen is None or not size:
            return []
        return seen[batch_idx * size : (batch_idx + 1) * size]

    @property
    def generator_epoch(self) -> str | None:
        """The loader's own generator's state when this epoch's order was drawn (``None``: no such generator)."""
        return self.sampler.epoch_state if self.sampler is not None and self.sampler.generator is not None else None

    @property
    def generator(self) -> torch.Generator | None:
        """The loader's own shuffling generator, if it has one."""
        return self.sampler.generator if self.sampler is not None else None

    def restore_generator(self, data: Mapping[str, Any]) -> None:
        """Put the loader's own generator back as a checkpoint's data position kept it (the next epoch draws on it)."""
        own = self.generator
        if own is not None and isinstance(data.get("generator"), str):
            set_generator_state(own, data["generator"])

    def iterate(
        self, start: int = 0, seed: int | None = None, state: Any = None, skip: int = 0, epoch_state: str | None = None
    ) -> Iterator[Any]:
        """An iterator over the epoch that begins at batch ``start``.

        ``seed`` fixes the shuffle order (resume); ``None`` draws a fresh one. ``skip``
        (global samples already consumed, from a run with another world size or batch
        size) starts the epoch's global order there and shards the rest across this run's ranks.
        """
        if isinstance(state, Mapping) and "parts" in state:
            raise RuntimeError(
                f"this checkpoint was saved in an epoch of {len(state['parts'])} training loaders iterated together "
                f"(mode {state.get('mode')!r}), and this run has one: resume with the training data it was saved with"
            )
        if self.sampler is not None:
            self.sampler.seed = seed
            self.sampler.epoch_state = epoch_state
            self.sampler.skip = skip
            self.sampler.start = 0 if skip else start * (self.loader.batch_size or 1)  # type: ignore[attr-defined]
            return iter(self.loader)
        if state is not None and hasattr(self.dataset, "load_state_dict"):
            self.dataset.load_state_dict(state)  # type: ignore[union-attr]
            return iter(self.loader)
        it = iter(self.loader)
        if start:
            warnings.warn(
                f"resuming this loader at batch {start} replays (and discards) the first {start} batches: "
                "use a map-style dataset with a RandomSampler/SequentialSampler, or an IterableDataset "
                "with state_dict()/load_state_dict(), to resume without replay",
                stacklevel=2,
            )
            for _ in range(start):
                next(it)
        return it

    def data_state(self) -> Any:
        """The iterable dataset's own position, when it has one."""
        if self.sampler is None and hasattr(self.dataset, "state_dict"):
            return self.dataset.state_dict()  # type: ignore[union-attr]
        return None


class Feed:
    """One loader of a stage, as the chart's actions use it.

    ``loader`` is what the user passed; :meth:`prepare` makes it resumable and
    sharded (``data.setup``). ``limit`` is how many batches a loop takes (``None``:
    until exhausted; ``state.limits`` has it for the guards), ``it`` the open iterator.
    Whether it ran out is in the state (``state.data["exhausted"]``, ``state.eval_exhausted``).
    ``last_outputs`` keeps what the latest training step returned: the epoch's
    training metrics come from it (a checkpoint stores its scalars).
    """

    def __init__(self, loader: Iterable[Any]) -> None:
        self.loader = loader
        self.data: EpochData | CombinedData = EpochData(loader)
        self.limit: int | None = None
        self.it: Iterator[Any] | None = None
        self.last_outputs: Any = None
        #: asked for from the module's or data module's ``*_dataloader()`` (so it can be asked for again), and at
        #: which epoch (``reload_dataloaders_every_n_epochs``)
        self.from_method = False
        self.epoch = 0

    def prepare(
        self, world_size: int, rank: int, limit: int | float | None, unshuffle: str | None = None, flag: str = "limit"
    ) -> None:
        if isinstance(self.loader, CombinedLoader):  # several training loaders: each resumable and sharded
            parts = [EpochData(prepare_loader(x, world_size, rank, unshuffle)) for x in self.loader.flattened]
            self.data = CombinedData(self.loader, parts, world_size)
        else:
            self.data = EpochData(prepare_loader(self.loader, world_size, rank, unshuffle))
        self.limit = num_batches(self.data.loader, limit, flag)


def draw_base_seeds(feed: Feed) -> None:
    """Draw what opening ``feed``'s iterator draws: one base seed per ``DataLoader`` (from its generator or torch's)."""
    data = feed.data
    for loader in data.dataloaders() if isinstance(data, CombinedData) else [data.loader]:
        if isinstance(loader, DataLoader):
            torch.empty((), dtype=torch.int64).random_(generator=loader.generator)


def prepare_feed(run: Run, key: str, feed: Feed) -> None:
    """Make ``feed`` (the loop's loader ``key``) resumable and sharded for this run, with its batch limit."""
    dist, cfg = run.dist, run.config
    loop = key.split("#", maxsplit=1)[0]
    overfit = cfg.overfit_batches > 0 and run.stage == "fit" and key in ("train", "val")
    unshuffle = {"train": "training", "val": "validation"}.get(key) if overfit else None
    flag = f"Trainer(limit_{loop}_batches)"
    feed.prepare(dist.world_size if dist else 1, dist.rank if dist else 0, cfg.limit(loop), unshuffle, flag)


def feed_key(key: str, index: int) -> str:
    """The feed of a loop's ``index``-th loader: ``val``, ``val#1``, ``val#2``, ..."""
    return key if index == 0 else f"{key}#{index}"


def loader_count(feeds: Mapping[str, Any], key: str) -> int:
    """How many loaders the loop of ``key`` has."""
    n = 0
    while feed_key(key, n) in feeds:
        n += 1
    return n


def _looks_like_batch(item: Any) -> bool:
    if isinstance(item, torch.Tensor):
        return True
    return isinstance(item, list | tuple) and bool(item) and all(isinstance(x, torch.Tensor) for x in item)


def split_loaders(key: str, loaders: Any) -> dict[str, Iterable[Any]]:
    """The feeds of one loop: a list, tuple or dict of evaluation loaders is several loaders, as in Lightning.

    A dict's loaders run in its order, numbered as a list's are (Lightning's ``CombinedLoader`` in
    its ``sequential`` mode: ``dataloader_idx`` 0, 1, ...). Several training loaders (a dict, or a
    list or tuple holding a ``DataLoader``) are one feed cycled together, as Lightning does
    (``CombinedLoader(loaders, "max_size_cycle")``); a ``CombinedLoader`` keeps its own mode. A list
    whose items look like batches (tensors, tuples of tensors) is refused: wrap the batches in a
    ``DataLoader``, or pass ``[batches]`` as one loader.
    """
    if loaders is None:
        return {}
    if key == "train":
        return {key: _training_loader(loaders)}
    if isinstance(loaders, CombinedLoader):
        if loaders.mode != "sequential":
            raise ValueError(
                f"the {key} loaders are a CombinedLoader in mode {loaders.mode!r}; interlock's evaluation loops run "
                "several loaders one after the other (mode 'sequential', dataloader_idx 0, 1, ...): pass "
                "CombinedLoader(loaders, 'sequential') or the list of loaders, or combine the datasets in one "
                "Dataset to evaluate them batch by batch together"
            )
        loaders = loaders.flattened
    if isinstance(loaders, Mapping):
        loaders = list(loaders.values())
    if not isinstance(loaders, list | tuple):
        return {key: loaders}
    for i, item in enumerate(loaders):
        if _looks_like_batch(item) or not isinstance(item, Iterable):
            raise TypeError(
                f"the {key} loaders are a {type(loaders).__name__}, so each item is a loader (as in Lightning), but "
                f"item {i} is a {type(item).__name__}, which looks like a batch: pass DataLoaders, or wrap a list "
                "of batches in a list ([batches]) to make it one loader"
            )
    return {feed_key(key, i): loader for i, loader in enumerate(loaders)}


def _training_loader(loaders: Any) -> Iterable[Any]:
    """One training feed: several loaders (a dict, or a list or tuple of DataLoaders) cycled together, as Lightning."""
    if isinstance(loaders, CombinedLoader):
        return loaders
    several = isinstance(loaders, Mapping) or (
        isinstance(loaders, list | tuple) and any(isinstance(x, DataLoader) for x in loaders)
    )
    if not several:
        return loaders  # type: ignore[no-any-return]
    for i, item in enumerate(flatten(loaders)[0]):
        if _looks_like_batch(item) or not isinstance(item, Iterable):
            where = repr(list(loaders)[i]) if isinstance(loaders, Mapping) else str(i)
            raise TypeError(
                f"the training data is a {type(loaders).__name__} of loaders (cycled together, as in Lightning), but "
                f"item {where} is a {type(item).__name__}: each item must be a loader (a DataLoader)"
            )
    return CombinedLoader(loaders, "max_size_cycle")


def with_datamodule_state(run: Run, state: TrainerState) -> TrainerState:
    """``state`` with the data module's ``state_dict()`` in ``data["datamodule"]`` (what a checkpoint keeps)."""
    dm = run.plan.datamodule
    if dm is None or not callable(getattr(dm, "state_dict", None)):
        return state
    return state.replace(data={**state.data, "datamodule": dm.state_dict()})


def load_datamodule_state(run: Run, state: TrainerState) -> None:
    """Give the data module back what a checkpoint kept of it (``load_state_dict``)."""
    dm, saved = run.plan.datamodule, state.data.get("datamodule")
    if dm is not None and saved is not None and callable(getattr(dm, "load_state_dict", None)):
        dm.load_state_dict(thaw(saved))


def _needs_step(module: Any, name: str) -> bool:
    """The module implements ``name`` (not only interlock's placeholder)."""
    fn = getattr(type(module), name, None)
    return fn is not None and fn is not getattr(Module, name, None)


def reposition(data: Mapping[str, Any], batch_idx: int, world_size: int, loader: Any) -> tuple[dict[str, Any], int]:
    """Translate a saved data position to this run's world size and batch size: ``(data, batch_idx)``.

    The position is kept in global samples: ``batch_idx * batch_size * world_size`` of
    the epoch's global order were consumed when the checkpoint was saved. When this run
    splits batches differently, the epoch restarts at that sample (``data['skip']``) and
    ``batch_idx`` becomes the whole batches of the new global batch it covers. Unchanged
    layouts (and loaders interlock cannot position) are returned as they are. When the
    global batch changes, training is not the run it continues, and a warning says so.
    """
    saved_world, saved_batch = data.get("world_size"), data.get("batch_size")
    batch = getattr(loader, "batch_size", None)
    if not isinstance(saved_world, int) or not isinstance(saved_batch, int) or not isinstance(batch, int):
        return dict(data), batch_idx
    if (saved_world, saved_batch) == (world_size, batch) or data.get("exhausted"):
        return dict(data), batch_idx
    consumed = batch_idx * saved_batch * saved_world
    saved_global, global_batch = saved_batch * saved_world, batch * world_size
    if saved_global != global_batch:
        warnings.warn(
            f"resuming a run saved with {saved_world} process(es) x batch_size={saved_batch} (global batch "
            f"{saved_global}) on {world_size} process(es) x batch_size={batch} (global batch {global_batch}): "
            f"the data continues at global sample {consumed} of the epoch, each sample once, but every step now "
            f"averages {global_batch} samples, so training is not the run it continues; keep the global batch "
            f"(batch_size={saved_global // world_size if saved_global % world_size == 0 else '?'} per process) to "
            "continue it",
            stacklevel=2,
        )
    if not isinstance(getattr(loader, "sampler", None), PositionSampler):
        warnings.warn(
            f"the training loader cannot start at global sample {consumed} (not a map-style dataset with a "
            "RandomSampler/SequentialSampler): the epoch resumes by batches of this run, so samples can repeat "
            "or be skipped",
            stacklevel=2,
        )
        return dict(data), batch_idx
    new = {**data, "skip": consumed, "world_size": world_size, "batch_size": batch}
    return new, consumed // global_batch


def _describe(loader: Any) -> str:
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, Sized):
        batch, drop = getattr(loader, "batch_size", None), getattr(loader, "drop_last", False)
        return f" (len(dataset) = {len(dataset)}, batch_size={batch}, drop_last={drop})"
    return ""


def check_training_data(feed: Feed, config: TrainerConfig) -> None:
    """Refuse, at set-up, training data a fit cannot use.

    An empty loader; a fraction of an unsized epoch; an int ``val_check_interval`` longer than
    the epoch it counts in (Lightning raises too).
    """
    val_check_interval = config.val_check_interval
    length = _length(feed.data.loader)
    if length == 0:
        raise ValueError(
            f"the training loader has no batches (len(train_dataloaders) == 0){_describe(feed.data.loader)}: "
            "fit needs at least one; check the dataset, or use a smaller batch_size or drop_last=False"
        )
    if isinstance(val_check_interval, float) and val_check_interval != 1.0 and feed.limit is None:
        raise ValueError(
            f"Trainer(val_check_interval={val_check_interval!r}) is a fraction of the training epoch, but the "
            "training loader has no length (an IterableDataset?), so the epoch has none: pass an int "
            "(validate every N training batches), or set limit_train_batches=N to give the epoch a length"
        )
    counted_per_epoch = config.check_val_every_n_epoch is not None and config.limit("val") != 0
    too_long = feed.limit is not None and isinstance(val_check_interval, int) and val_check_interval > feed.limit
    if counted_per_epoch and too_long:
        raise ValueError(
            f"Trainer(val_check_interval={val_check_interval}) is longer than the training epoch "
            f"({feed.limit} batches), so validation would never run: pass val_check_interval <= {feed.limit}, "
            "check_val_every_n_epoch=None to count training batches across epochs, or limit_val_batches=0 "
            "to disable validation"
        )


def _no_training_data() -> None:
    raise RuntimeError("data.fetch ran in a stage without training data; the chart sends only fit here")


def register(reg: Registry) -> None:
    """The data connector's actions.

    ``data.prepare``, ``data.load``, ``data.setup``, ``data.start_epoch``, ``data.reenter``,
    ``data.fetch`` and ``data.teardown``.
    """

    @reg.action("data.prepare", reads=("hardware",))
    def prepare(run: Run, params: Mapping[str, Any]) -> Action:
        """The data module's ``prepare_data()``, then the module's: once per machine (local rank 0), the others wait.

        ``prepare_data_per_node = False`` on the data module: once in all (global rank 0), as in Lightning.
        """

        def act() -> None:
            strategy = run.slot(HardwareSlot).strategy
            dm, module = run.plan.datamodule, run.module
            owners = [dm] if dm is not None and callable(getattr(dm, "prepare_data", None)) else []
            if overrides(module, "prepare_data"):  # then the module's own, as Lightning
                owners.append(module)
            for owner in owners:
                per_node = getattr(owner, "prepare_data_per_node", True)
                if (getattr(strategy, "local_rank", 0) == 0) if per_node else strategy.is_global_zero:
                    owner.prepare_data()
                strategy.barrier()

        return act

    @reg.action("data.load")
    def load(run: Run, params: Mapping[str, Any]) -> Action:
        """The data module's ``setup(stage)`` (its loaders come later: ``data.loaders``)."""

        def act() -> None:
            dm = run.plan.datamodule
            if dm is None:
                return
            if callable(getattr(dm, "setup", None)):
                dm.setup(stage=run.stage)
            assert run.chart is not None
            first = stage_def(run.chart, run.stage).loaders[0]
            if not provides(dm, first):
                raise TypeError(
                    f"Trainer.{run.stage}(datamodule=...) needs {type(dm).__name__}.{LOADER_METHODS[first]}(), which "
                    "it does not implement: add it, or pass the loaders instead"
                )

        return act

    @reg.action("data.loaders")
    def loaders(run: Run, params: Mapping[str, Any]) -> Action:
        """The stage's loaders from the data module's (or the module's own) ``*_dataloader()`` methods.

        After the module's ``setup`` and ``configure_model``, as Lightning. When a sanity check will
        run, ``val_dataloader()`` is called first with the global RNGs put back afterwards (Lightning
        makes it inside the sanity check's isolated RNG), then ``train_dataloader()``.
        """

        def act() -> None:
            source = run.plan.datamodule if run.plan.datamodule is not None else run.module
            if not run.plan.loads_later:
                return
            assert run.chart is not None
            first, *optional = stage_def(run.chart, run.stage).loaders
            keys = [first] if run.plan.datamodule is not None or run.plan.loaders.get(first) is None else []
            wanted = "val" in optional and run.plan.loaders.get("val") is None and provides(source, "val")
            if wanted and _needs_step(run.module, "validation_step"):  # Lightning skips val without validation_step
                keys.append("val")
            cfg = run.config
            sanity = "val" in keys and cfg.sanity_steps != 0 and cfg.limit("val") != 0
            for key in sorted(keys, key=lambda k: k != "val") if sanity else keys:
                saved = get_rng_states() if sanity and key == "val" else None
                made = getattr(source, LOADER_METHODS[key])()
                if saved is not None:
                    set_rng_states(saved)
                if key != first and (made is None or (isinstance(made, list | tuple) and not made)):
                    continue
                for name, loader in split_loaders(key, made).items():
                    feed = run.feeds[name] = Feed(loader)
                    feed.from_method, feed.epoch = True, run.counters.epoch

        return act

    @reg.action("data.teardown")
    def teardown(run: Run, params: Mapping[str, Any]) -> Action:
        """Drop the last batch, its outputs and the loaders' iterators; the data module's ``teardown``.

        (``on_exception`` after a failure.) The last loss's graph carries the strategy's backward hooks
        (FSDP's hold the sharded module), and a cycle through a graph is one the garbage collector
        cannot see: kept, it would keep the stage's module, optimizer and process group alive to the
        end of the process. An iterator with worker processes (``num_workers > 0``) is released here,
        where its workers stop at once, not left to a later garbage collection, which waited up to
        5 s for each one's workers to exit.
        """

        def act() -> None:
            step = run.step
            step.batch = step.outputs = step.loss = None
            for feed in run.feeds.values():
                feed.last_outputs = None
                it, feed.it = feed.it, None
                shutdown = getattr(it, "_shutdown_workers", None)  # torch's multi-process iterator
                if callable(shutdown):
                    shutdown()
            dm = run.plan.datamodule
            if dm is None or not run.stage:
                return
            if run.error is not None:
                if callable(getattr(dm, "on_exception", None)):
                    dm.on_exception(run.error)
            elif callable(getattr(dm, "teardown", None)):
                dm.teardown(stage=run.stage)

        return act

    @reg.action("data.setup", writes=("data",))
    def setup(run: Run, params: Mapping[str, Any]) -> Action:
        """Make every loader resumable and sharded across ranks; count the batches each loop takes (fills ``data``)."""

        def act() -> list[Update]:
            for key, feed in run.feeds.items():
                prepare_feed(run, key, feed)
            cfg = run.config
            if any(getattr(c, "wants_batch_indices", False) for c in run.callbacks):  # a prediction writer
                for key, feed in run.feeds.items():
                    if key.split("#")[0] == "predict":
                        feed.data.keep_indices()
            train = run.feeds.get("train")
            if run.stage == "fit" and train is not None:
                check_training_data(train, cfg)
            return [
                Fill(DataSlot(run.feeds)),
                SetStageFacts(limits={key: feed.limit for key, feed in run.feeds.items()}),
            ]

        return act

    @reg.action("data.start_epoch")
    def start_epoch(run: Run, params: Mapping[str, Any]) -> Action:
        """Open the training data for a new epoch (the sampler draws this epoch's order).

        With ``plan.train_opened`` the fit's first opening draws no base seed from the global RNG: Lightning's
        learning-rate sweep opened that iterator in its isolated RNG (a loader's own generator still draws).
        """
        counters = run.counters
        opened = [run.plan.train_opened]

        def act() -> Update:
            feed = run.feeds["train"]
            feed.data.set_epoch(counters.epoch)
            if opened[0]:
                opened[0], kept = False, torch.get_rng_state()
                feed.it = feed.data.iterate(0)
                torch.set_rng_state(kept)
            else:
                feed.it = feed.data.iterate(0)
            feed.last_outputs = None
            return SetDataPosition({}, replace=True)

        return act

    @reg.action("data.skip_training")
    def skip_training(run: Run, params: Mapping[str, Any]) -> Action:
        """The fit trains nothing: draw the base seed the training loader's iterator draws when it opens.

        Lightning's fit loop opens the training iterator before it finds nothing to train (unless
        ``limit_train_batches=0``), so the global RNG after such a fit is one draw further on; this
        is that draw, without reading a batch.
        """

        def act() -> None:
            feed = run.feeds.get("train")
            if feed is not None and feed.limit != 0:
                draw_base_seeds(feed)

        return act

    @reg.action("data.reenter")
    def reenter(run: Run, params: Mapping[str, Any]) -> Action:
        """On resume: re-open the epoch's training data at the saved position (no-op when it is open)."""
        counters = run.counters

        def act() -> Update | None:
            feed = run.feeds["train"]
            if feed.it is not None:
                return None
            data = run.state.data
            feed.data.set_epoch(counters.epoch)
            feed.last_outputs = data.get("last_train")
            if data.get("exhausted") or (feed.limit is not None and counters.batch_idx >= feed.limit):
                feed.it = iter(())  # nothing left to read: leave the loader's own state alone
            else:
                feed.it = feed.data.iterate(
                    counters.batch_idx,
                    data.get("seed"),
                    data.get("dataset"),
                    data.get("skip", 0),
                    data.get("generator_epoch"),
                )
            drop = ("dataset", "last_train", "datamodule", "skip", "generator")
            return SetDataPosition({k: v for k, v in data.items() if k not in drop}, replace=True)

        return act

    @reg.action("data.fetch", reads=("data", "device", "dist"))
    def fetch(run: Run, params: Mapping[str, Any]) -> Action:
        """Take the next training batch (moved to the device); note when the epoch's data ran out."""
        step, counters = run.step, run.counters
        feed = run.slot(DataSlot).feeds.get("train")
        if feed is None:  # a stage without training data
            return _no_training_data
        prepare, dist = run.slot(DeviceSlot).prepare_batch, run.slot(DistSlot).dist
        reloads = run.config.reload_dataloaders_every_n_epochs > 0

        def act() -> Update | None:
            try:
                batch = next(feed.it)
            except StopIteration:
                if counters.batch_idx == 0 and feed.limit != 0:  # an empty epoch would repeat forever
                    raise RuntimeError(
                        f"the training loader yielded no batches in epoch {counters.epoch}"
                        f"{_describe(feed.data.loader)}: fit stops rather than run empty epochs; check that the "
                        "loader (an IterableDataset?) yields batches in every epoch"
                    ) from None
                return SetDataPosition({"exhausted": True})
            step.batch = batch if prepare is None else prepare(batch)
            step.index = counters.batch_idx
            if step.logged:
                step.logged.clear()  # the loggers' step values are the batch's own
            if counters.batch_idx == 0:  # the epoch's order is known now; the layout turns batches into samples
                world = dist.world_size if dist is not None else 1
                batch_size = getattr(feed.loader, "batch_size", None)
                position = {
                    "seed": feed.data.seed,
                    "epoch": counters.epoch,
                    "world_size": world,
                    "batch_size": batch_size,
                }
                drawn = feed.data.generator_epoch
                if drawn is not None:
                    position["generator_epoch"] = drawn
                if reloads:  # the epoch its loader was asked for at (a resume into another one warns)
                    position["loader_epoch"] = feed.epoch
                return SetDataPosition(position)
            return None

        return act

    @reg.action("data.skip_rest")
    def skip_rest(run: Run, params: Mapping[str, Any]) -> Action:
        """The rest of the epoch's training data is skipped (``on_train_batch_start`` returned -1): it is over."""
        return lambda: SetDataPosition({"exhausted": True, "skipped": True})

    @reg.guard("data.fetched")
    def fetched(params: Mapping[str, Any]) -> Guard:
        """A batch was fetched (the epoch's data did not run out: ``state.data`` says so)."""

        def fetched_(facts: Facts) -> bool:
            return not facts.state.data.get("exhausted", False)

        return fetched_
