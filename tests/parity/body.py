"""What the Lightning module and its port share: the network, the losses and configure_optimizers.

Each side's class (``lit.py``, ``port.py``) adds the step methods written as its framework
wants them, the way docs/porting.md says a user ports a LightningModule.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from parity.case import DataSpec, ModuleSpec

# Lightning's hooks a module may define, recorded in the order they are called
HOOKS = (
    "setup",
    "on_fit_start",
    "on_sanity_check_start",
    "on_sanity_check_end",
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_train_batch_end",
    "on_validation_start",
    "on_validation_epoch_start",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_validation_epoch_end",
    "on_validation_end",
    "on_train_epoch_end",
    "on_train_end",
    "on_fit_end",
    "on_test_start",
    "on_test_epoch_start",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_test_epoch_end",
    "on_test_end",
    "teardown",
)


def initial_weights(spec: ModuleSpec) -> dict[str, torch.Tensor]:
    """The one initialisation both sides load: a 4 -> 8 -> 2 MLP built under seed 0."""
    torch.manual_seed(0)
    return {k: v.clone() for k, v in network(spec).state_dict().items()}


def network(spec: ModuleSpec) -> torch.nn.Sequential:
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(spec.dropout), torch.nn.Linear(8, 2)
    )


class Body:
    """Mixed into both modules (before the framework's base class)."""

    spec: ModuleSpec
    net: torch.nn.Sequential
    calls: Counter[str]
    spec_fetches: bool
    hook_log: list[str]

    def _build(self, spec: ModuleSpec) -> None:
        self.spec = spec
        self.net = network(spec)
        self.net.load_state_dict(initial_weights(spec))
        self.calls = Counter()
        self.hook_log = []
        self.spec_fetches = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def _scores(self, batch: Any, counter: str) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls[counter] += 1
        if counter == "training_step" and self.spec_fetches:
            FETCHES.append(f"step {self.calls[counter] - 1}")
        x, y = batch
        out = self.forward(x)
        return torch.nn.functional.cross_entropy(out, y), (out.argmax(1) == y).float().mean()

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        self.calls["predict_step"] += 1
        return self.forward(batch[0])

    def configure_optimizers(self) -> Any:
        s, params = self.spec, self.net.parameters()
        if s.optimizer == "two":
            return [
                torch.optim.SGD(self.net[0].parameters(), lr=s.lr, momentum=0.9),
                torch.optim.Adam(self.net[3].parameters(), lr=s.lr / 10),
            ]
        if s.optimizer == "sgd":
            opt: torch.optim.Optimizer = torch.optim.SGD(params, lr=s.lr, momentum=0.9, weight_decay=s.weight_decay)
        elif s.optimizer == "adam":
            opt = torch.optim.Adam(params, lr=s.lr, weight_decay=s.weight_decay)
        else:
            opt = torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay)
        if s.scheduler is None:
            return opt
        if s.scheduler == "step":
            sched: Any = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        elif s.scheduler == "exp":
            sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        else:
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0)
        config: dict[str, Any] = {"scheduler": sched, "interval": s.interval, "frequency": s.frequency}
        if s.monitor is not None:
            config["monitor"] = s.monitor
        return {"optimizer": opt, "lr_scheduler": config}


class WarmUp:
    """Lightning's documented learning-rate warm-up, in optimizer_step, after the step."""

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        optimizer.step(closure=optimizer_closure)
        step = self.global_step  # type: ignore[attr-defined]
        if step < 5:
            for group in optimizer.param_groups:
                group["lr"] = min(1.0, (step + 1) / 5) * self.spec.lr  # type: ignore[attr-defined]


class KeepZeros:
    """optimizer_zero_grad that keeps zero tensors (set_to_none=False)."""

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        optimizer.zero_grad(set_to_none=False)


class OwnClip:
    """configure_gradient_clipping: by value on even steps, else the Trainer's flags."""

    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None
    ) -> None:
        if self.global_step % 2 == 0:  # type: ignore[attr-defined]
            self.clip_gradients(optimizer, gradient_clip_val=0.05, gradient_clip_algorithm="value")  # type: ignore[attr-defined]
        else:
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)  # type: ignore[attr-defined]


class OwnSchedulerStep:
    """lr_scheduler_step stepping only on odd global steps (epoch schedulers: every other epoch)."""

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        if self.global_step % 2 == 1:  # type: ignore[attr-defined]
            scheduler.step() if metric is None else scheduler.step(metric)


#: the override mixins a ModuleSpec names (mixed in before the module's class)
OVERRIDES: dict[str, type] = {"warmup": WarmUp, "zero_grad": KeepZeros, "clip": OwnClip, "sched": OwnSchedulerStep}


