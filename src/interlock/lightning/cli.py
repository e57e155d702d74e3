"""Lightning's ``LightningCLI``: build the model, data and Trainer from the command line or a config, then run.

The same jsonargparse layout as Lightning's (``--config``, ``--seed_everything``, ``--model.*``,
``--data.*``, ``--trainer.*``; subcommands ``fit``/``validate``/``test``/``predict`` with
``run=True``), and the same attributes after it: ``cli.model``, ``cli.datamodule``,
``cli.trainer``, ``cli.config``. The trainer's flags are interlock's (Lightning's names), read
from the Trainer's signature as ``interlock``'s own CLI does (src/interlock/cli/config.py).
The parsed config is written to ``<run dir>/config.yaml`` when a stage starts, as Lightning's
``SaveConfigCallback`` does.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import MethodType
from typing import Any, cast

import torch
from jsonargparse import ActionConfigFile, ArgumentParser, Namespace

from interlock.core.datamodule import DataModule
from interlock.core.events import Event, Handler, Listener
from interlock.core.module import Module, overrides
from interlock.core.state import TrainerState
from interlock.lightning._refuse import refuse_value
from interlock.lightning.trainer import Trainer
from interlock.lightning.utilities.seed import seed_everything

__all__ = [
    "LRSchedulerTypeTuple", "LightningArgumentParser", "LightningCLI", "ReduceLROnPlateau", "SaveConfigCallback",
    "instantiate_class", "instantiate_module",
]  # fmt: skip

#: What ``--lr_scheduler`` accepts (Lightning's ``LRSchedulerTypeTuple``).
LRSchedulerTypeTuple = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
LRSchedulerType = type[torch.optim.lr_scheduler.LRScheduler] | type[torch.optim.lr_scheduler.ReduceLROnPlateau]


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """torch's ``ReduceLROnPlateau`` with the metric it watches (``monitor``), as Lightning's CLI has it."""

    def __init__(self, optimizer: torch.optim.Optimizer, monitor: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(optimizer, *args, **kwargs)
        self.monitor = monitor


class LightningArgumentParser(ArgumentParser):
    """jsonargparse's parser with Lightning's ``add_optimizer_args`` / ``add_lr_scheduler_args``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._optimizers: dict[str, tuple[Any, str]] = {}
        self._lr_schedulers: dict[str, tuple[Any, str]] = {}

    def add_optimizer_args(
        self,
        optimizer_class: type[torch.optim.Optimizer] | tuple[type[torch.optim.Optimizer], ...] = (
            torch.optim.Optimizer,
        ),
        nested_key: str = "optimizer",
        link_to: str = "AUTOMATIC",
    ) -> None:
        """Options for an optimizer's arguments under ``nested_key`` (a tuple: any subclass, by ``class_path``)."""
        self._add_group(optimizer_class, nested_key, "params")
        self._optimizers[nested_key] = (optimizer_class, link_to)

    def add_lr_scheduler_args(
        self,
        lr_scheduler_class: LRSchedulerType | tuple[LRSchedulerType, ...] = LRSchedulerTypeTuple,
        nested_key: str = "lr_scheduler",
        link_to: str = "AUTOMATIC",
    ) -> None:
        """Options for a learning-rate scheduler's arguments under ``nested_key``."""
        self._add_group(lr_scheduler_class, nested_key, "optimizer")
        self._lr_schedulers[nested_key] = (lr_scheduler_class, link_to)

    def _add_group(self, cls: type | tuple[type, ...], key: str, skip: str) -> None:
        options: dict[str, Any] = {"instantiate": False, "fail_untyped": False, "skip": {skip}}
        if isinstance(cls, tuple):
            self.add_subclass_arguments(cls, key, **options)
        else:
            self.add_class_arguments(cls, key, sub_configs=True, **options)


