"""A small LSTM language model (Lightning's ``demos.lstm``, from PyTorch's word_language_model example)."""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Sampler

from interlock.core.module import Module
from interlock.lightning.demos.transformer import WikiText2

__all__ = ["LightningLSTM", "SequenceSampler", "SimpleLSTM"]


class SimpleLSTM(nn.Module):
    """Embedding, dropout, a stacked LSTM and a linear decoder to log-probabilities over the vocabulary."""

    def __init__(
        self, vocab_size: int = 33278, ninp: int = 512, nhid: int = 512, nlayers: int = 4, dropout: float = 0.2
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab_size, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(nhid, vocab_size)
        self.nlayers, self.nhid = nlayers, nhid
        self.init_weights()

    def init_weights(self) -> None:
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(
        self, input: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        out, hidden = self.rnn(self.drop(self.encoder(input)), hidden)
        decoded = self.decoder(self.drop(out)).view(-1, self.vocab_size)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        weight = next(self.parameters())
        shape = (self.nlayers, batch_size, self.nhid)
        return weight.new_zeros(shape), weight.new_zeros(shape)


class SequenceSampler(Sampler[list[int]]):
    """Batches of ``batch_size`` indices ``chunk`` apart, so each row of a batch continues the previous batch's row."""

    def __init__(self, dataset: Sized, batch_size: int) -> None:
        super().__init__()
        self.dataset, self.batch_size = dataset, batch_size
        self.chunk_size = len(dataset) // batch_size

    def __iter__(self) -> Iterator[list[int]]:
        n = len(self.dataset)
        usable = n - n % self.batch_size
        for i in range(self.chunk_size):
            yield list(range(i, usable, self.chunk_size))

    def __len__(self) -> int:
        return self.chunk_size


class LightningLSTM(Module):
    """:class:`SimpleLSTM` trained on WikiText2 with SGD(lr=20), carrying the hidden state across batches."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = SimpleLSTM(vocab_size=vocab_size)
        self.hidden: tuple[torch.Tensor, torch.Tensor] | None = None

    def on_train_epoch_end(self) -> None:
        self.hidden = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        input, target = batch
        if self.hidden is None:
            self.hidden = self.model.init_hidden(input.size(0))
        self.hidden = (self.hidden[0].detach(), self.hidden[1].detach())
        output, self.hidden = self.model(input, self.hidden)
        loss = F.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader[Any]:
        dataset = WikiText2()
        return DataLoader(dataset, batch_sampler=SequenceSampler(dataset, batch_size=20))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=20.0)
