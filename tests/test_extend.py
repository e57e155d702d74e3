"""Extending the lifecycle: a copy of the chart with a user state and a user action runs, renders, traces, resumes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from conftest import TinyModule, loader, only
from interlock import SaveCheckpoint, SetListenerState
from interlock.core.run import Run
from interlock.listeners import EventTrace

BUILTIN = Path(__file__).resolve().parents[1] / "statecharts" / "trainer.yaml"
DECAY = 0.75
STEPPED = "                  - {trigger: stepped, target: end, count: [step, batch]}\n"
WITH_EMA = (
    "                  - {trigger: stepped, target: ema}\n"
    "              ema:\n"
    "                doc: an exponential moving average of the weights after every optimizer step\n"
    "                entry: [ema.update]\n"
    "                always:\n"
    "                  - {trigger: averaged, target: end, count: [step, batch]}\n"
)


def ema_update(run: Run) -> SetListenerState:
    """Fold the weights just stepped into their moving average (kept in the trainer state, so it resumes)."""
    stored = run.facts.listener_state("ema")
    shadow = stored.get("shadow")
    with torch.no_grad():
        new = {
            name: p.detach().clone() if shadow is None else shadow[name] * DECAY + p.detach() * (1 - DECAY)
            for name, p in run.module.named_parameters()
        }
    return SetListenerState("ema", {"shadow": new, "updates": stored.get("updates", 0) + 1})


@pytest.fixture
def ema_chart(tmp_path: Path) -> Path:
    text = BUILTIN.read_text()
    assert text.count(STEPPED) == 1
    path = tmp_path / "ema.yaml"
    path.write_text(text.replace(STEPPED, WITH_EMA))
    return path


def fit(
    root: Path, chart: Path, ckpt: Path | None = None, save_after: int | None = None, val: bool = True
) -> tuple[Any, TinyModule]:
    torch.manual_seed(0)
    module = TinyModule()
    trainer = interlock.Trainer(
        max_epochs=2,
        limit_val_batches=2,
        **only(EventTrace()),
        default_root_dir=root,
        chart=chart,
        actions={"ema.update": ema_update},
    )
    if save_after is not None:
        saved = root / "mid.ckpt"
        trainer.on("fit.train.batch.end", lambda e: SaveCheckpoint(str(saved)), once=save_after)

        def crash(event: interlock.Event) -> None:
            if saved.exists():
                raise KeyboardInterrupt

        trainer.on("fit.train.batch.fetch", crash)
    try:
        trainer.fit(module, loader(64, 8, shuffle=True), loader(32, 8) if val else None, ckpt_path=ckpt)
    except KeyboardInterrupt:
        pass
    return trainer, module


def plain_ema(steps: int) -> dict[str, torch.Tensor]:
    """The same training in plain PyTorch, averaging after each optimizer step."""
    torch.manual_seed(0)
    module = TinyModule()
    opt = module.configure_optimizers()
    data = loader(64, 8, shuffle=True)
    shadow: dict[str, torch.Tensor] | None = None
    for _ in range(2):
        for i, batch in enumerate(data):
            module.training_step(batch, i).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            with torch.no_grad():
                now = {n: p.detach().clone() for n, p in module.named_parameters()}
                shadow = now if shadow is None else {n: shadow[n] * DECAY + now[n] * (1 - DECAY) for n in now}
    assert shadow is not None
    return shadow


def test_an_added_state_runs_after_every_optimizer_step(tmp_path: Path, ema_chart: Path) -> None:
    """The user's `ema` state is entered once per optimizer step and its action's result lands in the state."""
    trainer, module = fit(tmp_path / "a", ema_chart)
    state = trainer.state
    assert state.status == "finished" and state.global_step == 16
    assert state.counts["fit.train.batch.ema"] == 16
    ema = state.listener_state("ema")
    assert ema["updates"] == 16
    assert set(ema["shadow"]) == {n for n, _ in module.named_parameters()}
    assert not torch.equal(ema["shadow"]["net.0.weight"], module.net[0].weight)


def test_an_added_state_is_drawn_with_its_action_and_traced(tmp_path: Path, ema_chart: Path) -> None:
    """The rendering shows the new state, its action and its edges; the run's trace counts its visits."""
    trainer, _ = fit(tmp_path / "a", ema_chart)
    text = trainer.chart("mermaid")
    assert "ema.update" in text and "averaged" in text
    traced = trainer.chart("mermaid", trace=trainer.run_dir)
    assert "averaged \u00d716" in traced


