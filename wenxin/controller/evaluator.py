"""Evaluation: a reader's batches through the engine's evaluation forward, on every rank, and
their outputs gathered back into the reader's order (``Evaluator``, held by the trainer)."""
from __future__ import annotations

import collections
import contextlib
import itertools
import logging
from typing import Any, Dict, Iterable, Iterator, List, Tuple

import numpy as np

from wenxin.common.errors import ConfigError
from wenxin.common.progress import ProgressBar, ProgressLog
from wenxin.controller.engine import Batch, ExecutionEngine, model_step_meta
from wenxin.common.graph_mode import eager_mode
from wenxin.controller.ranks import Ranks
from wenxin.controller.state import TrainState
from wenxin.data.dataset_reader import BasicDataSetReader, BatchLoader
from wenxin.data.sampler import ResumableBatchSampler
from wenxin.models.step_runners import steps_runner

logger = logging.getLogger("wenxin")


def batch_size_of(batch: Batch) -> int:
    """Leading dimension of a batch (eager Tensors, numpy arrays, or static-mode DenseTensors)."""
    first = next(iter(batch.values()))
    shape = first.shape() if callable(first.shape) else first.shape
    return int(shape[0])


def _pad_to_common_shape(arrays: List[np.ndarray]) -> List[np.ndarray]:
    """Zero-pad every axis but the first to the largest size among ``arrays``."""
    if len({a.shape[1:] for a in arrays}) <= 1:
        return arrays
    target = np.max([a.shape[1:] for a in arrays], axis=0)
    return [np.pad(a, [(0, 0)] + [(0, int(t) - n) for t, n in zip(target, a.shape[1:])]) for a in arrays]


def concat_ragged(arrays: List[np.ndarray]) -> np.ndarray:
    """Concatenate along the first axis; batches of different sequence lengths (``[B, T_b]``)
    are zero-padded to the longest first."""
    return np.concatenate(_pad_to_common_shape(arrays), axis=0)


class _FirstBatch:
    """The first batch of a loader, as a loader of one batch."""

    def __init__(self, loader: Iterable[Batch]) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.loader:
            yield batch
            return

    def __len__(self) -> int:
        return 1


class EvaluationInterrupted(Exception):
    """A stop signal arrived while evaluating (between batches, or between two decoding steps):
    the evaluation is dropped, to run again when the run resumes."""


def stop_if_interrupted(state: TrainState) -> None:
    """Raise ``EvaluationInterrupted`` once a stop signal has arrived."""
    if state.interrupted:
        raise EvaluationInterrupted()


