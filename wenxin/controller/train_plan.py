"""The training data of a run and how many steps it makes: the sampler and loader of the
train reader, and the steps per epoch, epochs and total steps that ``trainer.epoch`` or
``trainer.max_steps`` and ``trainer.step.gradient_accumulation_steps`` give."""
from __future__ import annotations

import dataclasses
from typing import Iterator, List

from wenxin.common.errors import ConfigError, DataError, WenxinError
from wenxin.common.process import describe_failure
from wenxin.config.task_check import EVAL_FLAGS
from wenxin.controller.engine import Batch
from wenxin.controller.ranks import Ranks
from wenxin.controller.state import TrainState
from wenxin.data.dataset_reader import BasicDataSetReader, BatchLoader
from wenxin.data.sampler import ResumableBatchSampler


@dataclasses.dataclass
class TrainData:
    """The train reader's batches: ``accumulate`` of them make one optimizer step."""

    sampler: ResumableBatchSampler
    loader: BatchLoader
    accumulate: int


def train_data(reader: BasicDataSetReader, seed: int, accumulate: int, ranks: Ranks,
               numpy_batches: bool) -> TrainData:
    """The sampler (this rank's shard where the reader distributes its data, shuffled by ``seed``)
    and loader of the train ``reader``, ``accumulate`` batches an optimizer step."""
    rc = reader.reader_config
    distribute = rc["need_data_distribute"] and ranks.world_size > 1
    sampler = reader.make_sampler(rc["batch_size"], rc["shuffle"], seed,
                                  rank=ranks.rank if distribute else 0,
                                  num_replicas=ranks.world_size if distribute else 1,
                                  bucket_batches=rc["bucket_batches"])
    return TrainData(sampler, reader.make_loader(sampler, numpy_batches), accumulate)


def plan_steps(state: TrainState, data: TrainData, epochs: int, max_steps: int, evaluated: List[str],
               reader_names: List[str]) -> None:
    """Set ``state``'s steps per epoch, epochs and total steps (``max_steps`` > 0 wins over
    ``epochs``); check that the ``evaluated`` readers are among ``reader_names``."""
    steps_per_epoch = len(data.sampler) // data.accumulate
    if steps_per_epoch == 0:
        raise ConfigError(f"trainer.step.gradient_accumulation_steps: {data.accumulate} is more than the "
                          f"{len(data.sampler)} batches of one epoch")
    state.steps_per_epoch = steps_per_epoch
    if max_steps > 0:
        state.max_steps = max_steps
        state.num_epochs = -(-state.max_steps // steps_per_epoch)
    else:
        state.num_epochs = epochs
        state.max_steps = epochs * steps_per_epoch
    for name, flag in EVAL_FLAGS:
        if name in evaluated and name not in reader_names:
            raise ConfigError(f"trainer.evaluation.{flag}: set, but dataset_reader.{name} is not configured")


def next_batches(batches: Iterator[Batch], count: int) -> List[Batch]:
    """The next ``count`` training batches (one optimizer step's); a loader that fails ends the
    run with an ``error:`` naming the reader, never a wait."""
    try:
        return [next(batches) for _ in range(count)]
    except (WenxinError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 (DataLoader workers raise many types)
        raise DataError(f"dataset_reader.train_reader: loading a batch failed ({describe_failure(e)})") from None
