"""What each ``interlock`` subcommand does once its arguments are parsed.

Every command returns the process exit status; :class:`UsageError` (and the
library's own input errors, caught in :mod:`interlock.cli.main`) mean status 2.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import shlex
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jsonargparse import ArgumentParser, Namespace

from interlock.cli.config import LOADERS, _config_parser
from interlock.cli.convert import convert as convert_checkpoint
from interlock.cli.inspect import summarize_checkpoint, to_json
from interlock.connectors.rng import seed_everything
from interlock.connectors.rundir import LOCK_FILE
from interlock.core.chart import Chart, load_chart
from interlock.core.errors import Preempted
from interlock.core.extension import Extension
from interlock.core.registry import Registry
from interlock.listeners.trace import FOLLOWED_FLUSH_SECONDS, EventTrace
from interlock.loops import default_registry
from interlock.trainer.trainer import Trainer
from interlock.viz import read_trace, render

__all__ = [
    "COMMANDS",
    "UsageError",
    "chart",
    "chart_actions",
    "convert",
    "inspect",
    "listeners",
    "lr_find",
    "record_cli_config",
    "replay",
    "run",
    "view",
]

#: The config of a run started by ``interlock fit`` (what ``interlock replay`` builds module and data from).
CLI_CONFIG = "cli.yaml"


class UsageError(Exception):
    """The command cannot run as configured; the message says why (exit status 2)."""


def _import(class_path: str) -> type:
    """The class at the dotted ``class_path`` (already checked by the parser)."""
    parts = class_path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj  # type: ignore[no-any-return]
    raise UsageError(f"cannot import {class_path!r}")


def _build(spec: Namespace | None, key: str) -> Any:
    """Instantiate one ``class_path``/``init_args`` spec, so its own ValueError surfaces unwrapped."""
    if spec is None:
        raise UsageError(f"no {key} is configured; give a {key} section with class_path (and init_args)")
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--obj", type=_import(spec.class_path))
    return parser.instantiate(parser.parse_object({"obj": spec.as_dict()})).obj


def _instantiate(parser: ArgumentParser, cfg: Namespace, sections: Sequence[str]) -> Namespace:
    """Build the chosen subcommand's ``sections`` (of model, data, trainer); bad values are a UsageError."""
    sub = cfg[cfg.command]
    try:
        built = Namespace({key: _build(sub[key], key) for key in ("model", "data") if key in sections})
        if "trainer" in sections:
            only_trainer = cfg.clone()
            for key in ("model", "data"):
                only_trainer[cfg.command].pop(key, None)
            built.trainer = parser.instantiate(only_trainer)[cfg.command].trainer
    except (ValueError, OSError) as exc:  # bad flag values (Trainer, model, data), missing chart files
        raise UsageError(str(exc)) from exc
    return built


def _loader(data: Any, method: str, command: str) -> Any:
    fn = getattr(data, method, None)
    if not callable(fn):
        raise UsageError(
            f"`interlock {command}` needs data.{method}(), but {type(data).__qualname__} has no such method; "
            f"add it or choose another data class"
        )
    return fn()


def _format_metrics(metrics: Mapping[str, Any]) -> str:
    if not metrics:
        return "  (no metrics)"
    width = max(len(k) for k in metrics)
    lines = []
    for key in sorted(metrics):
        value = metrics[key]
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        lines.append(f"  {key:<{width}}  {text}")
    return "\n".join(lines)


