"""Paddle Inference: the ``paddle`` backend, which runs every exported folder."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from wenxin.common.constants import ONEDNN_SETTINGS
from wenxin.common.registry import RegisterSet
from wenxin.data.export_bundle import GENERATION_PROGRAMS, MODEL_PREFIX, SHARED_PARAMS
from wenxin.inference.backends import BackendError, EngineOptions, InferenceBackend


# Paddle Inference runs a step group of no rows (advance_pair's second, where a call has one group)
# from this version on: 3.0.0 dies of a segmentation fault on it (found by the oldest-dependencies
# CI tier), 3.3.1 runs it; 3.1 and 3.2 are untried, so there the backend loads advance as before
EMPTY_GROUPS_FROM = (3, 3)


def runs_empty_groups() -> bool:
    """Whether this Paddle runs a step group of no rows (``EMPTY_GROUPS_FROM``; a development
    build, 0.0, is taken to)."""
    import re

    import paddle
    version = tuple(int(part) for part in re.findall(r"\d+", paddle.__version__)[:2])
    return version == (0, 0) or version >= EMPTY_GROUPS_FROM


def model_files(model_dir: str, prefix: str = MODEL_PREFIX) -> Optional[tuple]:
    """The exported graph (``.json`` under PIR, ``.pdmodel`` before it) and parameters, or None.
    ``prefix``: ``inference``, or a generation export's step function (``prefill``, ``extend``),
    whose parameters are its own file or, in exports since the steps share one, ``SHARED_PARAMS``."""
    params = os.path.join(model_dir, f"{prefix}.pdiparams")
    if prefix != MODEL_PREFIX and not os.path.isfile(params):
        params = os.path.join(model_dir, SHARED_PARAMS)
    for ext in (".json", ".pdmodel"):
        graph = os.path.join(model_dir, prefix + ext)
        if os.path.isfile(graph) and os.path.isfile(params):
            return graph, params
    return None


def generation_files(model_dir: str) -> Optional[tuple]:
    """A generation export's first step program's graph and parameters (``advance``'s, or
    ``prefill``'s in an export of several step functions), or None."""
    for prefix in GENERATION_PROGRAMS:
        found = model_files(model_dir, prefix)
        if found is not None:
            return found
    return None


def share_inputs(inputs: List[Tuple[str, Any]], batch: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """Hands each input handle its array's memory (``share_external_data``) instead of a copy, and
    returns the arrays fed, which the caller keeps alive until the next run: the handle points at
    their memory without owning it.

    Every input of a CPU predictor is always shared, never copied: ``copy_from_cpu`` into a handle
    that last held shared memory writes into that memory when it is large enough (Paddle reuses a
    tensor's allocation), i.e. into the caller's array, or into freed memory once the array is
    gone: mixing the two on one handle corrupted the key/value cache and then the heap (issue 69).
    An array is made C-contiguous first (the handle takes a pointer and a shape, no strides): a
    copy only where it is not. It reaches the handle as a ``DenseTensor`` on its memory
    (``compat.paddle_internals.cpu_tensor_on``), which takes no strides either, so an axis of size
    1 whatever its stride (NumPy's ``x[:, None]``) is fine, and a read-only array is shared as it is."""
    from wenxin.compat.paddle_internals import cpu_tensor_on

    fed = []
    for name, handle in inputs:
        array = batch[name]
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        handle.share_external_data(cpu_tensor_on(array))
        fed.append(array)
    return fed


@RegisterSet.inference_backends.register("paddle")
class PaddleBackend(InferenceBackend):
    """``paddle.inference`` on CPU (or GPU 0).

    Setting ``program``: which program of the folder it runs (``inference``, or one step
    function of a generation export).

    oneDNN (setting ``onednn``: ``auto``, ``on`` or ``off``). Paddle enables it by default on CPU.
    On this repository's 2-core CPU (with the fast BLAS path, ``wenxin.common.blas``) it made every
    model slower at batch 1 (0.39x to 0.83x), and BoW and the CRF tagger at any batch (0.45-0.55x,
    0.85-0.95x); from batch 8 the CNN, transformer and ERNIE models faster (1.09x to 1.57x at 8,
    1.5x to 3.0x from 16); outputs moved by at most 4e-7 (docs/performance.md). ``auto`` follows the
    exported model's rule (``onednn_min_rows``, declared by its class and recorded in
    ``preprocess.json``): batches of at least that many rows with oneDNN, smaller ones without; a
    model without a rule never uses it, nor a generation export's step program (measured slower
    at every row count). The choice is a rule, never a timing, so the same input
    gives the same output on an idle or a busy machine.
    """

    name = "paddle"
    title = "Paddle"
    setting_titles = {"onednn": "oneDNN"}
    auto_order = 100  # after ONNX Runtime, which runs a folder that has its model faster
    # predictor.run() keeps Python's lock for the whole run (measured: a thread stepping a 76 ms
    # program kept the main thread from waking for 73 ms at the median)
    holds_interpreter_lock = True
    loads_paddle = True
    gpu = True
    # a CPU predictor reads its inputs where they lie (share_inputs); False copies them into its own
    # tensors, as before issue 69 (benchmarks/decode_step_cache.py measures both). One rule a process:
    # a handle must never be fed both ways
    shares_inputs = True

    def __init__(self, model_dir: str, meta: Dict[str, Any], options: EngineOptions) -> None:
        onednn = options.settings.get("onednn", "auto")
        if onednn not in ONEDNN_SETTINGS:
            raise BackendError(f"onednn: {onednn!r} is not one of {', '.join(ONEDNN_SETTINGS)}")
        prefix = options.settings.get("program", MODEL_PREFIX)
        files = model_files(model_dir, prefix)
        if files is None:
            raise BackendError(f"{model_dir}: no exported Paddle model ({prefix}.json or .pdmodel, "
                               f"{prefix}.pdiparams)")
        self.graph, self.params = files
        self.use_gpu, self.num_threads = options.use_gpu, options.num_threads
        self.onednn = onednn
        # the model's rule is its inference graph's; a generation step program runs without oneDNN
        # under auto: with it ERNIE-Gen's decoding step cost 1.45x the CPU at 8 rows, 1.40x at 16,
        # 1.18x at 32, 1.24x at 64, and a prefill of 16 sources 2.6x (ERNIE 3.0-medium's shape, one
        # thread, docs/serving.md); ERNIE 4.5 chat models have no rule
        self.step_program = prefix != MODEL_PREFIX
        self.onednn_min_rows: Optional[int] = None if self.step_program else meta.get("onednn_min_rows")
        self._predictors: Dict[bool, Any] = {}
        # per predictor, its input and output handles, fetched once: fetching them (and the output
        # names) through pybind on every call cost 30-60 us a batch (benchmarks/predictor_overhead.py)
        self._handles: Dict[bool, Tuple[List[Tuple[str, Any]], List[Any]]] = {}
        self.fed: List[np.ndarray] = []  # the arrays the input handles point at (share_inputs), in order
        self.input_names = self._predictor(self.uses_onednn(1)).get_input_names()

    @classmethod
    def unusable(cls, model_dir: str, use_gpu: bool) -> Optional[str]:
        found = model_files(model_dir) or generation_files(model_dir)
        return None if found else f"{model_dir}: no exported Paddle model"

    def _predictor(self, onednn: bool) -> Any:
        if onednn not in self._predictors:
            from paddle import inference
            config = inference.Config(self.graph, self.params)
            if self.use_gpu:
                config.enable_use_gpu(256, 0)
            else:
                config.disable_gpu()
                config.set_cpu_math_library_num_threads(self.num_threads)
                if onednn:
                    config.enable_mkldnn()
                else:
                    config.disable_mkldnn()
            config.disable_glog_info()
            try:
                self._predictors[onednn] = inference.create_predictor(config)
            except Exception as e:  # paddle raises RuntimeError/ValueError for corrupt files
                raise BackendError(f"{os.path.dirname(self.graph)}: cannot load the model "
                                   f"({type(e).__name__}: {e})") from None
        return self._predictors[onednn]

    @classmethod
    def holds_pair_alone(cls, model_dir: str, steps: Mapping[str, Mapping[str, Any]]) -> bool:
        """As every backend, where this Paddle runs a group of no rows (``runs_empty_groups``)."""
        return super().holds_pair_alone(model_dir, steps) and runs_empty_groups()

    @classmethod
    def runs_empty_caches(cls) -> bool:
        """Where this Paddle runs tensors of no elements through the steps' reshapes: Paddle 3.0
        fails on a cache of no columns as on a group of no rows (``runs_empty_groups``)."""
        return runs_empty_groups()

    def uses_onednn(self, rows: int) -> bool:
        """Whether a batch of ``rows`` runs with oneDNN."""
        if self.use_gpu or self.onednn == "off":
            return False
        if self.onednn == "on":
            return True
        return self.onednn_min_rows is not None and rows >= self.onednn_min_rows

    def splits_batch(self, rows: int) -> bool:
        """Not where the batch runs with oneDNN, which is faster on whole batches (ERNIE, 64 rows with
        oneDNN from 8: sorted batches of 16 ran at 0.77-0.99x, of 8 at 0.52-0.86x; docs/performance.md)."""
        return not self.uses_onednn(rows)

    def choices(self) -> Dict[str, str]:
        """What ``uses_onednn`` decides, in words (the log and ``/health`` say it)."""
        if self.use_gpu:
            return {"onednn": "off (GPU)"}
        if self.onednn != "auto":
            return {"onednn": f"{self.onednn} (set)"}
        if self.onednn_min_rows is None:
            return {"onednn": "off (a generation step program)" if self.step_program else "off (the model's rule)"}
        return {"onednn": f"on for batches of {self.onednn_min_rows} or more rows, off below (the model's rule)"}

    def _bound(self, onednn: bool) -> Tuple[Any, List[Tuple[str, Any]], List[Any]]:
        """The predictor with its input handles (by name) and output handles (in order)."""
        predictor = self._predictor(onednn)
        if onednn not in self._handles:
            self._handles[onednn] = ([(name, predictor.get_input_handle(name)) for name in self.input_names],
                                     [predictor.get_output_handle(name) for name in predictor.get_output_names()])
        inputs, outputs = self._handles[onednn]
        return predictor, inputs, outputs

    def run(self, batch: Dict[str, np.ndarray]) -> List[np.ndarray]:
        rows = len(next(iter(batch.values()))) if batch else 0
        predictor, inputs, outputs = self._bound(self.uses_onednn(rows))
        if self.use_gpu or not self.shares_inputs:
            for name, handle in inputs:
                handle.copy_from_cpu(batch[name])  # takes the array's shape: no reshape call is needed
        else:
            self.fed = share_inputs(inputs, batch)
        predictor.run()
        return [handle.copy_to_cpu() for handle in outputs]