def with_overrides(cls: type, spec: ModuleSpec) -> type:
    """``cls`` with the spec's override mixins in front."""
    if not spec.overrides:
        return cls
    return type(f"{cls.__name__}_{'_'.join(spec.overrides)}", (*(OVERRIDES[o] for o in spec.overrides), cls), {})


def _recorder(name: str) -> Any:
    def hook(self: Body, *args: Any, **kwargs: Any) -> None:
        self.hook_log.append(name)

    hook.__name__ = name
    return hook


# mixed in (before Body) when the spec asks for hooks
HookRecorder = type("HookRecorder", (), {name: _recorder(name) for name in HOOKS})


# every hook Lightning 2.6.6 calls on a callback (Callback's methods), recorded by CallbackRecorder
CALLBACK_HOOKS = (
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
    "on_train_batch_start", "on_train_batch_end", "on_train_epoch_start", "on_train_epoch_end",
    "on_validation_epoch_start", "on_validation_epoch_end", "on_test_epoch_start", "on_test_epoch_end",
    "on_predict_epoch_start", "on_predict_epoch_end", "on_validation_batch_start", "on_validation_batch_end",
    "on_test_batch_start", "on_test_batch_end", "on_predict_batch_start", "on_predict_batch_end",
    "on_train_start", "on_train_end", "on_validation_start", "on_validation_end", "on_test_start", "on_test_end",
    "on_predict_start", "on_predict_end", "on_exception", "on_save_checkpoint", "on_load_checkpoint",
    "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad",
)  # fmt: skip
_BATCH_IDX = {"start": 3, "end": 4}  # where batch_idx is among (trainer, pl_module, ...) of a batch hook


def _callback_recorder(name: str) -> Any:
    where = _BATCH_IDX.get(name.rsplit("_", 1)[-1]) if "_batch_" in name else None

    def hook(self: Any, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        batch_idx = args[where - 2] if where is not None else -1
        self.rows.append(f"{name} e{trainer.current_epoch} s{trainer.global_step} b{batch_idx}")

    hook.__name__ = name
    return hook


# mixed in before the framework's Callback: one row per hook call, "hook e<epoch> s<step> b<batch_idx>"
CallbackRecorder = type(
    "CallbackRecorder",
    (),
    {
        "state_key": "CallbackRecorder",
        **{name: _callback_recorder(name) for name in CALLBACK_HOOKS},
    },
)


#: what the training set served and the steps taken, in order (DataSpec.log_fetches); each run clears it
FETCHES: list[str] = []


class LoggedSet(TensorDataset):
    """A TensorDataset that records the first sample of each batch it serves (the side effect of a fetch)."""

    def __init__(self, base: TensorDataset, batch_size: int) -> None:
        super().__init__(*base.tensors)
        self.batch_size = batch_size

    def __getitem__(self, index: int) -> Any:
        if index % self.batch_size == 0:
            FETCHES.append(f"fetch {index // self.batch_size}")
        return super().__getitem__(index)


class LoggedStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """The same samples as an IterableDataset (no length), recording each batch it starts to serve."""

    def __init__(self, base: TensorDataset, batch_size: int) -> None:
        self.base, self.batch_size = base, batch_size

    def __iter__(self) -> Any:
        for index in range(len(self.base)):
            if index % self.batch_size == 0:
                FETCHES.append(f"fetch {index // self.batch_size}")
            yield self.base[index]


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())


def loaders(data: DataSpec) -> dict[str, Any]:
    """Fresh loaders (one set per framework): train, val (None, one, or a list), test, predict."""

    def make(n: int, seed: int, shuffle: bool = False, logged: bool = False) -> DataLoader[Any]:
        gen = torch.Generator().manual_seed(7) if shuffle else None
        ds: Any = dataset(n, seed)
        if logged:
            ds = (LoggedStream if data.iterable else LoggedSet)(ds, data.batch_size)
        return DataLoader(ds, batch_size=data.batch_size, shuffle=shuffle, generator=gen)

    val: Any = None
    if data.val_loaders == 1:
        val = make(data.n_val, 1)
    elif data.val_loaders > 1:
        val = [make(data.n_val + 16 * i, 1 + i) for i in range(data.val_loaders)]
    return {
        "train": make(data.n_train, 0, data.shuffle, data.log_fetches),
        "val": val,
        "test": make(data.n_test, 2) if data.val_loaders <= 1 else [make(data.n_test, 2), make(data.n_test, 3)],
        "predict": make(data.n_test, 2),
    }
