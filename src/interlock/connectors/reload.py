"""``reload_dataloaders_every_n_epochs``: ask the module or data module for its loaders again, as Lightning.

``data.reload`` runs as a training epoch opens (before ``on_train_epoch_start``) and as a resumed run
re-enters its epoch; ``data.reload_val`` runs as a fit's validation opens. Each asks the source's
``train_dataloader()`` / ``val_dataloader()`` again when the epoch is ``N`` or more past the one its
loaders were asked for (Lightning's rule), and when a resumed run continues an epoch other than that
one, so an epoch-dependent loader (a curriculum) is the one of the epoch it runs. Loaders passed to
``fit`` directly are not asked again (Lightning's reload gives the same objects back). The new loaders are
made resumable and sharded as at set-up, and their batch counts become the stage's limits.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from interlock.connectors.data import (
    Feed,
    check_training_data,
    draw_base_seeds,
    feed_key,
    loader_count,
    prepare_feed,
    split_loaders,
)
from interlock.core.datamodule import LOADER_METHODS
from interlock.core.registry import NOOP, Action, Registry
from interlock.core.run import Run
from interlock.core.updates import SetStageFacts, Update

__all__ = ["register"]


def _due(run: Run, feed: Feed, resumed: bool) -> bool:
    """Whether ``feed`` is reloaded now: ``N`` epochs after it was, or a resume into another epoch."""
    n, epoch = run.config.reload_dataloaders_every_n_epochs, run.counters.epoch
    if not n:
        return False
    return epoch - feed.epoch >= n or (resumed and epoch != feed.epoch)


def _ask(run: Run, key: str) -> Any:
    source = run.plan.datamodule if run.plan.datamodule is not None else run.module
    return getattr(source, LOADER_METHODS[key])()


def _prepare(run: Run, key: str, feed: Feed) -> None:
    prepare_feed(run, key, feed)
    feed.epoch = run.counters.epoch


def register(reg: Registry) -> None:
    """``data.reload`` and ``data.reload_val``."""

    @reg.action("data.reload")
    def reload(run: Run, params: Mapping[str, Any]) -> Action:
        """Ask for the training loader again when it is due (``reload_dataloaders_every_n_epochs``)."""
        if not run.config.reload_dataloaders_every_n_epochs:
            return NOOP

        def act() -> Update | None:
            feed = run.feeds.get("train")
            resumed = feed is not None and feed.it is None  # not open yet in this process: a resumed fit
            if feed is None or not _due(run, feed, resumed):
                return None
            if not feed.from_method:  # passed to fit: Lightning's reload has the same loader, and opens it again
                feed.epoch = run.counters.epoch
                if not resumed:
                    draw_base_seeds(feed)
                return None
            saved = run.state.data.get("loader_epoch")
            if resumed and isinstance(saved, int) and saved != run.counters.epoch:
                warnings.warn(
                    f"resuming in epoch {run.counters.epoch} asks train_dataloader() for that epoch, and the saved run "
                    f"trained it on the loader it asked for in epoch {saved} (reload_dataloaders_every_n_epochs="
                    f"{run.config.reload_dataloaders_every_n_epochs}): a loader that depends on the epoch differs from "
                    "the uninterrupted run's (Lightning asks the same way); resume from a checkpoint of a reload "
                    "epoch, or at an epoch's end, to continue it exactly",
                    stacklevel=2,
                )
            (loader,) = split_loaders("train", _ask(run, "train")).values()
            feed.loader, feed.it, feed.last_outputs = loader, None, None
            _prepare(run, "train", feed)
            check_training_data(feed, run.config)
            if not resumed:  # Lightning opens a reloaded loader's iterator twice (its data set-up, then the epoch's
                draw_base_seeds(feed)  # start): the first one's base-seed draw, so the RNG continues as its does
            return SetStageFacts(limits={**run.state.limits, "train": feed.limit})

        return act

    @reg.action("data.reload_val")
    def reload_val(run: Run, params: Mapping[str, Any]) -> Action:
        """Ask for the validation loaders again when they are due; their number must stay the same."""
        if not run.config.reload_dataloaders_every_n_epochs:
            return NOOP

        def act() -> Update | None:
            first = run.feeds.get("val")
            if first is None or not first.from_method or not _due(run, first, resumed=False):
                return None
            made = split_loaders("val", _ask(run, "val"))
            count = loader_count(run.feeds, "val")
            if len(made) != count:
                raise ValueError(
                    f"val_dataloader() returned {len(made)} loader(s) at epoch {run.counters.epoch}, and the fit "
                    f"started with {count}: with reload_dataloaders_every_n_epochs the number of validation loaders "
                    "must stay the same (their metrics are named by dataloader_idx); return empty loaders instead"
                )
            limits = dict(run.state.limits)
            for i, loader in enumerate(made.values()):
                feed = run.feeds[feed_key("val", i)]
                feed.loader, feed.it = loader, None
                _prepare(run, feed_key("val", i), feed)
                limits[feed_key("val", i)] = feed.limit
            return SetStageFacts(limits=limits)

        return act