#: Per subcommand, the Trainer method's arguments the CLI takes (besides the model and data it builds).
_SUBCOMMANDS: Mapping[str, tuple[str, ...]] = {
    "fit": ("ckpt_path",),
    "validate": ("ckpt_path",),
    "test": ("ckpt_path",),
    "predict": ("ckpt_path",),
}


class SaveConfigCallback(Listener):
    """Write the parsed config to ``<run dir>/<config_filename>`` when the first stage starts (on rank 0)."""

    def __init__(
        self,
        parser: ArgumentParser,
        config: Namespace,
        config_filename: str = "config.yaml",
        overwrite: bool = False,
        multifile: bool = False,
        save_to_log_dir: bool = True,
    ) -> None:
        refuse_value("SaveConfigCallback", "multifile", multifile, (False,), "one config.yaml is written")
        refuse_value(
            "SaveConfigCallback", "save_to_log_dir", save_to_log_dir, (True,), "pass save_config_callback=None"
        )
        self.parser, self.config = parser, config
        self.config_filename, self.overwrite = config_filename, overwrite
        self.saved = False

    def subscriptions(self) -> Iterator[tuple[str, Handler, int | None, bool | int]]:
        for stage in _SUBCOMMANDS:
            yield f"{stage}.start", self.on_stage_start, None, False

    def on_stage_start(self, event: Event, state: TrainerState) -> None:
        if self.saved or not state.is_global_zero or not state.run_dir:
            return
        path = Path(state.run_dir) / self.config_filename
        if path.exists() and not self.overwrite:
            raise RuntimeError(
                f"SaveConfigCallback: {path} exists; pass save_config_kwargs={{'overwrite': True}} to replace it"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        self.parser.save(self.config, path, overwrite=True, multifile=False)
        self.saved = True

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "parser": None}