def resume_command(argv: Sequence[str]) -> str:
    """``argv`` as an ``interlock`` command line with ``--ckpt_path last`` in place of any ``--ckpt_path``."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--ckpt_path":
            skip = True
        elif not arg.startswith("--ckpt_path="):
            kept.append(arg)
    return shlex.join(["interlock", *kept, "--ckpt_path", "last"])


def _seed(seed: Any) -> None:
    """Seed before anything is built (as LightningCLI does), so ``trainer.seed`` fixes the initial weights too."""
    if seed is None:
        return
    try:
        seed_everything(seed)
    except ValueError as exc:
        raise UsageError(str(exc).replace("seed_everything(seed=", "trainer.seed (", 1)) from None


def run(parser: ArgumentParser, cfg: Namespace, argv: Sequence[str]) -> int:
    """``fit`` / ``validate`` / ``test`` / ``predict``: build from the config, run, print the outcome."""
    command = cfg.command
    _seed(cfg[command].trainer.get("seed"))
    built = _instantiate(parser, cfg, ("model", "data", "trainer"))
    model, data, trainer = built.model, built.data, built.trainer
    need, optional = LOADERS[command]
    loaders = [_loader(data, need, command)]
    if optional is not None:
        loaders.append(_loader(data, optional, command) if callable(getattr(data, optional, None)) else None)
    ckpt_path = cfg[command].ckpt_path
    server = _start_view(trainer, argv) if command == "fit" and cfg.fit.get("view") else None
    if command == "fit":  # a failure names `interlock replay RUN --to N`, which reads the config recorded below
        for listener in trainer.listeners:
            if isinstance(listener, EventTrace):
                listener.replay_cli = True
    started = time.perf_counter()
    try:
        result = getattr(trainer, command)(model, *loaders, ckpt_path=ckpt_path)
    except Preempted as exc:
        try:
            name = signal.Signals(exc.signum).name
        except ValueError:
            name = "signal"
        ckpt = trainer.run_dir / "checkpoints" / "last.ckpt"
        print(
            f"interlock: preempted by {name} ({exc.signum}); a checkpoint was saved to {ckpt}\n"
            f"resume with: {resume_command(argv)}",
            file=sys.stderr,
        )
        return 128 + exc.signum
    except KeyboardInterrupt as exc:
        saved = getattr(exc, "checkpoint", None)  # Interrupted: the first Ctrl-C of a fit saved the run
        if saved:
            print(
                f"interlock: {command} interrupted (Ctrl-C); a checkpoint was saved to {saved}\n"
                f"resume with: {resume_command(argv)}",
                file=sys.stderr,
            )
        else:
            print(f"interlock: {command} interrupted (Ctrl-C); outputs so far in {trainer.run_dir}", file=sys.stderr)
        return 130
    finally:
        if command == "fit":
            record_cli_config(cfg.fit, trainer.state.run_dir)
    seconds = time.perf_counter() - started
    where = Path(trainer.state.run_dir or trainer.run_dir).absolute()  # a resumed run continues in its own
    note = "" if where.exists() else " (no listener wrote anything there)"
    print(f"{command} finished in {seconds:.1f} s; run directory: {where}{note}")
    if where.exists():
        for path in sorted(p for p in where.rglob("*") if p.is_file() and p.name != LOCK_FILE):
            print(f"  {path.relative_to(where)}")
        if (where / "events.jsonl").exists():
            print(f"draw this run on the chart: interlock chart --trace {where} --format svg -o run.svg")
    if command == "predict":
        print(f"predictions: {len(result)} batches")
    else:
        merged = {k: v for part in result for k, v in part.items()} if isinstance(result, list) else result
        print(f"final metrics:\n{_format_metrics(merged)}")
    if server is not None:
        print(f"the view stays at {server.url} until Ctrl-C", flush=True)
        _wait_forever()
    return 0


def record_cli_config(fit_cfg: Namespace, run_dir: str) -> None:
    """Write the fit's config (model, data, trainer) to ``run_dir/cli.yaml``; nothing without a run directory."""
    if not run_dir or not Path(run_dir).is_dir():
        return
    clean = fit_cfg.clone()
    clean.pop("config", None)
    clean.pop("ckpt_path", None)  # a replay starts from the run's own checkpoints
    with contextlib.suppress(OSError):
        (Path(run_dir) / CLI_CONFIG).write_text(
            _config_parser("fit").dump(clean, skip_validation=True), encoding="utf-8"
        )


