"""A small transformer language model and the WikiText2 text (Lightning's ``demos.transformer``)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from interlock.core.module import Module

__all__ = ["Dictionary", "LightningTransformer", "PositionalEncoding", "Transformer", "WikiText2", "tokenize"]

_WIKITEXT2_URL = "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/train.txt"


class Transformer(nn.Module):
    """Embedding with positional encoding, ``nn.Transformer`` (batch first) and a linear decoder to log-probs."""

    def __init__(
        self,
        vocab_size: int = 33278,
        ninp: int = 200,
        nhead: int = 2,
        nhid: int = 200,
        nlayers: int = 2,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.transformer = nn.Transformer(
            d_model=ninp,
            nhead=nhead,
            num_encoder_layers=nlayers,
            num_decoder_layers=nlayers,
            dim_feedforward=nhid,
            dropout=dropout,
            batch_first=True,
        )
        self.decoder = nn.Linear(ninp, vocab_size)
        self.ninp, self.vocab_size = ninp, vocab_size
        self.src_mask: torch.Tensor | None = None

    def generate_square_subsequent_mask(self, size: int) -> torch.Tensor:
        """``-inf`` above the diagonal, ``0`` elsewhere: no position sees a later one."""
        upper = torch.triu(torch.ones(size, size), diagonal=1)
        return upper.float().masked_fill(upper == 1, float("-inf")).masked_fill(upper == 0, 0.0)

    def forward(self, inputs: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        t = inputs.shape[1]
        if self.src_mask is None or self.src_mask.size(0) != t:
            self.src_mask = self.generate_square_subsequent_mask(t).to(inputs.device)
        if mask is None:
            mask = self.generate_square_subsequent_mask(t).to(inputs.device)
        scale = math.sqrt(self.ninp)
        src = self.pos_encoder(self.embedding(inputs) * scale)
        tgt = self.pos_encoder(self.embedding(target) * scale)
        out = self.decoder(self.transformer(src, tgt, tgt_mask=mask))
        return F.log_softmax(out, dim=-1).view(-1, self.vocab_size)


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal encoding of position ``x.size(1)`` (as Lightning's demo does), then dropout."""

    def __init__(self, dim: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.dim, self.max_len = dim, max_len
        self.pe: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pe is None:
            self.pe = self._init_pos_encoding(device=x.device)
        return self.dropout(x + self.pe[:, x.size(1)])  # type: ignore[no-any-return]

    def _init_pos_encoding(self, device: torch.device) -> torch.Tensor:
        pe = torch.zeros(self.max_len, self.dim, device=device)
        position = torch.arange(0, self.max_len, dtype=torch.float, device=device).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, self.dim, 2, device=device).float() * (-math.log(10000.0) / self.dim))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        return pe.unsqueeze(0)


class Dictionary:
    """Word <-> index, in order of first appearance."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


def tokenize(path: Path) -> tuple[torch.Tensor, Dictionary]:
    """The file's words (each line ends with ``<eos>``) as one int64 tensor of indices, and the dictionary."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"tokenize: no text file at {path}; download it or pass data_dir= of a folder with it")
    dictionary = Dictionary()
    with open(path, encoding="utf8") as f:
        lines = [[*line.split(), "<eos>"] for line in f]
    for words in lines:
        for word in words:
            dictionary.add_word(word)
    ids = [torch.tensor([dictionary.word2idx[w] for w in words]).type(torch.int64) for words in lines]
    return torch.cat(ids), dictionary


class WikiText2(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """WikiText2's training text as ``(block, block shifted by one)`` pairs of ``block_size`` tokens.

    ``data_dir/wikitext-2.txt`` is read; ``download=True`` fetches it first when it is not there
    (needs ``requests`` and the network).
    """

    def __init__(self, data_dir: Path = Path("./data"), block_size: int = 35, download: bool = True) -> None:
        super().__init__()
        self.path = Path(data_dir) / "wikitext-2.txt"
        if download:
            self.download(self.path)
        self.data, self.dictionary = tokenize(self.path)
        self.block_size = block_size

    @property
    def vocab_size(self) -> int:
        return len(self.dictionary)

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.block_size
        end = start + self.block_size
        return self.data[start:end], self.data[start + 1 : end + 1]

    @staticmethod
    def download(destination: Path) -> None:
        if os.path.exists(destination):
            return
        try:
            import requests
        except ImportError:
            raise ModuleNotFoundError(
                f"WikiText2(download=True) needs `requests` to fetch {_WIKITEXT2_URL}; pip install requests, or put "
                f"the text at {destination}"
            ) from None
        os.makedirs(destination.parent, exist_ok=True)
        text = requests.get(_WIKITEXT2_URL).text
        with open(destination, "w") as f:
            f.write(text)


class LightningTransformer(Module):
    """:class:`Transformer` trained on WikiText2 with SGD(lr=0.1)."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def forward(self, inputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.model(inputs, target)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, target = batch
        return F.nll_loss(self(inputs, target), target.view(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(WikiText2())
