"""On one CUDA device: deterministic runs repeat bitwise, resumes are exact, checkpoints move between devices,
Lightning trains the same, and torch.compile (inductor) trains. Skipped without a GPU (the CI has none);
tools/gpu_check.py's docstring says how they are run on a GPU machine."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import interlock
from conftest import TinyModule, loader, make_data, only
from interlock.listeners import ModelCheckpoint

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICE = "cuda"


def _fit(root: Path, module: Any, ckpt_path: Path | None = None, **kwargs: Any) -> interlock.Trainer:
    flags: dict[str, Any] = {"max_epochs": 2, "accelerator": DEVICE, "devices": 1, "seed": 0, **only(), **kwargs}
    trainer = interlock.Trainer(default_root_dir=root, **flags)
    trainer.fit(module, loader(shuffle=True), loader(32), ckpt_path=ckpt_path)
    return trainer


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_deterministic_fit_on_cuda_trains_on_the_gpu_and_repeats_bitwise(tmp_path: Path) -> None:
    """deterministic=True on CUDA trains (cuBLAS's workspace is set), on the GPU, and two runs are bitwise equal."""
    runs = []
    for name in ("a", "b"):
        torch.manual_seed(0)
        module = TinyModule()
        trainer = _fit(tmp_path / name, module, deterministic=True)
        assert next(module.parameters()).device.type == "cuda"
        assert trainer.state.global_step == 8
        runs.append(_weights(module))
    assert _same(*runs)


@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed"])
def test_resume_mid_epoch_on_cuda_is_bitwise(tmp_path: Path, precision: str) -> None:
    """A fit checkpointed at step 5 (mid-epoch) and resumed from it ends bitwise where the uninterrupted fit
    ends (the loss scaler's state included under 16-mixed)."""
    flags: dict[str, Any] = {"deterministic": True, "precision": precision, "max_epochs": 3}
    torch.manual_seed(0)
    reference = TinyModule()
    _fit(tmp_path / "ref", reference, **flags)
    torch.manual_seed(0)
    saver = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=5, save_top_k=-1)
    _fit(tmp_path / "stop", TinyModule(), **{**flags, **only(saver)}, max_steps=5)
    (ckpt,) = (tmp_path / "ckpt").glob("*.ckpt")
    torch.manual_seed(1)  # the resume must not depend on the fresh module's weights or the global RNG
    resumed = TinyModule()
    trainer = _fit(tmp_path / "resume", resumed, **flags, ckpt_path=ckpt)
    assert trainer.state.global_step == 12
    assert _same(_weights(resumed), _weights(reference))


def test_a_cuda_checkpoint_resumes_and_loads_on_the_cpu(tmp_path: Path) -> None:
    """A checkpoint written on the GPU resumes on a CPU trainer, and load_from_checkpoint(map_location) reads it."""
    torch.manual_seed(0)
    module = TinyModule()
    _fit(tmp_path / "gpu", module, max_epochs=1, **only(ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)))
    ckpt = tmp_path / "ckpt" / "last.ckpt"
    cpu_trainer = interlock.Trainer(max_epochs=2, accelerator="cpu", seed=0, **only(), default_root_dir=tmp_path / "c")
    resumed = TinyModule()
    cpu_trainer.fit(resumed, loader(shuffle=True), loader(32), ckpt_path=ckpt)
    assert cpu_trainer.state.global_step == 8
    assert all(p.device.type == "cpu" for p in resumed.parameters())
    loaded = TinyModule.load_from_checkpoint(ckpt, map_location="cpu")
    assert _same(_weights(loaded), _weights(module))
    assert all(p.device.type == "cpu" for p in loaded.parameters())


def test_pinned_loader_batches_reach_the_gpu(tmp_path: Path) -> None:
    """A DataLoader with pin_memory=True trains, and every step sees its batch on the module's device."""
    seen: set[str] = set()

    class Probe(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen.update({batch[0].device.type, self.device.type})
            return super().training_step(batch, batch_idx)

    trainer = interlock.Trainer(max_epochs=1, accelerator=DEVICE, **only(), default_root_dir=tmp_path)
    trainer.fit(Probe(), DataLoader(make_data(), batch_size=16, pin_memory=True))
    assert seen == {"cuda"}


class Regression:
    """The steps both frameworks run (a mixin: tests/_twins.py makes the two LightningModules)."""

    def _build(self: Any) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        self.seen: list[tuple[str, str, str]] = []  # (hook, stage, where the module was)

    def on_fit_end(self: Any) -> None:
        self.seen.append(("on_fit_end", "fit", self.device.type))

    def teardown(self: Any, stage: str) -> None:
        self.seen.append(("teardown", stage, self.device.type))  # Lightning's stage is a str enum: == "fit"

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self: Any, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self(batch[0]), batch[1])

    def validation_step(self: Any, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.cross_entropy(self(batch[0]), batch[1]))

    def predict_step(self: Any, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])  # type: ignore[no-any-return]

    def configure_optimizers(self: Any) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def test_lightning_trains_predicts_and_validates_the_same_on_cuda(tmp_path: Path) -> None:
    """interlock.lightning.Trainer and pl.Trainer on one GPU: the same weights, predictions (on the GPU) and
    validation results, bitwise."""
    pl = pytest.importorskip("pytorch_lightning")
    import interlock.lightning as il
    from _twins import twins

    warnings.filterwarnings("ignore", module="pytorch_lightning")
    warnings.filterwarnings("ignore", module="lightning_fabric")
    lit, ours = twins(Regression)
    flags: dict[str, Any] = {
        "accelerator": "gpu",
        "devices": 1,
        "max_epochs": 2,
        "deterministic": True,
        "logger": False,
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
    }
    out = []
    for make, module in ((pl.Trainer, lit()), (il.Trainer, ours())):
        trainer = make(default_root_dir=tmp_path / make.__module__, **flags)
        trainer.fit(module, loader(32, batch_size=8), loader(16, seed=1))
        after_fit = module.device.type, [s["exp_avg"].device.type for s in trainer.optimizers[0].state.values()]
        preds = trainer.predict(module, loader(16, seed=2))
        val = trainer.validate(module, loader(16, seed=1), verbose=False)
        out.append((_weights(module), [(p.device.type, p.cpu()) for p in preds], val, after_fit, module.seen))
    (w1, p1, v1, f1, s1), (w2, p2, v2, f2, s2) = out
    assert _same(w1, w2)
    assert f1 == f2 == ("cpu", ["cpu"] * 4)  # the module and the optimizer's state back on the CPU after fit
    assert s1 == s2  # and already in on_fit_end and teardown, as Lightning moves them first
    assert [d for d, _ in p1] == [d for d, _ in p2]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(p1, p2, strict=True))
    assert v1 == v2


def test_inductor_compiled_module_trains_on_cuda(tmp_path: Path) -> None:
    """trainer.fit(torch.compile(module)) with the default (inductor) backend trains on the GPU, close to eager."""
    torch.manual_seed(0)
    eager = TinyModule()
    _fit(tmp_path / "eager", eager)
    torch.manual_seed(0)
    inner = TinyModule()
    trainer = _fit(tmp_path / "compiled", torch.compile(inner))  # type: ignore[arg-type]
    assert trainer.state.global_step == 8
    for (k, a), b in zip(_weights(eager).items(), _weights(inner).values(), strict=True):
        assert torch.allclose(a, b, atol=1e-5), k
