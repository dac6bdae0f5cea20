"""``RunContext``: what a run's setup decided, handed to the trainer by name.

The task file says what to train; the run context says where this process stands: which file the
task came from and what its translation from ERNIE-kit's names changed, how many CPU threads its
kernels may use, which checkpoint it continues, and its rank among the processes of a
distributed run. ``wenxin.runner.setup_environment`` decides these once; the trainer and its
parts read them from here, never from keys riding in the config.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple


@dataclasses.dataclass(frozen=True)
class ThreadChoice:
    """The threads of Paddle's CPU kernels the setup chose (``wenxin.common.threads``)."""

    count: int
    reason: str  # for the log: where the count came from
    automatic: bool  # ``trainer.environment.cpu_threads: 0`` and no user OMP_NUM_THREADS: fitted to the model


@dataclasses.dataclass(frozen=True)
class RunContext:
    """Where one training process stands (see the module docstring)."""

    source: str = ""  # the task file (its folder is searched for the task package)
    translations: Tuple[str, ...] = ()  # what translating the task file changed, one note each
    cpu_threads: Optional[ThreadChoice] = None  # None: not on a CPU, or Paddle's own setting stands
    resume_from: Optional[str] = None  # the checkpoint this run continues, None for a fresh start
    rank: int = 0
    world_size: int = 1

    @property
    def is_writer(self) -> bool:
        """Whether this process writes the run's files (rank 0)."""
        return self.rank == 0

