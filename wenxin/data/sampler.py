"""A seeded, resumable batch sampler."""
from __future__ import annotations

from typing import Iterator, List, Optional

import numpy as np


class ResumableBatchSampler:
    """Yields batches of indices; the order depends only on (seed, epoch).

    It is a plain iterable of index lists with a length, which is all ``paddle.io.DataLoader``
    asks of its ``batch_sampler`` (so the data layer imports no Paddle). Unlike
    ``paddle.io.BatchSampler`` with shuffling, the permutation of an epoch is a pure
    function of the seed and epoch number, and iteration can start at any batch, so a resumed
    run sees exactly the batches an uninterrupted run would. With ``num_replicas > 1`` each rank
    takes an interleaved shard ``order[rank::num_replicas]``, padded by wrapping around so that
    all ranks get the same count (``pad=False`` for evaluation: no example is repeated).

    Args:
        num_samples: dataset size.
        batch_size: examples per batch (per rank).
        shuffle: permute each epoch.
        seed: base seed of the permutation.
        drop_last: drop the last, smaller batch.
        rank / num_replicas: this process's shard.
        lengths / bucket_batches: with both, each epoch's (shuffled) order is cut into pools of
            ``bucket_batches`` batches; each pool is sorted by ``lengths`` (example lengths) and cut
            into batches, and the batches are shuffled. Batches then hold examples of similar
            length, so less of each is padding; the order is still a function of (seed, epoch).
    """

    def __init__(self, num_samples: int, batch_size: int, shuffle: bool, seed: int,
                 drop_last: bool = False, rank: int = 0, num_replicas: int = 1, pad: bool = True,
                 lengths: Optional[np.ndarray] = None, bucket_batches: int = 0) -> None:
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.rank = rank
        self.num_replicas = num_replicas
        self.pad = pad  # False for evaluation: shards differ in size but no example repeats
        self.lengths = lengths
        self.bucket_batches = bucket_batches if lengths is not None else 0
        self.epoch = 0
        self.start_batch = 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """Select the epoch's permutation and the first batch to yield."""
        self.epoch = epoch
        self.start_batch = start_batch

    def _indices(self) -> np.ndarray:
        if self.shuffle:
            order = np.random.RandomState((self.seed * 100003 + self.epoch) % 2**32).permutation(self.num_samples)
        else:
            order = np.arange(self.num_samples)
        if self.num_replicas > 1:
            if self.pad:
                per_rank = -(-self.num_samples // self.num_replicas)
                order = np.resize(order, per_rank * self.num_replicas)  # wrap around to pad
            order = order[self.rank::self.num_replicas]
        return order

    def _batches(self) -> List[np.ndarray]:
        order = self._indices()
        batches = [order[b * self.batch_size:(b + 1) * self.batch_size] for b in range(len(self))]
        if not self.bucket_batches:
            return batches
        assert self.lengths is not None
        pool_size = self.bucket_batches * self.batch_size
        batches = []
        for start in range(0, len(self) * self.batch_size, pool_size):
            pool = order[start:min(start + pool_size, len(self) * self.batch_size)]
            pool = pool[np.argsort(self.lengths[pool], kind="stable")]  # ties keep the shuffled order
            batches.extend(pool[i:i + self.batch_size] for i in range(0, len(pool), self.batch_size))
        if self.shuffle:  # or the longest batches of each pool would come last
            rng = np.random.RandomState((self.seed * 100019 + self.epoch + 1) % 2**32)
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def __iter__(self) -> Iterator[List[int]]:
        batches = self._batches()
        for b in range(self.start_batch, len(batches)):
            yield batches[b].tolist()

    def __len__(self) -> int:
        n = len(range(self.rank, self.num_samples, self.num_replicas)) if not self.pad else \
            -(-self.num_samples // self.num_replicas)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