#: listeners that only write outputs (files, stores, the terminal): a replay leaves them out, it writes nothing
_OUTPUTS = (
    "ModelCheckpoint",
    "CSVLogger",
    "TensorBoardLogger",
    "MLFlowLogger",
    "WandbLogger",
    "DeviceStatsMonitor",
    "ProgressBar",
    "RichProgressBar",
    "EventTrace",
    "ModelSummary",
)


def replay(parser: ArgumentParser, cfg: Namespace, argv: Sequence[str]) -> int:
    """Replay a run started by ``interlock fit`` to ``--to``; print (or ``--json``) where it stopped."""
    from interlock.trainer.replay import replay as replay_run

    opts = cfg.replay
    run_dir = Path(opts.run_dir)
    file = run_dir / CLI_CONFIG
    if not file.is_file():
        raise UsageError(
            f"{file} does not exist: `interlock replay` replays runs started by `interlock fit`, which records its "
            "config there; replay any other run from Python: interlock.replay(RUN, module, train_data, val_data)"
        )
    try:
        fit_cfg = _config_parser("fit").parse_args(["--config", str(file)])
    except SystemExit:  # already reported by the parser
        raise UsageError(f"{file} is not a config `interlock fit` reads") from None
    _seed(fit_cfg.trainer.get("seed"))  # as the fit did: the module's initial weights too
    model, data = _build(fit_cfg.model, "model"), _build(fit_cfg.data, "data")
    specs = [*(fit_cfg.trainer.get("listeners") or []), *(fit_cfg.trainer.get("callbacks") or [])]
    listeners = [x for x in (_build(s, "listener") for s in specs) if type(x).__name__ not in _OUTPUTS]
    train = _loader(data, "train_dataloader", "replay")
    val = data.val_dataloader() if callable(getattr(data, "val_dataloader", None)) else None
    try:
        rep = replay_run(run_dir, model, train, val, to=opts.to, listeners=listeners)
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    with rep:
        saved = str(rep.save(opts.save)) if opts.save else None
        state = rep.state
        out = {
            "run_dir": str(run_dir),
            "transition": rep.number,
            "state": state.chart,
            "event": None if rep.event is None else rep.event.describe(),
            "epoch": state.epoch,
            "global_step": state.global_step,
            "batch_idx": state.batch_idx,
            "started_at": rep.started_at,
            "checkpoint": None if rep.checkpoint is None else str(rep.checkpoint),
            "error": None if rep.error is None else f"{type(rep.error).__name__}: {rep.error}",
            "saved": saved,
            "saved_from": rep.saved_from,
        }
        if opts.json:
            print(json.dumps(out, indent=1))
        else:
            start = f"{rep.checkpoint} (global step {rep.started_at})" if rep.checkpoint else "the start"
            print(
                f"replayed {run_dir} from {start} to transition {rep.number}: state {state.chart}, epoch "
                f"{state.epoch}, global step {state.global_step}, batch {state.batch_idx}"
            )
            if rep.error is not None:
                print(f"the run's failure, reproduced: {out['error']}")
            if saved and rep.saved_from != rep.number:
                print(
                    f"saved: {saved}, the checkpoint state of transition {rep.saved_from} and the transitions from "
                    f"there to {rep.number}, which a resume re-executes, checked (resume with --ckpt_path {saved})"
                )
            elif saved:
                print(f"saved: {saved} (resume with --ckpt_path {saved})")
        if opts.pdb:
            _debug(rep.module, rep.batch, state, rep.error, rep)
    return 0


