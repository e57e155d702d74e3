# lightning.pytorch.demos.lstm: LightningLSTM trained on WikiText2 (here a small text at ./data/wikitext-2.txt).
import os
import random

from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.demos import LightningLSTM, WikiText2


def write_text(path, words=60, lines=160):
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(words)]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for _ in range(lines):
            f.write(" ".join(rng.choice(vocab) for _ in range(rng.randint(4, 14))) + "\n")


def main(root):
    write_text(os.path.join("data", "wikitext-2.txt"))
    seed_everything(42)
    vocab_size = WikiText2(download=False).vocab_size
    model = LightningLSTM(vocab_size=vocab_size)
    trainer = Trainer(max_epochs=2, limit_train_batches=1, enable_checkpointing=False)
    trainer.fit(model)
    return model