def test_a_run_with_an_added_state_resumes_exactly(tmp_path: Path, ema_chart: Path) -> None:
    """Stopped after a batch and resumed in a new trainer, the run ends bitwise equal, moving average included."""
    whole, whole_module = fit(tmp_path / "whole", ema_chart)
    fit(tmp_path / "cut", ema_chart, save_after=5)
    resumed, resumed_module = fit(tmp_path / "cut", ema_chart, ckpt=tmp_path / "cut" / "mid.ckpt")
    for a, b in zip(whole_module.state_dict().values(), resumed_module.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    a, b = whole.state.listener_state("ema"), resumed.state.listener_state("ema")
    assert a["updates"] == b["updates"] == 16
    assert all(torch.equal(a["shadow"][n], b["shadow"][n]) for n in a["shadow"])
    assert whole.state.history == resumed.state.history


def test_without_the_action_registered_the_chart_is_refused(ema_chart: Path) -> None:
    """A chart naming an action nobody registered fails at Trainer() with the name and the registered ones."""
    with pytest.raises(interlock.ChartError, match=r"unknown action 'ema.update'; registered: "):
        interlock.Trainer(chart=ema_chart, **only())


def test_renaming_a_region_keeps_the_chart_running(tmp_path: Path) -> None:
    """A copy of the chart with `fit.train` renamed trains exactly as the built-in one (nothing names the path)."""
    text = BUILTIN.read_text().replace(
        "      train:\n        initial: epoch_start", "      training:\n        initial: epoch_start"
    )
    text = text.replace("#fit.train.", "#fit.training.").replace('"#fit.train"', '"#fit.training"')
    text = text.replace("{trigger: train, target: train}", "{trigger: train, target: training}")
    path = tmp_path / "renamed.yaml"
    path.write_text(text)
    results = []
    for chart in (None, path):
        torch.manual_seed(0)
        module = TinyModule()
        trainer = interlock.Trainer(max_epochs=2, **only(), default_root_dir=tmp_path, chart=chart)
        trainer.fit(module, loader(64, 16), loader(32, 16))
        results.append((module, trainer.state))
    (m1, s1), (m2, s2) = results
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values(), strict=True))
    assert s2.counts["fit.training.batch.end"] == s1.counts["fit.train.batch.end"] == 8
    assert s1.history == s2.history


def test_the_added_state_matches_a_plain_loop(tmp_path: Path, ema_chart: Path) -> None:
    """The moving average computed in the chart equals one computed beside a plain PyTorch loop, bit for bit."""
    trainer, _ = fit(tmp_path / "a", ema_chart, val=False)
    expected = plain_ema(16)
    shadow = trainer.state.listener_state("ema")["shadow"]
    assert all(torch.equal(shadow[n], expected[n]) for n in expected)


# -- edited copies with the default listeners on (progress bar, CSV logger, trace, checkpointing) ---------
SANITY_EDGE = "          - {trigger: sanity_check, guard: schedule.sanity_due, target: sanity}\n"
EPOCH_RUN = (
    "            entry: [data.reload, data.start_epoch, module.on_train_epoch_start]\n"
    "            always:\n"
    "              - {trigger: run, target: batch}\n"
)


def without_sanity() -> str:
    """The built-in chart less its sanity check: the edge into it and the whole `fit.sanity` region."""
    text = BUILTIN.read_text()
    start, end = text.index("      sanity:\n"), text.index("      train:\n")
    assert text.count(SANITY_EDGE) == 1
    return (text[:start] + text[end:]).replace(SANITY_EDGE, "")


def renamed() -> str:
    """The built-in chart with `fit.train` renamed `fit.training`."""
    text = BUILTIN.read_text().replace(
        "      train:\n        initial: epoch_start", "      training:\n        initial: epoch_start"
    )
    text = text.replace("#fit.train.", "#fit.training.").replace('"#fit.train"', '"#fit.training"')
    return text.replace("{trigger: train, target: train}", "{trigger: train, target: training}")


