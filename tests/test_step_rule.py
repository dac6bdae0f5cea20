"""One step rule for every engine (``wenxin.controller.step_rule``): the fast tier's numpy engine,
the eager engine and the static engine train the same softmax bag-of-words model on the same
batches to the same losses and parameters, through gradient accumulation, global-norm clipping,
a linearly decaying learning rate, momentum and a step whose loss is NaN (skipped by all three)."""
import os
import sys

import numpy as np
import paddle
import pytest

from conftest import make_sentences, task_config, write_config, write_tsv
from wenxin.config.loader import load_config
from wenxin.config.task_check import TaskClasses
from wenxin.controller.base_trainer import BaseTrainer
from wenxin.controller.hooks import HookBase
from wenxin.models.base_model import BaseModel
from wenxin.models.modules import length_mask
from wenxin.runner import assemble_trainer, setup_environment

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast"))
from fake_engine import numpy_trainer  # noqa: E402

STEPS, POISONED = 8, 5  # the 5th step's loss is NaN: every engine skips its update


class Bias(paddle.nn.Layer):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.bias = self.create_parameter([size], is_bias=True, default_initializer=paddle.nn.initializer.Constant(0.0))


class SoftmaxBow(BaseModel):
    """The numpy engine's model (``fake_engine.NumpyBow``) in Paddle: ``softmax(mean of the
    tokens' rows of W + b)``, W drawn as NumpyBow draws it."""

    def structure(self) -> None:
        vocab, labels = self.data_info["text_a"]["vocab_size"], self.data_info["label"]["num_labels"]
        initial = np.random.RandomState(0).normal(0.0, 0.1, (vocab, labels)).astype("float32")  # NumpyBow's, seed 0
        self.embedding = paddle.nn.Embedding(vocab, labels, weight_attr=paddle.ParamAttr(
            initializer=paddle.nn.initializer.Assign(initial)))
        self.out = Bias(labels)

    def forward(self, fields_dict, phase):
        ids, lengths = fields_dict["text_a"], fields_dict["text_a_seq_lens"]  # [B, T], [B]
        mask = length_mask(lengths, paddle.shape(ids)[1])  # [B, T]
        pooled = (self.embedding(ids) * mask.unsqueeze(-1)).sum(1) / lengths.astype("float32").unsqueeze(-1)  # [B, C]
        logits = pooled + self.out.bias
        outputs = {"probs": paddle.nn.functional.softmax(logits)}
        if "label" in fields_dict:
            labels = fields_dict["label"].reshape([-1, 1])
            outputs["loss"] = paddle.nn.functional.cross_entropy(logits, labels).mean()
        return outputs


class Losses(HookBase):
    def __init__(self):
        self.losses = []

    def after_step(self):
        self.losses.append(float(np.asarray(self.trainer.state.last_loss)))


def poison(trainer, step: int) -> None:
    """A length of 0 in a batch of ``step`` (1-based): its mean over no tokens is 0/0, so the
    step's loss is NaN in every engine."""
    original = trainer.run_step

    def run_step(group):
        if trainer.state.global_step + 1 == step:
            lengths = group[0]["text_a_seq_lens"]
            poisoned = np.array(lengths)
            poisoned[0] = 0
            group[0]["text_a_seq_lens"] = poisoned if trainer.engine.numpy_batches else paddle.to_tensor(poisoned)
        return original(group)

    trainer.run_step = run_step


@pytest.fixture
def config(tmp_path):
    data = str(tmp_path / "data")
    for name, seed, n in (("train", 1, 96), ("dev", 2, 40), ("test", 3, 40)):
        write_tsv(os.path.join(data, f"{name}.tsv"), make_sentences(n, seed))

    def make(name, is_dygraph=1, max_grad_norm=0.0):
        c = task_config(data, str(tmp_path / name), max_steps=STEPS, gradient_accumulation_steps=2, is_eval_dev=0,
                        is_eval_test=0, save_model_step=1000, train_log_step=1000, max_nan_steps=3, seed=0,
                        type="CustomTrainer")
        c["model"]["is_dygraph"] = is_dygraph
        c["model"]["optimization"] = {"optimizer": "momentum", "momentum": 0.9, "learning_rate": 0.5,
                                      "warmup_steps": 0, "lr_scheduler": "linear_warmup_decay",
                                      "end_learning_rate": 0.0, "weight_decay": 0.0, "max_grad_norm": max_grad_norm}
        return c
    return make


def paddle_trainer(config, tmp_path) -> BaseTrainer:
    path = write_config(str(tmp_path / f"{config['trainer']['output_path'].split(os.sep)[-1]}.json"), config)
    loaded = load_config(path)
    return assemble_trainer(loaded, setup_environment(loaded),
                            TaskClasses(scope="text_classification", model_cls=SoftmaxBow, trainer_cls=BaseTrainer))


def trained(trainer):
    losses = Losses()
    trainer.register_hook(losses)
    poison(trainer, POISONED)
    trainer.do_train()
    return losses.losses, {k: np.asarray(v, dtype=np.float64) for k, v in trainer.engine.model_state_dict().items()}


@pytest.mark.parametrize("max_grad_norm", [0.0, 0.05])  # 0.05: every step is clipped
def test_the_numpy_eager_and_static_engines_follow_one_step_rule(config, tmp_path, max_grad_norm):
    numpy_losses, numpy_params = trained(numpy_trainer(config("numpy", 1, max_grad_norm), tmp_path))
    assert len(numpy_losses) == STEPS and np.isnan(numpy_losses[POISONED - 1])
    finite = [i for i in range(STEPS) if i != POISONED - 1]
    for mode, is_dygraph in (("dynamic", 1), ("static", 0)):
        trainer = paddle_trainer(config(mode, is_dygraph, max_grad_norm), tmp_path)
        assert trainer.mode == mode
        losses, params = trained(trainer)
        assert np.isnan(losses[POISONED - 1]), mode
        np.testing.assert_allclose(np.array(losses)[finite], np.array(numpy_losses)[finite], rtol=2e-5,
                                   err_msg=mode)
        assert sorted(params) == sorted(numpy_params)
        for name, value in numpy_params.items():
            np.testing.assert_allclose(params[name], value, rtol=1e-4, atol=2e-6, err_msg=f"{mode}: {name}")
    moved = np.abs(numpy_params["embedding.weight"] - np.random.RandomState(0).normal(0.0, 0.1, numpy_params[
        "embedding.weight"].shape)).max()
    assert moved > 1e-3  # the steps changed the weights (the comparison is not of the initial ones)