def _debug(module: Any, batch: Any, state: Any, error: Any, replay: Any) -> None:
    """Stop in pdb here: ``module``, ``batch``, ``state``, ``error`` and ``replay`` are this frame's locals."""
    import pdb

    print("pdb: module, batch, state, error and replay are in scope; `c` to leave", flush=True)
    pdb.Pdb().set_trace()
    _ = (module, batch, state, error, replay)  # the line pdb stops on, in this frame


def _view_module() -> Any:
    """``interlock.view``, imported only when asked for: its web libraries are an optional extra."""
    try:
        return importlib.import_module("interlock.view")
    except ImportError as exc:
        raise UsageError(f"the view needs its extra: pip install 'interlock[view]' ({exc})") from None


def _start_view(trainer: Trainer, argv: Sequence[str]) -> Any:
    """Serve the view of the run about to start, on a thread; print its URL."""
    run_dir = Path(trainer.run_dir).absolute()
    run_dir.parent.mkdir(parents=True, exist_ok=True)  # the run's own folder is made by the run
    server = _view_module().ViewServer(run_dir.parent, run=run_dir.name, argv=argv).start()
    for listener in trainer.listeners:  # a followed run writes its trace often, so the page moves within an epoch
        if isinstance(listener, EventTrace) and (listener.flush_seconds or math.inf) > FOLLOWED_FLUSH_SECONDS:
            listener.flush_seconds = FOLLOWED_FLUSH_SECONDS
    print(f"interlock view: {server.url}", flush=True)
    return server


def _wait_forever() -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def view(parser: ArgumentParser, cfg: Namespace, argv: Sequence[str]) -> int:
    """Serve the view of the runs under (or the run at) ``path`` until Ctrl-C."""
    opts = cfg.view
    path = Path(opts.path)
    if not path.is_dir():
        raise UsageError(f"{opts.path!r} is not a directory; pass a run directory or a root of runs")
    module = _view_module()
    root, run = module.server.split_target(path)
    try:
        server = module.ViewServer(
            root, run=run, host=opts.host, port=opts.port, token=opts.token, allow_remote=opts.remote
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot listen on {opts.host}:{opts.port}: {exc.strerror or exc}") from None
    print(f"interlock view of {root.absolute()}: {server.url}  (Ctrl-C to stop)", flush=True)
    if opts.open:
        import webbrowser

        webbrowser.open(server.url)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


def chart_uses(the_chart: Chart) -> dict[tuple[str, str], list[str]]:
    """Where the chart uses each action and guard: ``{("action", name): ["entry of fit.start", ...]}``."""
    uses: dict[tuple[str, str], list[str]] = {}
    for path, spec in the_chart.states.items():
        for where, names in (("entry", spec.entry), ("entry_once", spec.entry_once), ("exit", spec.exit)):
            for name in names:
                uses.setdefault(("action", name), []).append(f"{where} of {path}")
        for t in spec.always:
            edge = f"{path} -[{t.trigger}]-> {t.target}"
            for name in t.do:
                uses.setdefault(("action", name), []).append(f"do on {edge}")
            if t.guard is not None:
                uses.setdefault(("guard", t.guard), []).append(f"guard of {edge}")
    return uses


def chart_actions(the_chart: Chart, registry: Registry | None = None) -> str:
    """Every registered action and guard: owner, one-line doc, the slots it reads and writes, where the chart uses it.

    ``*`` marks the chart's. ``registry`` is the built-in one by default (with extensions: the trainer's).
    Names the chart uses that nothing registered are listed last: a run of that chart would refuse to start.
    """
    reg = registry if registry is not None else default_registry()
    rows = list(reg.describe())
    uses = chart_uses(the_chart)
    used = {"action": the_chart.actions(), "guard": the_chart.guards()}
    width = max((len(name) for _, name, _, _ in rows), default=0)
    owner_width = max((len(owner) for _, _, owner, _ in rows), default=0)
    lines: list[str] = []
    for kind in ("action", "guard"):
        mine = [row for row in rows if row[0] == kind]
        n_used = sum(1 for row in mine if row[1] in used[kind])
        lines.append(f"{kind}s: {len(mine)} registered, * = used by {the_chart.source} ({n_used})")
        for _, name, owner, summary in mine:
            mark = "*" if name in used[kind] else " "
            doc = summary.strip().splitlines()[0] if summary.strip() else "(no doc)"
            lines.append(f"  {mark} {name:<{width}}  {owner:<{owner_width}}  {doc}")
            entry = (reg.actions if kind == "action" else reg.guards)[name]
            if entry.reads or entry.writes:
                slots = [f"reads: {', '.join(entry.reads)}"] if entry.reads else []
                slots += [f"writes: {', '.join(entry.writes)}"] if entry.writes else []
                lines.append(f"        {'  '.join(slots)}")
            if (kind, name) in uses:
                lines.append(f"        used: {'; '.join(uses[(kind, name)])}")
    for kind in ("action", "guard"):
        missing = sorted(used[kind] - {name for k, name, _, _ in rows if k == kind})
        if missing:
            lines.append(f"{kind}s used by {the_chart.source} that nothing registered: {', '.join(missing)}")
    return "\n".join(lines) + "\n"


def load_extensions(spec: str | None) -> list[Extension]:
    """The extensions ``--extension pkg.module:name[,pkg.other:name]`` names (an Extension or a list of them each)."""
    out: list[Extension] = []
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        module_name, _, attr = item.strip().partition(":")
        if not attr:
            raise UsageError(f"--extension {item!r}: write MODULE:NAME, e.g. my_project.ema:extension")
        try:
            value = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"--extension {item!r}: {exc}") from None
        items = value if isinstance(value, list | tuple) else [value]
        bad = [v for v in items if not isinstance(v, Extension)]
        if bad:
            raise UsageError(f"--extension {item!r} is {bad[0]!r}, not an interlock.Extension")
        out.extend(items)
    return out


