"""A tiny GAN with manual optimization: two optimizers stepped by ``training_step`` itself.

The generator learns to map noise to a 2-D Gaussian ring; it runs on CPU in seconds.
``automatic_optimization = False`` takes the chart's ``manual [optim.manual]`` branch:
``training_step`` calls ``self.manual_backward`` (through the precision plugin) and
steps both optimizers, each step counting in ``global_step`` as in Lightning.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from interlock.core.module import Module

__all__ = ["GAN", "ring_data"]


def ring_data(n: int = 256, seed: int = 0, batch_size: int = 32, shuffle: bool = True) -> DataLoader[Any]:
    """``n`` points on a noisy unit circle (float32 ``(n, 2)``), seeded."""
    g = torch.Generator().manual_seed(seed)
    angle = torch.rand(n, generator=g) * 2 * math.pi
    points = torch.stack([angle.cos(), angle.sin()], dim=1) + 0.05 * torch.randn(n, 2, generator=g)
    return DataLoader(TensorDataset(points), batch_size=batch_size, shuffle=shuffle)


class GAN(Module):
    """Generator ``noise (8) -> point (2)`` and discriminator ``point -> logit``, each with its own Adam."""

    automatic_optimization = False

    def __init__(self, noise: int = 8, hidden: int = 32, lr: float = 2e-3) -> None:
        super().__init__()
        self.noise, self.lr = noise, lr
        self.generator = torch.nn.Sequential(
            torch.nn.Linear(noise, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2)
        )
        self.discriminator = torch.nn.Sequential(
            torch.nn.Linear(2, hidden), torch.nn.LeakyReLU(0.2), torch.nn.Linear(hidden, 1)
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> None:
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)

        fake = self(torch.randn(len(real), self.noise))
        self.toggle_optimizer(opt_d)
        d_loss = bce(self.discriminator(real), ones) + bce(self.discriminator(fake.detach()), zeros)
        self.manual_backward(d_loss)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)

        self.toggle_optimizer(opt_g)
        g_loss = bce(self.discriminator(fake), ones)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)
        self.log_dict({"d_loss": d_loss, "g_loss": g_loss}, prog_bar=True, on_epoch=True)

    def configure_optimizers(self) -> Any:
        betas = (0.5, 0.999)
        return [
            torch.optim.Adam(self.generator.parameters(), lr=self.lr, betas=betas),
            torch.optim.Adam(self.discriminator.parameters(), lr=self.lr, betas=betas),
        ]