def validate_first() -> str:
    """The built-in chart validating before each epoch's training (and, as before, after it)."""
    text = BUILTIN.read_text()
    assert text.count(EPOCH_RUN) == 1
    return text.replace(
        EPOCH_RUN, EPOCH_RUN.replace("{trigger: run, target: batch}", "{trigger: validate, target: val}")
    )


def default_fit(root: Path, chart: Path | None, ckpt: Path | None = None, crash_after: int | None = None) -> Any:
    """Fit TinyModule for 2 epochs with every default listener on; optionally crash once a save exists."""
    torch.manual_seed(0)
    module = TinyModule()
    trainer = interlock.Trainer(max_epochs=2, limit_val_batches=2, default_root_dir=root, chart=chart)
    if crash_after is not None:
        saved = root / "mid.ckpt"
        trainer.on("#train_batch_end", lambda e: SaveCheckpoint(str(saved)), once=crash_after)

        def crash(event: interlock.Event) -> None:
            if saved.exists():
                raise KeyboardInterrupt

        trainer.on("#epoch_start", crash)
        trainer.on("#eval_start", crash)
    try:
        trainer.fit(module, loader(64, 8, shuffle=True), loader(32, 8), ckpt_path=ckpt)
    except KeyboardInterrupt:
        pass
    return trainer, module


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def same_weights(a: TinyModule, b: TinyModule) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_a_chart_without_the_sanity_check_runs_with_the_default_listeners(tmp_path: Path) -> None:
    """With the sanity check removed, progress bar, logger, trace and checkpoints still subscribe and run."""
    trainer, _ = default_fit(tmp_path, write(tmp_path, "nosanity.yaml", without_sanity()))
    assert trainer.state.status == "finished" and trainer.state.global_step == 16
    assert not any(name.startswith("fit.sanity") for name in trainer.state.counts)
    assert (Path(trainer.run_dir) / "metrics.csv").exists() and list(Path(trainer.run_dir).rglob("*.ckpt"))


def test_a_renamed_region_trains_bitwise_like_the_original_with_the_default_listeners(tmp_path: Path) -> None:
    """`fit.train` renamed: the defaults follow the tags, and the weights and history equal the built-in chart's."""
    original, m1 = default_fit(tmp_path / "a", None)
    copy, m2 = default_fit(tmp_path / "b", write(tmp_path, "renamed.yaml", renamed()))
    assert copy.state.status == "finished" and copy.state.counts["fit.training.batch.end"] == 16
    assert same_weights(m1, m2) and original.state.history == copy.state.history
    assert list(Path(copy.run_dir).rglob("*.ckpt")) and (Path(copy.run_dir) / "metrics.csv").exists()


def test_a_validate_first_chart_runs_and_resumes_bitwise_with_the_default_listeners(tmp_path: Path) -> None:
    """Validating before each epoch's training: it runs, and a run cut after a batch resumes to equal weights."""
    chart = write(tmp_path, "valfirst.yaml", validate_first())
    whole, whole_module = default_fit(tmp_path / "whole", chart)
    assert whole.state.status == "finished" and whole.state.counts["fit.train.val.end"] == 4
    default_fit(tmp_path / "cut", chart, crash_after=5)
    resumed, resumed_module = default_fit(tmp_path / "cut", chart, ckpt=tmp_path / "cut" / "mid.ckpt")
    assert resumed.state.status == "finished"
    assert same_weights(whole_module, resumed_module)
    assert whole.state.history == resumed.state.history


def test_a_tag_no_state_carries_is_refused_naming_the_charts_tags(tmp_path: Path) -> None:
    """Subscribing to a tag the chart lacks fails at once, listing the tags the chart has."""
    trainer = interlock.Trainer(chart=write(tmp_path, "nosanity.yaml", without_sanity()), **only())
    with pytest.raises(ValueError, match=r"'#sanity' matches no event.*the chart's tags: \[.*'epoch_end'"):
        trainer.on("#sanity", lambda e: None)
    with pytest.raises(ValueError, match=r"pattern 'fit.sanity.end' matches no event"):
        trainer.on("fit.sanity.end", lambda e: None)


