"""A ``paddle.io.DataLoader`` that runs worker processes: its workers are forked each time it is
iterated, and they must not collect the parent's garbage (``children_leave_parent_garbage``)."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from wenxin.common.process import children_leave_parent_garbage


class WorkerLoader:
    """Iterates ``loader`` (a DataLoader with ``num_workers``), its workers forked with the
    parent's objects frozen; ``len`` is ``length()`` (the sampler's batches still to come)."""

    def __init__(self, loader: Any, length: Callable[[], int]) -> None:
        self.loader, self.length = loader, length

    def __iter__(self) -> Iterator[Any]:
        with children_leave_parent_garbage():
            return iter(self.loader)  # the DataLoader forks its workers here

    def __len__(self) -> int:
        return self.length()
