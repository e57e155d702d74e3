# Lightning's examples/pytorch/basics/transformer.py: a language model on WikiText2 (here a small synthetic text).
import os
import random
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.demos import Transformer, WikiText2
from torch.utils.data import DataLoader, random_split


class LanguageModel(L.LightningModule):
    def __init__(self, vocab_size):
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size, ninp=32, nhead=2, nhid=32, nlayers=1)

    def training_step(self, batch, batch_idx):
        input, target = batch
        output = self.model(input, target)
        loss = F.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        input, target = batch
        output = self.model(input, target)
        loss = F.nll_loss(output, target.view(-1))
        self.log("val_loss", loss, prog_bar=True)
        return loss

    def test_step(self, batch, batch_idx):
        input, target = batch
        output = self.model(input, target)
        loss = F.nll_loss(output, target.view(-1))
        self.log("test_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def write_text(path):
    rng = random.Random(1)
    vocab = [f"t{i}" for i in range(40)]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for _ in range(120):
            f.write(" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 12))) + "\n")


def main(root):
    write_text(os.path.join(root, "data", "wikitext-2.txt"))
    L.seed_everything(42)

    dataset = WikiText2(data_dir=Path(root) / "data", block_size=16, download=False)
    n = len(dataset)
    train_dataset, val_dataset, test_dataset = random_split(dataset, [n - 16, 8, 8])
    train_dataloader = DataLoader(train_dataset, batch_size=4, shuffle=True)
    val_dataloader = DataLoader(val_dataset, batch_size=4, shuffle=False)
    test_dataloader = DataLoader(test_dataset, batch_size=4, shuffle=False)

    model = LanguageModel(vocab_size=dataset.vocab_size)
    trainer = L.Trainer(gradient_clip_val=0.25, max_epochs=2, limit_train_batches=3)
    trainer.fit(model, train_dataloader, val_dataloader)
    trainer.test(model, test_dataloader)
    return model