def test_an_unknown_tag_in_a_chart_is_a_typo_unless_the_chart_declares_it(tmp_path: Path) -> None:
    """`tags: [epoch_ends]` is refused naming the vocabulary; a chart's top-level `tags:` adds its own."""
    text = BUILTIN.read_text().replace("tags: [epoch_end]", "tags: [epoch_ends]")
    with pytest.raises(interlock.ChartError, match=r"unknown tags \['epoch_ends'\]; known: \[.*'epoch_end'"):
        interlock.Trainer(chart=write(tmp_path, "typo.yaml", text), **only())
    trainer = interlock.Trainer(chart=write(tmp_path, "own.yaml", "tags: [epoch_ends]\n" + text), **only())
    assert trainer.bus.tagged("#epoch_ends") == ("fit.train.epoch_end",)


#: Chart-path literals that stay in listeners and connectors, each with its reason: none left (they
#: subscribe by tag, or read the chart's `resume_at`). The runtime's own top-level states outside any
#: stage (`setup`, `teardown`, `finished`, `failed`, `interrupted`) are not dotted paths and not counted.
KEPT_PATHS: set[tuple[str, str]] = set()


def test_listeners_and_connectors_name_no_chart_path_but_the_listed_ones() -> None:
    """Every dotted chart-path literal left in listeners/ and connectors/ is one of KEPT_PATHS."""
    import re

    src = Path(interlock.__file__).parent
    pattern = re.compile(r"""["']((?:fit|validate|test|predict)\.[a-z_.]+)["']""")
    found = {
        (f"{path.parent.name}/{path.name}", m.group(1))
        for folder in ("listeners", "connectors")
        for path in sorted((src / folder).glob("*.py"))
        for m in pattern.finditer(path.read_text())
    }
    assert found == KEPT_PATHS


def test_the_progress_lines_of_a_renamed_chart_equal_the_originals(tmp_path: Path) -> None:
    """The progress bar names each loop by its tags: a renamed `fit.train` prints the same lines (rates aside)."""
    import io
    import re

    from interlock.listeners import ProgressBar

    outputs = []
    for name, chart in (("a", None), ("b", write(tmp_path, "renamed.yaml", renamed()))):
        out = io.StringIO()
        torch.manual_seed(0)
        trainer = interlock.Trainer(
            max_epochs=2, limit_val_batches=2, default_root_dir=tmp_path / name, chart=chart,
            **only(ProgressBar(mode="lines", file=out)),
        )  # fmt: skip
        trainer.fit(TinyModule(), loader(64, 8), loader(32, 8))
        trainer.validate(TinyModule(), loader(32, 8))
        outputs.append(re.sub(r", [0-9.]+ it/s", "", out.getvalue()))
    assert outputs[0] == outputs[1]
    assert "Validation (epoch 1): 2 batches" in outputs[0] and "Epoch 1: 8 batches" in outputs[0]
    assert outputs[0].rstrip().splitlines()[-1].startswith("Validation: 2 batches")