def chart(parser: ArgumentParser, cfg: Namespace, argv: Sequence[str]) -> int:
    """Render the (built-in or ``--chart``) statechart, with ``--trace`` overlaid, to stdout or ``-o``.

    With ``--actions``, list the actions and guards it can use instead (:func:`chart_actions`).
    """
    opts = cfg.chart
    try:
        the_chart = load_chart(opts.chart)
    except OSError as exc:
        raise UsageError(f"cannot read chart {opts.chart}: {exc.strerror or exc}") from None
    out: str | bytes
    if opts.get("actions"):
        registry = default_registry()
        for ext in load_extensions(opts.get("extension")):
            try:
                registry.extend(ext)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        out = chart_actions(the_chart, registry)
    else:
        trace = read_trace(opts.trace, the_chart) if opts.trace else None
        try:
            out = render(the_chart, opts.format, trace, region=opts.get("region"), depth=opts.get("depth"))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if opts.output:
        target = Path(opts.output)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(out, bytes):
            target.write_bytes(out)
        else:
            target.write_text(out, encoding="utf-8")
        print(f"wrote {'the actions' if opts.get('actions') else opts.format} to {target}", file=sys.stderr)
    elif isinstance(out, bytes):
        if sys.stdout.isatty():
            raise UsageError(f"--format {opts.format} is not for a terminal; pass -o FILE or redirect stdout")
        sys.stdout.flush()
        sys.stdout.buffer.write(out)
        sys.stdout.buffer.flush()
    else:
        sys.stdout.write(out)
    return 0


def convert(parser: ArgumentParser, cfg: Namespace, argv: Sequence[str]) -> int:
    """Write the checkpoint SRC to DST in the ``--to`` format (:data:`~interlock.cli.convert.CONVERTERS`)."""
    opts = cfg.convert
    try:
        summary = convert_checkpoint(opts.src, opts.dst, opts.to)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {opts.dst}: {exc.strerror or exc}") from None
    print(f"wrote {opts.to} of {opts.src} to {opts.dst}: {summary}")
    return 0


