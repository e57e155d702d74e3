# gradients on or off in each step and hook of every loop (fit's validation and its hooks, the sanity check,
# validate, test, predict; Trainer(inference_mode=False)), and the module's train/eval mode in each
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


def state(m):
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), m.training, m.drop.training)


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.drop = torch.nn.Dropout(0.0)
        self.seen = []

    def forward(self, x):
        return self.lin(self.drop(x))

    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.seen.append(("training_step", *state(self)))
        return torch.nn.functional.mse_loss(self(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.seen.append(("validation_step", self.trainer.sanity_checking, *state(self)))
        out = self(batch[0])
        self.seen.append(("val out", out.requires_grad, out.is_inference()))

    def test_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.seen.append(("test_step", *state(self)))

    def predict_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.seen.append(("predict_step", *state(self)))
        return self(batch[0])

    def on_validation_start(self):
        self.seen.append(("on_validation_start", *state(self)))

    def on_validation_epoch_end(self):
        self.seen.append(("on_validation_epoch_end", *state(self)))

    def on_train_epoch_end(self):
        self.seen.append(("on_train_epoch_end", *state(self)))

    def on_test_start(self):
        self.seen.append(("on_test_start", *state(self)))

    def on_predict_epoch_end(self):
        self.seen.append(("on_predict_epoch_end", *state(self)))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)
    data = DataLoader(TensorDataset(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)), batch_size=4)
    model = Model()
    for inference in (False,):  # inference_mode=True: interlock's no_grad, a documented difference
        model.seen.append(("inference_mode", inference))
        kw = dict(
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=False,
            default_root_dir=root,
            inference_mode=inference,
            enable_checkpointing=False,
        )
        trainer = pl.Trainer(max_epochs=1, **kw)
        trainer.fit(model, data, data)
        trainer.validate(model, data)
        trainer.test(model, data)
        preds = trainer.predict(model, data)
        model.seen.append(("preds", preds[0].requires_grad, preds[0].is_inference()))
    return model