class Evaluator:
    """Runs the evaluation readers for a trainer: each rank a shard of a reader, in batches of
    similar lengths (little padding), the outputs put back in the reader's order.

    Args:
        engine: the set-up engine whose evaluation forward runs the batches.
        readers: the run's dataset readers by name.
        ranks: this process among the run's processes (each evaluates its shard).
        state: the run's progress (its step goes into the outputs' meta information; a stop
            signal it records ends an evaluation).
        batch_size: ``trainer.evaluation.eval_batch_size`` (0: each reader's own batch size).
        show_progress: whether a progress bar shows (else progress lines are logged).
    """

    def __init__(self, engine: ExecutionEngine, readers: Dict[str, BasicDataSetReader], ranks: Ranks,
                 state: TrainState, batch_size: int = 0, show_progress: bool = False) -> None:
        self.engine, self.readers, self.ranks, self.state = engine, readers, ranks, state
        self.batch_size, self.show_progress = batch_size, show_progress
        self._eval_loaders: Dict[str, BatchLoader] = {}
        self._eval_samplers: Dict[str, ResumableBatchSampler] = {}

    @contextlib.contextmanager
    def first_batch_only(self, reader_name: str) -> Iterator[None]:
        """Inside the block, the reader's loader gives its first batch only (the preflight)."""
        loader = self.loader(reader_name)
        self._eval_loaders[reader_name] = _FirstBatch(loader)
        try:
            yield
        finally:
            self._eval_loaders[reader_name] = loader

    def loader(self, reader_name: str) -> BatchLoader:
        if reader_name not in self._eval_loaders:
            if reader_name not in self.readers:
                raise ConfigError(f"dataset_reader.{reader_name}: not configured")
            reader = self.readers[reader_name]
            batch_size = self.batch_size or reader.reader_config["batch_size"]
            # each rank a shard; batches of similar lengths (the whole shard sorted), so that little
            # of each is padding: run_eval_batches puts the outputs back in the reader's order
            sampler = reader.make_sampler(batch_size, shuffle=False, seed=0, rank=self.ranks.rank,
                                          num_replicas=self.ranks.world_size, pad=False, bucket_batches=len(reader))
            self._eval_samplers[reader_name] = sampler
            self._eval_loaders[reader_name] = reader.make_loader(sampler, self.engine.numpy_batches)
        return self._eval_loaders[reader_name]

    def eval_step(self, batch: Batch, phase: str, reader_name: str) -> Dict[str, np.ndarray]:
        """The model's outputs for one batch of ``reader_name``, as numpy arrays; a generation
        model (one with ``generate_outputs``) adds what it decodes through the engine's step
        functions."""
        outputs = self.engine.eval_step(batch, phase, reader_name)
        generate = getattr(self.engine.model, "generate_outputs", None)
        if generate is not None:
            import paddle
            arrays = {k: v.numpy() if isinstance(v, paddle.Tensor) else np.asarray(v) for k, v in batch.items()}

            def run_step(name: str, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
                stop_if_interrupted(self.state)  # a stop signal ends a long decoding at its next step
                return self.engine.run_step_function(name, inputs)
            steps = {name: model_step_meta(self.engine.model, name, *spec)
                     for name, spec in self.engine.model.step_specs().items()}
            outputs.update(generate(arrays, steps_runner(run_step, steps)))
        return outputs

    def collect_outputs(self, reader_name: str, phase: str) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        """Run the model over a whole reader (all ranks' shards, in the reader's order);
        per-example outputs are concatenated, scalar outputs (like ``loss``) become one value per
        batch, weighted by ``meta_info["batch_sizes"]``."""
        merged, batch_sizes = self.run_batches(reader_name, phase)
        if self.ranks.world_size > 1:
            merged, batch_sizes = self._gather_outputs(merged, batch_sizes)
        meta = {"reader": reader_name, "step": self.state.global_step,
                "batch_sizes": batch_sizes, "num_examples": int(batch_sizes.sum())}
        return merged, meta

    def run_batches(self, reader_name: str, phase: str) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
        """This rank's outputs over its shard of a reader, and the batch sizes."""
        with self.engine.running():
            return self._run_batches(reader_name, phase)

    def _run_batches(self, reader_name: str, phase: str) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
        chunks: Dict[str, List[np.ndarray]] = collections.defaultdict(list)
        sizes: List[int] = []
        loader = self.loader(reader_name)
        short = reader_name.replace("_reader", "")
        bar = ProgressBar(len(loader), short) if self.show_progress else None
        shard = len(range(self.ranks.rank, len(self.readers[reader_name]), self.ranks.world_size))
        log = ProgressLog(f"evaluating {short}", shard, logger.info)  # where no bar shows progress
        self.engine.begin_eval()
        try:
            for batch in loader:
                stop_if_interrupted(self.state)
                outputs = self.eval_step(batch, phase, reader_name)
                sizes.append(batch_size_of(batch))
                for key, value in outputs.items():
                    chunks[key].append(value.reshape(1) if value.ndim == 0 else value)
                if bar is not None:
                    bar.update(len(sizes))
                else:
                    log(sum(sizes))
        finally:
            self.engine.end_eval()
            if bar is not None:
                bar.close(keep=False)
        merged = {k: concat_ragged(v) for k, v in chunks.items()}
        # the examples run, in the order they ran (sorted by length) -> back to the shard's order
        sampler = self._eval_samplers.get(reader_name)
        if sampler is not None and sampler.bucket_batches:
            ran = [i for batch in itertools.islice(iter(sampler), len(sizes)) for i in batch]
            order = np.argsort(np.asarray(ran, dtype=np.int64), kind="stable")
            for key, value in merged.items():
                if len(value) == len(ran):  # per-example outputs
                    merged[key] = value[order]
        return merged, np.asarray(sizes)

    def _gather_outputs(self, merged: Dict[str, np.ndarray], batch_sizes: np.ndarray
                        ) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
        """All ranks' evaluation outputs in the reader's order. Rank r evaluated examples
        r, r + W, r + 2W, ... (no padding), so per-example outputs are re-interleaved; per-batch
        outputs (like loss) are concatenated with their batch sizes."""
        import paddle
        gathered: List[Any] = []
        with eager_mode():  # collectives on Python objects need eager mode, also in a static loop
            paddle.distributed.all_gather_object(gathered, (merged, batch_sizes))
        total = int(sum(int(sizes.sum()) for _, sizes in gathered))
        result: Dict[str, np.ndarray] = {}
        for key in merged:
            parts = [outputs[key] for outputs, _ in gathered]
            if all(len(p) == int(sizes.sum()) for p, (_, sizes) in zip(parts, gathered)):
                parts = _pad_to_common_shape(parts)
                full = np.empty((total, *parts[0].shape[1:]), dtype=parts[0].dtype)
                for rank, part in enumerate(parts):
                    full[rank::self.ranks.world_size] = part
                result[key] = full
            else:
                result[key] = concat_ragged(parts)
        return result, np.concatenate([sizes for _, sizes in gathered])
