"""A tiny GAN with manual optimization: two optimizers stepped by ``training_step`` itself.

The generator learns to map noise to a 2-D Gaussian ring; it runs on CPU in seconds.
``automatic_optimization = False`` takes the chart's ``manual [optim.manual]`` branch:
``training_step`` calls ``self.manual_backward`` (through the precision plugin) and
steps both optimizers, each step counting in ``global_step`` as in Lightning.

At each epoch end the generated points, drawn as an image (:meth:`GAN.sample_grid`), go to the
run's loggers through ``self.logger.experiment`` as in Lightning: TensorBoard's ``add_image``, a
``wandb.Image`` for W&B.
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

    @torch.no_grad()
    def sample_grid(self, points: int = 512, size: int = 64, extent: float = 2.0) -> torch.Tensor:
        """Where the generator puts ``points`` samples of fixed noise: a ``(1, size, size)`` image in [0, 1].

        A 2-D histogram over ``[-extent, extent]^2`` (row 0 at the top), scaled by its peak.
        """
        z = torch.randn(points, self.noise, generator=torch.Generator().manual_seed(0))
        xy = self(z.to(next(self.parameters()).device)).float().cpu()
        cells = ((xy + extent) / (2 * extent) * size).floor().long()
        inside = ((cells >= 0) & (cells < size)).all(dim=1)
        col, row = cells[inside, 0], size - 1 - cells[inside, 1]
        image = torch.zeros(size * size).index_add_(0, row * size + col, torch.ones(len(row)))
        return (image / image.max().clamp(min=1.0)).reshape(1, size, size)

    def on_train_epoch_end(self) -> None:
        """Log :meth:`sample_grid` to each logger that takes images (rank 0 only, as the loggers write)."""
        if self.global_rank != 0 or not self.loggers:
            return
        from interlock.listeners import TensorBoardLogger, WandbLogger

        grid = None
        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger):
                grid = self.sample_grid() if grid is None else grid
                logger.experiment.add_image("samples", grid, self.global_step)
            elif isinstance(logger, WandbLogger):
                import wandb

                grid = self.sample_grid() if grid is None else grid
                picture = (grid[0] * 255).round().to(torch.uint8).numpy()
                logger.experiment.log({"samples": wandb.Image(picture), "trainer/global_step": self.global_step})

    def configure_optimizers(self) -> Any:
        betas = (0.5, 0.999)
        return [
            torch.optim.Adam(self.generator.parameters(), lr=self.lr, betas=betas),
            torch.optim.Adam(self.discriminator.parameters(), lr=self.lr, betas=betas),
        ]
