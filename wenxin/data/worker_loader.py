"""Where the data layer meets Paddle: batches as tensors (for the eager engine), and a
``paddle.io.DataLoader`` with worker processes. Only this module of ``wenxin.data`` imports Paddle,
and the others import it where a loader needs it, so reading and converting data (and the fast
tier's numpy engine) run without Paddle installed.

A DataLoader's workers are forked each time it is iterated, and they must not collect the
parent's garbage (``children_leave_parent_garbage``)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Sequence, Tuple

import numpy as np
import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle

from wenxin.common.process import children_leave_parent_garbage
from wenxin.compat.paddle_internals import stop_loader_workers


def as_tensors(batch: Dict[str, np.ndarray]) -> Dict[str, Any]:
    """A collated batch's arrays as Paddle tensors."""
    return {name: paddle.to_tensor(array) for name, array in batch.items()}


class WorkerLoader:
    """Iterates ``loader`` (a DataLoader with ``num_workers``), its workers forked with the
    parent's objects frozen; ``len`` is ``length()`` (the sampler's batches still to come)."""

    def __init__(self, loader: Any, length: Callable[[], int]) -> None:
        self.loader, self.length = loader, length

    def __iter__(self) -> Iterator[Any]:
        with children_leave_parent_garbage():
            batches = iter(self.loader)  # the DataLoader forks its workers here
        try:
            yield from batches
        except BaseException:  # a worker failed, or the loop stopped: the workers go now
            stop_loader_workers(batches)
            raise

    def __len__(self) -> int:
        return self.length()


class _ExampleDataset(paddle.io.Dataset):
    def __init__(self, examples: Sequence[Tuple[Any, ...]]) -> None:
        self.examples = examples

    def __getitem__(self, idx: int) -> Tuple[Any, ...]:
        return self.examples[idx]

    def __len__(self) -> int:
        return len(self.examples)


def example_loader(examples: Sequence[Tuple[Any, ...]], sampler: Any, collate: Callable[..., Any],
                   num_workers: int) -> WorkerLoader:
    """The batches ``sampler`` numbers, collated by ``collate`` in ``num_workers`` processes."""
    loader = paddle.io.DataLoader(_ExampleDataset(examples), batch_sampler=sampler,
                                  collate_fn=collate,  # Paddle's hint: a list
                                  num_workers=num_workers, return_list=True)
    return WorkerLoader(loader, loader.__len__)


class _WorkerBatches(paddle.io.IterableDataset):
    """A DataLoader worker's batches: ``batches_of(worker, workers)``, those numbered ``worker (mod
    workers)``. The DataLoader takes one from each worker in turn, so the batches arrive in their
    order."""

    def __init__(self, batches_of: Callable[[int, int], Iterator[Dict[str, np.ndarray]]]) -> None:
        self.batches_of = batches_of

    def __iter__(self) -> Iterator[Dict[str, np.ndarray]]:
        info = paddle.io.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return self.batches_of(worker, workers)


def _as_is(batch: Any) -> Any:
    return batch


def stream_worker_loader(batches_of: Callable[[int, int], Iterator[Dict[str, np.ndarray]]],
                         length: Callable[[], int], num_workers: int) -> WorkerLoader:
    """Whole batches made in ``num_workers`` processes, each making its own (``_WorkerBatches``)."""
    # batch_size None: the dataset yields whole batches (Paddle takes None; its type hints say int)
    loader = paddle.io.DataLoader(_WorkerBatches(batches_of), batch_size=None,  # type: ignore[arg-type]
                                  collate_fn=_as_is, num_workers=num_workers, return_list=True)
    return WorkerLoader(loader, length)