# -- the extension object of docs/extending.md --------------------------------------------------------
def docs_ema(tmp_path: Path) -> tuple[Path, Any]:
    """docs/extending.md's EMA chart (made by its own block) and its extension module (its titled block)."""
    import importlib.util

    from test_docs import blocks

    page = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
    found = blocks(page)
    source = next(b for b in found if b.file == "ema_extension.py")
    chart_block = next(b for b in found if b.lang == "python" and 'Path("ema.yaml")' in b.code)
    (tmp_path / "ema_extension.py").write_text(source.code)
    cwd = Path.cwd()
    try:
        import os

        os.chdir(tmp_path)
        exec(compile(chart_block.code, chart_block.where, "exec"), {})
    finally:
        os.chdir(cwd)
    spec = importlib.util.spec_from_file_location("docs_ema_extension", tmp_path / "ema_extension.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tmp_path / "ema.yaml", module


def hand_ema(decay: float, epochs: int) -> dict[str, torch.Tensor]:
    """The same training in plain PyTorch, the average started at the first weights and folded after each step."""
    torch.manual_seed(0)
    module = TinyModule()
    opt = module.configure_optimizers()
    data = loader(64, 8, shuffle=True)
    with torch.no_grad():
        shadow = {n: p.detach().clone() for n, p in module.named_parameters()}
    for _ in range(epochs):
        for i, batch in enumerate(data):
            module.training_step(batch, i).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            with torch.no_grad():
                for n, p in module.named_parameters():
                    shadow[n].mul_(decay).add_(p.detach(), alpha=1 - decay)
    return shadow


def test_the_documented_ema_extension_matches_a_hand_loop(tmp_path: Path) -> None:
    """docs/extending.md's extension (slot + actions) on its chart gives the average a plain loop gives, bit for bit."""
    chart, ext = docs_ema(tmp_path)
    torch.manual_seed(0)
    module = TinyModule()
    trainer = interlock.Trainer(
        max_epochs=2, limit_val_batches=0, default_root_dir=tmp_path, chart=chart, extensions=[ext.ema], **only()
    )
    seen: list[Any] = []
    trainer.on("fit.train.batch.ema", lambda e: seen.append(trainer.runtime.current_run.slot(ext.EMASlot)))
    trainer.fit(module, loader(64, 8, shuffle=True))
    assert trainer.state.counts["fit.train.batch.ema"] == trainer.state.global_step == 16
    expected = hand_ema(0.9, 2)  # the chart's `with: {decay: 0.9}`
    shadow = seen[-1].shadow
    assert set(shadow) == set(expected) and all(torch.equal(shadow[n], expected[n]) for n in expected)
    assert not torch.equal(shadow["net.0.weight"], module.net[0].weight)


def test_chart_actions_lists_slots_and_uses_for_the_builtin_chart_and_an_extension(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`interlock chart --actions` names each action's owner, the slots it reads/writes and where the chart uses it."""
    from interlock.cli.main import main

    assert main(["chart", "--actions"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()

    def block(name: str) -> list[str]:
        i = next(i for i, line in enumerate(lines) if line[4:].split(" ", 1)[0] == name)
        return [lines[i], *(line.strip() for line in lines[i + 1 : i + 3] if line.startswith("        "))]

    assert block("optim.step")[1:] == [
        "reads: optim, hardware",
        "used: entry of fit.train.batch.optimizer_step; entry of fit.train.batch.window_step",
    ]
    assert block("optim.configure")[1:] == ["writes: optim", "used: entry of fit"]
    assert "guard of fit.train.batch.end -[validate]-> fit.train.val" in block("schedule.val_due")[1]
    chart, _ = docs_ema(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["chart", "--chart", str(chart), "--actions", "--extension", "ema_extension:ema"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "extension 'ema'" in block("ema.update")[0] and block("ema.update")[0].startswith("  * ")
    assert block("ema.update")[1:] == ["reads: ema", "used: entry of fit.train.batch.ema"]
    assert block("ema.init")[1:] == ["writes: ema", "used: entry of fit.train"]
    assert main(["chart", "--actions", "--extension", "ema_extension:nothing"]) != 0


def test_a_stage_is_defined_by_its_states_with_in_the_chart(tmp_path: Path) -> None:
    """The module methods and loaders a stage needs come from the chart: an edited `requires` is enforced."""
    text = BUILTIN.read_text()
    old = "loaders: [test], requires: [test_step]}"
    assert text.count(old) == 1
    strict = write(tmp_path, "strict.yaml", text.replace(old, "loaders: [test], requires: [test_step, test_report]}"))
    trainer = interlock.Trainer(chart=strict, default_root_dir=tmp_path, **only())
    with pytest.raises(TypeError, match=r"TinyModule has no test_report\(\); test needs it"):
        trainer.test(TinyModule(), loader(16, 8))
    assert interlock.Trainer(chart=BUILTIN, default_root_dir=tmp_path, **only()).test(TinyModule(), loader(16, 8))
    broken = write(tmp_path, "broken.yaml", text.replace(old, "requires: [test_step]}"))
    with pytest.raises(interlock.ChartError, match=r"state 'test' must define the stage in its with:.*loaders"):
        interlock.Trainer(chart=broken, **only())