class LightningCLI:
    """Lightning's ``LightningCLI(model_class, datamodule_class, ..., args=None, run=True)`` building interlock's.

    Args:
        model_class: The module class (or a base class with ``subclass_mode_model=True``; ``None``: any module).
        datamodule_class: The data module class (``None``: any, optional; the module's own loaders then).
        save_config_callback: ``SaveConfigCallback`` (the default) or ``None`` to write no config file.
        save_config_kwargs: ``config_filename``, ``overwrite`` for the config file.
        trainer_class: The Trainer class (``interlock.lightning.Trainer``).
        trainer_defaults: Default Trainer flags; ``"callbacks"`` are added to the configured ones.
        seed_everything_default: The seed, ``True`` (a random one, recorded) or ``False`` (no seeding).
        parser_kwargs: Keyword arguments of the parser (per subcommand under its name, as Lightning).
        subclass_mode_model: Accept any subclass of ``model_class`` (``class_path``/``init_args``).
        subclass_mode_data: Accept any subclass of ``datamodule_class``.
        args: The arguments: a list of strings, a dict or a ``Namespace`` (``None``: ``sys.argv[1:]``).
        run: ``True``: parse a subcommand and run it; ``False``: only build ``cli.model``, ``cli.trainer``, ...
        auto_configure_optimizers: Add ``--optimizer`` and ``--lr_scheduler`` (any torch optimizer and scheduler,
            by name or ``class_path``); when an optimizer is given, it replaces the module's
            ``configure_optimizers`` (a warning says so when the module has one), as in Lightning. A scheduler
            given without an optimizer is an error (Lightning ignores it).
    """

    def __init__(
        self,
        model_class: type[Module] | Callable[..., Module] | None = None,
        datamodule_class: type[Any] | Callable[..., Any] | None = None,
        save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type[Trainer] | Callable[..., Trainer] = Trainer,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int = True,
        parser_kwargs: dict[str, Any] | None = None,
        parser_class: type[ArgumentParser] = LightningArgumentParser,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: Sequence[str] | Mapping[str, Any] | Namespace | None = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
    ) -> None:
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = dict(save_config_kwargs or {})
        self.trainer_class = trainer_class
        self.trainer_defaults = dict(trainer_defaults or {})
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = dict(parser_kwargs or {})
        self.parser_class = parser_class
        self.auto_configure_optimizers = auto_configure_optimizers
        self.model_class = model_class
        self.datamodule_class = datamodule_class
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data
        self.load_from_checkpoint_support = load_from_checkpoint_support

        main_kwargs = {k: v for k, v in self.parser_kwargs.items() if k not in _SUBCOMMANDS}
        self.parser = self._main_parser(run, main_kwargs)
        self.config = self._parse(args)
        self.subcommand: str | None = self.config["subcommand"] if run else None
        self._set_seed()
        self.before_instantiate_classes()
        self.instantiate_classes()
        self.after_instantiate_classes()
        if self.subcommand is not None:
            self._run_subcommand(self.subcommand)

    # -- the parser --------------------------------------------------------------------------------
    def init_parser(self, **kwargs: Any) -> ArgumentParser:
        parser = self.parser_class(**kwargs)
        parser.add_argument(
            "-c", "--config", action=ActionConfigFile, help="Path to a configuration file in json or yaml format."
        )
        return parser

    def _main_parser(self, run: bool, kwargs: Mapping[str, Any]) -> ArgumentParser:
        parser = self.init_parser(**kwargs)
        self._subcommand_parsers: dict[str, ArgumentParser] = {}
        if not run:
            self._add_arguments(parser)
            return parser
        commands = parser.add_subcommands()
        for name, method_args in _SUBCOMMANDS.items():
            sub = self.init_parser(**self.parser_kwargs.get(name, {}))
            self._add_arguments(sub)
            for arg in method_args:
                sub.add_argument(f"--{arg}", type=str | None, default=None, help=f"Trainer.{name}(..., {arg}=...)")
            self._subcommand_parsers[name] = sub
            commands.add_subcommand(name, sub, help=f"Runs trainer.{name}(model, datamodule=...)")
        return parser

    def add_default_arguments_to_parser(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--seed_everything",
            type=bool | int,
            default=self.seed_everything_default,
            help="An int: seed_everything(it) before the classes are made; True: a random seed; False: none.",
        )

    def add_core_arguments_to_parser(self, parser: ArgumentParser) -> None:
        parser.add_class_arguments(self.trainer_class, "trainer", instantiate=False, fail_untyped=False)
        parser.set_defaults({f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"})
        model: Any = self.model_class or Module
        if self.subclass_mode_model:
            parser.add_subclass_arguments(model, "model", fail_untyped=False, required=True)
        else:
            parser.add_class_arguments(model, "model", fail_untyped=False, sub_configs=True)
        if self.datamodule_class is not None and not self.subclass_mode_data:
            parser.add_class_arguments(self.datamodule_class, "data", fail_untyped=False, sub_configs=True)
        else:
            data: Any = self.datamodule_class or DataModule
            parser.add_subclass_arguments(data, "data", fail_untyped=False, required=self.datamodule_class is not None)

    def add_arguments_to_parser(self, parser: ArgumentParser) -> None:
        """Override to add arguments or links, as in Lightning."""

    def _add_arguments(self, parser: ArgumentParser) -> None:
        self.add_default_arguments_to_parser(parser)
        self.add_core_arguments_to_parser(parser)
        self.add_arguments_to_parser(parser)
        if self.auto_configure_optimizers and isinstance(parser, LightningArgumentParser):
            if not parser._optimizers:
                parser.add_optimizer_args()
            if not parser._lr_schedulers:
                parser.add_lr_scheduler_args()
        self.link_optimizers_and_lr_schedulers(parser)

    @staticmethod
    def link_optimizers_and_lr_schedulers(parser: ArgumentParser) -> None:
        """Link each optimizer or scheduler group that names a ``link_to`` key to it (``class_path``, ``init_args``)."""
        groups = {**getattr(parser, "_optimizers", {}), **getattr(parser, "_lr_schedulers", {})}
        for key, (cls, link_to) in groups.items():
            if link_to == "AUTOMATIC":
                continue
            if isinstance(cls, tuple):
                parser.link_arguments(key, link_to)
            else:
                path = f"{cls.__module__}.{cls.__qualname__}"
                parser.link_arguments(key, link_to, compute_fn=partial(_with_class_path, path))

    @staticmethod
    def configure_optimizers(
        lightning_module: Module, optimizer: torch.optim.Optimizer, lr_scheduler: Any = None
    ) -> Any:
        """What the module's ``configure_optimizers`` returns when ``--optimizer`` replaced it (Lightning's)."""
        if lr_scheduler is None:
            return optimizer
        if isinstance(lr_scheduler, ReduceLROnPlateau):
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": lr_scheduler, "monitor": lr_scheduler.monitor},
            }
        return [optimizer], [lr_scheduler]

    def _add_configure_optimizers_method_to_model(self) -> None:
        """Replace the module's ``configure_optimizers`` with the ``--optimizer`` / ``--lr_scheduler`` given."""
        parser = self._subcommand_parsers.get(self.subcommand or "", self.parser)
        if not self.auto_configure_optimizers or not isinstance(parser, LightningArgumentParser):
            return
        optimizers = [k for k, (_, link) in parser._optimizers.items() if link == "AUTOMATIC"]
        schedulers = [k for k, (_, link) in parser._lr_schedulers.items() if link == "AUTOMATIC"]
        if not optimizers:
            return
        if len(optimizers) > 1 or len(schedulers) > 1:
            raise ValueError(
                f"{type(self).__name__}: at most one optimizer and one lr_scheduler group can be 'AUTOMATIC', found "
                f"{optimizers + schedulers}; link the others (link_to=...) and write configure_optimizers"
            )
        init = self._sub(self.config_init)
        optimizer_init = _class_and_args(parser._optimizers[optimizers[0]][0], init.get(optimizers[0]))
        scheduler_init = (
            _class_and_args(parser._lr_schedulers[schedulers[0]][0], init.get(schedulers[0])) if (schedulers) else None
        )
        if optimizer_init is None:
            if scheduler_init is not None:
                raise ValueError(
                    f"--{schedulers[0]} {scheduler_init[0].__name__} was given without --{optimizers[0]}: a scheduler "
                    f"needs the optimizer it schedules; pass --{optimizers[0]} (e.g. --{optimizers[0]}=SGD "
                    f"--{optimizers[0]}.lr=0.1), or build both in configure_optimizers"
                )
            return
        if overrides(self.model, "configure_optimizers"):
            warnings.warn(
                f"`{type(self.model).__name__}.configure_optimizers` will be overridden by "
                f"`{type(self).__name__}.configure_optimizers`.",
                stacklevel=2,
            )
        optimizer_cls, optimizer_args = optimizer_init
        optimizer = optimizer_cls(self.model.parameters(), **optimizer_args)
        scheduler = scheduler_init[0](optimizer, **scheduler_init[1]) if scheduler_init is not None else None
        chosen = partial(self.configure_optimizers, optimizer=optimizer, lr_scheduler=scheduler)
        self.model.configure_optimizers = MethodType(chosen, self.model)  # type: ignore[method-assign]

    def _parse(self, args: Sequence[str] | Mapping[str, Any] | Namespace | None) -> Namespace:
        if isinstance(args, str):
            raise TypeError(f"LightningCLI(args={args!r}): pass a list of strings (args.split()), a dict or None")
        if isinstance(args, Namespace):
            parsed = self.parser.parse_object(args.as_dict())
        elif isinstance(args, Mapping):
            parsed = self.parser.parse_object(dict(args))
        else:
            parsed = self.parser.parse_args(sys.argv[1:] if args is None else list(args))
        return cast(Namespace, parsed)

    def _sub(self, config: Namespace) -> Namespace:
        return config[self.subcommand] if self.subcommand is not None else config

    def _set_seed(self) -> None:
        sub = self._sub(self.config)
        seed = sub.get("seed_everything")
        if seed is False:
            return
        sub["seed_everything"] = seed_everything(None if seed is True else seed, workers=True)

    # -- building and running ---------------------------------------------------------------------
    def before_instantiate_classes(self) -> None:
        """Override to run code before the classes are made."""

    def after_instantiate_classes(self) -> None:
        """Override to run code after the classes are made."""

    def instantiate_classes(self) -> None:
        """Build ``self.model``, ``self.datamodule`` and ``self.trainer`` from the config."""
        parser = self._subcommand_parsers.get(self.subcommand or "", self.parser)
        self.config_init = self.parser.instantiate(self.config)
        init = self._sub(self.config_init)
        self.model: Module = init.get("model")
        self.datamodule: Any = init.get("data")
        self._add_configure_optimizers_method_to_model()
        self.trainer = self.instantiate_trainer(parser)

    def instantiate_trainer(self, parser: ArgumentParser | None = None, **kwargs: Any) -> Trainer:
        flags = self._sub(self.config_init).get("trainer", Namespace())
        config = {**(flags.as_dict() if isinstance(flags, Namespace) else dict(flags)), **kwargs}
        callbacks = config.get("callbacks")
        callbacks = [] if callbacks is None else list(callbacks) if isinstance(callbacks, list | tuple) else [callbacks]
        extra = self.trainer_defaults.get("callbacks")
        if extra is not None:
            callbacks += list(extra) if isinstance(extra, list | tuple) else [extra]
        if self.save_config_callback is not None and not config.get("fast_dev_run"):
            callbacks.append(
                self.save_config_callback(parser or self.parser, self._sub(self.config), **self.save_config_kwargs)
            )
        config["callbacks"] = callbacks
        return self.trainer_class(**config)

    def _run_subcommand(self, subcommand: str) -> None:
        before = getattr(self, f"before_{subcommand}", None)
        if callable(before):
            before()
        kwargs = {k: self._sub(self.config_init).get(k) for k in _SUBCOMMANDS[subcommand]}
        if self.datamodule is not None:
            kwargs["datamodule"] = self.datamodule
        getattr(self.trainer, subcommand)(self.model, **kwargs)
        after = getattr(self, f"after_{subcommand}", None)
        if callable(after):
            after()


def instantiate_class(args: Any, init: Mapping[str, Any]) -> Any:
    """``init["class_path"](*args, **init["init_args"])`` (one positional ``args`` may be given bare), as Lightning's.

    The form ``configure_optimizers`` uses with a CLI-given optimizer: ``instantiate_class(self.parameters(), init)``.
    """
    module_name, _, name = str(init["class_path"]).rpartition(".")
    if not module_name:
        raise ValueError(f"instantiate_class: class_path {init['class_path']!r} must be 'package.module.Class'")
    cls = getattr(importlib.import_module(module_name), name)
    return cls(*(args if isinstance(args, tuple) else (args,)), **dict(init.get("init_args", {})))


def instantiate_module(class_type: type, config: Mapping[str, Any]) -> Any:
    """An instance of ``class_type`` from a parsed config: a ``class_path``/``init_args`` mapping or the arguments."""
    given = dict(config)
    if "class_path" in given:
        return instantiate_class((), given)
    return class_type(**given)


def _with_class_path(path: str, init_args: Any) -> dict[str, Any]:
    return {"class_path": path, "init_args": init_args}


def _class_and_args(cls: type | tuple[type, ...], given: Any) -> tuple[type, dict[str, Any]] | None:
    """The class and keyword arguments of an optimizer or scheduler group (``None``: not given)."""
    if given is None:
        return None
    data = given.as_dict() if isinstance(given, Namespace) else dict(given)
    if isinstance(cls, tuple):  # any subclass: class_path and init_args
        if not data.get("class_path"):
            return None
        module, _, name = str(data["class_path"]).rpartition(".")
        return getattr(importlib.import_module(module), name), dict(data.get("init_args") or {})
    return cls, data