def inspect(parser: ArgumentParser, cfg: Namespace, argv: Sequence[str]) -> int:
    """Print the checkpoint's summary as JSON (tensors as ``[shape, dtype]``)."""
    print(to_json(summarize_checkpoint(cfg.inspect.ckpt)))
    return 0


def listeners(parser: ArgumentParser, cfg: Namespace, argv: Sequence[str]) -> int:
    """Build only the Trainer; print its listeners in order and each event's handlers in delivery order."""
    trainer: Trainer = _instantiate(parser, cfg, ("trainer",)).trainer
    given = cfg.listeners.trainer.listeners
    origin = "the Trainer's defaults" if not given else "the Trainer's defaults and trainer.listeners"
    if not trainer.listeners:
        print(f"no listeners ({origin}): no handlers run for any event")
        return 0
    print(f"{len(trainer.listeners)} listeners ({origin}), in the order they handle an event:")
    key_width = max(len(listener.key) for listener in trainer.listeners)
    for i, listener in enumerate(trainer.listeners, 1):
        cls = type(listener)
        after = f"  (after {', '.join(listener.after)})" if listener.after else ""
        print(f"  {i}. {listener.key:<{key_width}}  {cls.__module__}.{cls.__qualname__}{after}")
    observers = trainer.bus.observer_sources()
    if observers:
        print(f"observers of every transition (called first, with plain values): {', '.join(observers)}")
    print("events and their handlers, in delivery order:")
    subscribed = trainer.subscribers()
    width = max((len(event) for event, _ in subscribed), default=0)
    for event, _sources in subscribed:
        handlers = []
        for sub in trainer.bus.handlers(event):
            label = f"{sub.source}.{getattr(sub.handler, '__name__', 'handler')}"
            if sub.every is not None:
                label += f" [every {sub.every}]"
            if sub.once is not None:
                label += f" [once, #{sub.once}]"
            handlers.append(label)
        print(f"  {event:<{width}}  {' -> '.join(handlers)}")
    if not subscribed:
        print("  (none: the listeners declare no handlers)")
    return 0


def lr_find(parser: ArgumentParser, cfg: Namespace, argv: Sequence[str]) -> int:
    """``lr-find``: build from the config, sweep the learning rate, print the suggestion and the plot's path."""
    from interlock.tuner import lr_find as sweep

    sub = cfg["lr-find"]
    _seed(sub.trainer.get("seed"))
    built = _instantiate(parser, cfg, ("model", "data", "trainer"))
    train = _loader(built.data, "train_dataloader", "lr-find")
    has_val = callable(getattr(built.data, "val_dataloader", None))
    val = _loader(built.data, "val_dataloader", "lr-find") if has_val else None
    finder = sweep(
        built.trainer,
        built.model,
        train,
        val,
        min_lr=sub.min_lr,
        max_lr=sub.max_lr,
        num_training=sub.num_training,
        mode=sub.mode,
        early_stop_threshold=sub.early_stop_threshold,
    )
    if finder is None:
        print("lr-find: skipped under fast_dev_run (as in Lightning)")
        return 0
    lr = finder.suggestion()
    print(f"lr-find: {len(finder.results['lr'])} rates tried from {sub.min_lr:g} to {sub.max_lr:g}")
    print(f"suggested learning rate: {lr:.6g}" if lr is not None else "no suggestion: too few points (see above)")
    print(f"plot: {Path(finder.run_dir).absolute() / 'lr_find.svg'}")
    return 0


COMMANDS: dict[str, Callable[[ArgumentParser, Namespace, Sequence[str]], int]] = {
    "fit": run,
    "validate": run,
    "test": run,
    "predict": run,
    "chart": chart,
    "convert": convert,
    "inspect": inspect,
    "listeners": listeners,
    "lr-find": lr_find,
    "view": view,
    "replay": replay,
}
