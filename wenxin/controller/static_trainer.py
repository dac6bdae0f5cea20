"""``BaseStaticTrainer``: static-graph (PIR Program + Executor) execution of the shared loop.

The same model Layer as in eager mode is called once under ``paddle.static.program_guard`` with
``paddle.static.data`` inputs derived from the field readers' tensor specs. The evaluation
program is a clone of the forward pass taken before the optimizer is added, with dropout-like
ops switched to inference (``is_test``). Parameters and optimizer state live in the Executor's
scope; checkpoints name them by structured parameter names, like the dynamic trainer, so a
checkpoint of one mode loads in the other.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import paddle
from paddle.base.data_feeder import convert_dtype

from wenxin.common.constants import InstanceName, Phase
from wenxin.common.errors import ConfigError
from wenxin.controller.base_trainer import Batch, BaseTrainer
from wenxin.controller.checkpoint import rename_state_keys
from wenxin.controller.graph_mode import static_mode


GRAD_BUFFER_SUFFIX = "@GRAD_BUFFER"


def _set_inference_mode(program: paddle.static.Program) -> None:
    """Switch ops with an ``is_test`` attribute (dropout, batch norm) to inference behaviour."""
    for op in program.global_block().ops:
        if op.has_attr("is_test"):
            op.set_bool_attr("is_test", True)


class BaseStaticTrainer(BaseTrainer):
    """Static-graph training: startup/train/eval programs built from one model Layer, run by an
    Executor, with the optimizer (LR schedule with warmup, weight decay, global-norm clipping)
    added by ``minimize``."""

    mode = "static"

    def setup_execution(self) -> None:
        if self.amp.enabled:
            raise ConfigError("trainer.use_amp: AMP is not supported by the static trainer yet; "
                              "use model.is_dygraph=1 for AMP")
        self.place = paddle.CPUPlace() if paddle.get_device() == "cpu" else paddle.CUDAPlace(
            int(paddle.get_device().split(":")[1]))
        with static_mode(), warnings.catch_warnings():
            # Paddle's own layers probe Tensor.place while building; PIR warns on each probe
            warnings.filterwarnings("ignore", message="Tensor do not have 'place' interface")
            self._build_programs()
            self.executor = paddle.static.Executor(self.place)
            self.executor.run(self.startup_program)
        self.scope = paddle.static.global_scope()

    def train_loop(self) -> Dict[str, Dict[str, float]]:
        with static_mode():
            return super().train_loop()

    def run_eval_batches(self, reader_name: str, phase: str) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
        with static_mode():
            return super().run_eval_batches(reader_name, phase)

    def _build_programs(self) -> None:
        self.main_program = paddle.static.Program()
        self.startup_program = paddle.static.Program()
        self.main_program.random_seed = self.startup_program.random_seed = self.trainer_config["seed"]
        specs = self.readers["train_reader"].tensor_specs()
        with paddle.static.program_guard(self.main_program, self.startup_program):
            self.model = self.model_builder()
            feeds = {s.name: paddle.static.data(s.name, s.shape, s.dtype) for s in specs}
            self.model.train()
            outputs = self.model(feeds, Phase.TRAINING)
            value_map = paddle.pir.IrMapping()
            self.eval_program = self.main_program.clone(value_map)
            self.eval_fetch = {k: value_map.look_up(v) for k, v in outputs.items()}
            self.eval_feeds = {k: value_map.look_up(v) for k, v in feeds.items()}
            self.loss = outputs[InstanceName.LOSS]
            self.optimizer, self.lr_scheduler = self.model.set_optimizer(self.state.max_steps)
            if self.world_size > 1 or self.accumulate > 1:
                self._minimize_in_parts()
            else:
                self.optimizer.minimize(self.loss)
        _set_inference_mode(self.eval_program)
        self.feed_names = [s.name for s in specs]
        # structured name ("fc.weight") <-> program variable name ("linear_2.w_0")
        self.var_names = {k: v.name for k, v in self.model.state_dict().items()}

    def _minimize_in_parts(self) -> None:
        """Backward, then (gradient accumulation) add the gradients into persistable buffers, and
        (data parallelism) all-reduce them, before the optimizer applies them.

        With accumulation, the program up to the buffer update is cloned as ``micro_program`` and
        run for the first k-1 batches of a step; the main program runs the k-th batch and applies
        the buffers' mean, then zeroes them. So each batch is forwarded once and memory stays
        that of one batch. (Paddle 3.3's ``GradientMergeOptimizer`` and static
        ``fleet.distributed_optimizer`` do not support PIR programs.)"""
        params_grads = self.optimizer.backward(self.loss)
        if self.accumulate > 1:
            buffers = []
            for param, grad in params_grads:
                buffer = paddle.pir.core.create_persistable_value(
                    dtype=param.dtype, shape=param.shape, name=f"{param.name}{GRAD_BUFFER_SUFFIX}",
                    initializer=paddle.nn.initializer.Constant(0.0))
                paddle.assign(buffer + grad, output=buffer)
                buffers.append((param, buffer))
            value_map = paddle.pir.IrMapping()
            self.micro_program = self.main_program.clone(value_map)
            self.micro_loss = value_map.look_up(self.loss)
            params_grads = [(param, buffer / self.accumulate) for param, buffer in buffers]
        if self.world_size > 1:
            for _, grad in params_grads:
                paddle.distributed.all_reduce(grad)
            params_grads = [(param, grad / self.world_size) for param, grad in params_grads]
        self.optimizer.apply_gradients(params_grads)
        if self.accumulate > 1:
            for _, buffer in buffers:
                paddle.assign(paddle.zeros_like(buffer), output=buffer)

    def _feed(self, batch: Batch) -> Dict[str, Any]:
        return {name: batch[name] for name in self.feed_names if name in batch}

    def run_step(self, batches: List[Batch]) -> Any:
        losses = [self.executor.run(self.micro_program, feed=self._feed(batch), fetch_list=[self.micro_loss])[0]
                  for batch in batches[:-1]]  # gradient accumulation: all but the last batch
        losses.append(self.executor.run(self.main_program, feed=self._feed(batches[-1]), fetch_list=[self.loss])[0])
        loss = float(np.mean(losses))
        self.state.nonfinite_loss = self.should_check_loss() and not np.isfinite(loss)
        return loss

    def eval_step(self, batch: Batch, phase: str) -> Dict[str, np.ndarray]:
        names = list(self.eval_fetch)
        values = self.executor.run(self.eval_program, feed=self._feed(batch),
                                   fetch_list=[self.eval_fetch[n] for n in names])
        return dict(zip(names, (np.asarray(v) for v in values)))

    # ---- export ---------------------------------------------------------------------------
    def save_inference_graph(self, prefix: str, fields: List[Any]) -> List[str]:
        """``paddle.static.save_inference_model`` from the evaluation program (dropout off),
        pruned to the inference fields and the outputs that need no label."""
        feed_names = [s.name for f in fields for s in f.tensor_specs()]
        names = sorted(k for k in self.eval_fetch if k not in (InstanceName.LOSS, InstanceName.LABELS))
        with static_mode():
            paddle.static.save_inference_model(prefix, [self.eval_feeds[n] for n in feed_names],
                                               [self.eval_fetch[n] for n in names], self.executor,
                                               program=self.eval_program)
        return names

    # ---- state ---------------------------------------------------------------------------
    def _read(self, var_name: str) -> np.ndarray:
        return np.array(self.scope.find_var(var_name).get_tensor())

    def _write(self, var_name: str, value: Any) -> None:
        tensor = self.scope.find_var(var_name).get_tensor()
        array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        dtype = convert_dtype(tensor._dtype())  # noqa: SLF001  (no copy of the tensor, unlike np.array)
        tensor.set(array.astype(dtype, copy=False), self.place)

    def model_state_dict(self) -> Dict[str, Any]:
        return {name: self._read(var) for name, var in self.var_names.items()}

    def set_model_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, value in state.items():
            self._write(self.var_names[name], value)

    def _optimizer_var_names(self) -> List[str]:
        """Optimizer state in the scope; gradient buffers are left out (zero at every step end)."""
        return [n for n in self.main_program.state_dict("opt", self.scope) if not n.endswith(GRAD_BUFFER_SUFFIX)]

    def optimizer_state_dict(self) -> Dict[str, Any]:
        state = {name: self._read(name) for name in self._optimizer_var_names()}
        return rename_state_keys(state, {var: name for name, var in self.var_names.items()})

    def set_optimizer_state_dict(self, state: Mapping[str, Any]) -> None:
        internal = rename_state_keys({k: v for k, v in state.items() if not isinstance(v, Mapping)},
                                self.var_names)
        expected = set(self._optimizer_var_names())
        missing = expected - set(internal)
        if missing:
            raise ValueError(f"missing optimizer state: {', '.join(sorted(missing)[:5])}")
        for name in expected:
            self._write(name, internal[name])

    def scaler_state_dict(self) -> Optional[Dict[str, Any]]:
        return None
