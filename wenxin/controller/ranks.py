"""``Ranks``: the processes of a data-parallel run, and what the trainer reduces over them."""
from __future__ import annotations

from typing import List

from wenxin.common.errors import CheckpointError
from wenxin.common.graph_mode import eager_mode


class Ranks:
    """This process's ``rank`` among ``world_size`` processes (one alone: every reduction is the
    value itself, with no collective)."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size

    def reduce(self, values: List[float], op: str = "sum") -> List[float]:
        """``values`` reduced elementwise over all ranks (``sum`` or ``max``), in float64."""
        if self.world_size == 1:
            return list(values)
        import paddle
        reduce_op = {"sum": paddle.distributed.ReduceOp.SUM, "max": paddle.distributed.ReduceOp.MAX}[op]
        with eager_mode():  # collectives on eager tensors, also in a static loop
            tensor = paddle.to_tensor(values, dtype="float64")
            paddle.distributed.all_reduce(tensor, op=reduce_op)  # type: ignore[arg-type]  # a ReduceOp value
            return [float(v) for v in tensor.numpy()]

    def mean(self, value: float) -> float:
        """The mean of ``value`` over all ranks."""
        return self.reduce([value])[0] / self.world_size

    def check_start_together(self, step: int, output_path: str) -> None:
        """Every rank must start from the same step: a rank that found no checkpoint to resume
        in ``output_path`` (another machine's disk) would train from scratch beside the others.
        One clear error on every rank instead."""
        highest, negated_lowest = self.reduce([step, -step], op="max")
        lowest = -int(negated_lowest)
        if int(highest) != lowest:
            raise CheckpointError(f"trainer.output_path: the {self.world_size} ranks start from different steps "
                                  f"({lowest} to {int(highest)}; this rank {step}): every rank resumes from "
                                  f"{output_path}, so on several machines it must be storage they share (or hold "
                                  f"the same checkpoint on each)")
