"""The model base class shared by every task and both execution modes."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle

from wenxin.common.errors import ConfigError
from wenxin.config.schema import Schema
from wenxin.optim.optimizers import build_optimizer


class BaseModel(paddle.nn.Layer):
    """A task model: one ``paddle.nn.Layer`` that serves eager and static-graph training.

    Subclasses declare their own task-file keys in ``config_schema``, build their layers in
    ``structure()``, compute a dict of outputs in ``forward(fields_dict, phase)`` (it must hold
    ``loss`` in the training phase), and turn accumulated outputs into metrics in ``get_metrics``.

    Args:
        model_params: the validated ``model`` section of the task file.
        data_info: per-field sizes from the field readers, e.g.
            ``{"text_a": {"vocab_size": 5000, "padding_id": 0}, "label": {"num_labels": 2}}``.
    """

    config_schema: Schema = {}
    #: how exported predictions are reported: a registered result format (classification,
    #: tagging, score, raw; see ``wenxin.inference.formatters``)
    prediction_format: str = "classification"
    #: the exported model's oneDNN rule: Paddle Inference runs batches of at least this many rows
    #: with oneDNN, smaller ones (and every batch when None) without it. Measured per model on a
    #: 2-core CPU (docs/performance.md): oneDNN is slower at batch 1 for every model and at any
    #: batch for BoW and the CRF tagger, faster from 8 rows for convolutions, transformers and ERNIE
    onednn_min_rows: Optional[int] = None
    #: the exported model's batching rule, for a model whose cost follows the padded length
    #: rather than the number of calls: ``Predictor.predict`` and the service run more rows than
    #: this sorted by length, in batches of at most this many (each padded to its own longest).
    #: None: rows run in their order (a bag of words costs less per row in larger batches)
    sorted_batch_rows: Optional[int] = None
    #: the task package of the run (set by ``wenxin.runner`` once the model is built): where
    #: ``set_optimizer`` looks up the optimizer and schedule names before the built-ins
    task_scope: Optional[str] = None

    def __init__(self, model_params: Dict[str, Any], data_info: Dict[str, Dict[str, Any]]) -> None:
        super().__init__()
        self.model_params = model_params
        self.data_info = data_info
        self.structure()

    def structure(self) -> None:
        """Create the sub-layers."""
        raise NotImplementedError

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        raise NotImplementedError

    def own_pretrained_weights(self) -> Optional[Tuple[str, Dict[str, Any]]]:
        """Weights the model brings from its own pretrained folder (e.g. a decoder's
        ``model.model_dir``), as ``(where they come from, arrays by parameter name)``; the trainer
        loads them once the parameters exist in either graph mode, before ``trainer.checkpoints.pre_train_model``
        and before a resumed checkpoint. None (the default): nothing of its own."""
        return None

    def draws_initial_weights(self) -> bool:
        """Whether some parameter starts from Paddle's random initializers (the default). Static
        mode then takes the values an eager model of the same seed starts from, so both modes
        start alike (``static_engine.eager_initial_state``: one more model built while setting up).
        A model whose parameters all come from its own folder, or are drawn by NumPy, says False."""
        return True

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        """Metrics from outputs accumulated over a whole evaluation (numpy arrays, concatenated)."""
        raise NotImplementedError

    def set_optimizer(self, total_steps: int
                      ) -> Tuple[paddle.optimizer.Optimizer, Optional[paddle.optimizer.lr.LRScheduler]]:
        """The optimizer and LR schedule from ``model.optimization`` (the names looked up in the
        run's task package first, then among the built-ins); override for custom ones."""
        return build_optimizer(self.model_params["optimization"], self.trainable_parameters(), total_steps,
                               self.decay_filter(), scope=self.task_scope)

    def trainable_parameters(self) -> List[paddle.Tensor]:
        """The parameters the optimizer updates: all but the frozen ones (``stop_gradient``, e.g.
        a decoder's weights under LoRA adapters)."""
        return [p for p in self.parameters() if not p.stop_gradient]

    def export_state(self, state: Mapping[str, Any]) -> Dict[str, Any]:
        """Parameters to hold while exporting, by structured name, given the current ``state``
        (e.g. LoRA adapters merged into their layers); the trainer restores them afterwards, bit
        for bit (``state_held``). Empty (the default): export the parameters as they are."""
        return {}

    def write_pretrained_folder(self, folder: str, state: Mapping[str, Any], dtype: str,
                                max_shard_bytes: int) -> List[str]:
        """Write the model as the model folder other runtimes load (``wenxin export --format pt``)
        into the empty ``folder``, from its parameters ``state`` by structured name, in ``dtype``;
        returns the files written. Models that have such a form override this."""
        raise ConfigError(f"export --format pt: model.type {type(self).__name__} has no model-folder form "
                          f"(the ERNIE 4.5 chat models have); export it as an inference folder instead")

    def enable_recompute(self, key: str) -> None:
        """Turn gradient checkpointing on (``trainer.step.recompute``); ``key`` names the setting in
        errors. Models that offer it override this."""
        raise ConfigError(f"{key}: {type(self).__name__} does not offer recompute (gradient checkpointing)")

    def checkpointed_names(self) -> Optional[Set[str]]:
        """The parameters a checkpoint holds, by structured name; None (the default): all of them.
        A model that freezes weights it reloads from its own folder (``own_pretrained_weights``)
        checkpoints only what trains, and a resume takes the rest from that folder again."""
        return None

    def decay_filter(self) -> Callable[[str], bool]:
        """Which parameters get weight decay: all but biases and normalization scales."""
        no_decay = {p.name for n, p in self.named_parameters()
                    if n.endswith("bias") or "norm" in n.lower() or p.ndim == 1}
        return lambda name: name not in no_decay
