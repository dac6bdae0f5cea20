"""The service's Prometheus metrics (``GET /metrics``)."""
from __future__ import annotations

import os
from typing import Any, Dict, Tuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

from wenxin.inference.turn_plan import Turn

ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class ServiceMetrics:
    """The service's metrics, in a registry of its own. When several processes serve
    (``PROMETHEUS_MULTIPROC_DIR`` is set before they start), each writes its values to files
    there and /metrics adds up every process's (prometheus_client's multiprocess mode)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("wenxin_requests", "HTTP requests answered", ["path", "status"],
                                registry=self.registry)
        self.errors = Counter("wenxin_errors", "requests answered with a 5xx status", registry=self.registry)
        self.latency = Histogram("wenxin_request_seconds", "time from the request to its answer",
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10),
                                 registry=self.registry)
        self.rows = Histogram("wenxin_request_inputs", "inputs in one /predict request", buckets=ROW_BUCKETS,
                              registry=self.registry)
        self.batches = Histogram("wenxin_model_batch_inputs", "inputs in one model batch (after batching)",
                                 buckets=ROW_BUCKETS, registry=self.registry)
        self.generations = Counter("wenxin_generations", "generation requests decoded, by how they ended "
                                   "(eos, stop, length, time_limit, cancelled, error)", ["reason"],
                                   registry=self.registry)
        self.generation_rows = Histogram("wenxin_generation_step_rows", "cache rows in one decoding step (requests "
                                         "decoding together, a beam search's beams each a row)",
                                         buckets=ROW_BUCKETS, registry=self.registry)
        self.prompt_tokens_reused = Counter("wenxin_prompt_tokens_reused", "prompt tokens not prefilled: an earlier "
                                            "prompt's kept start covered them (--prefix_cache_mb)",
                                            registry=self.registry)
        self.prompt_tokens = Counter("wenxin_prompt_tokens_prefilled", "prompt tokens run through the model "
                                     "(those a kept start covered not counted)", registry=self.registry)
        self.turn_cpu = Counter("wenxin_generation_turn_cpu_seconds", "CPU of the decoding thread in its turns: the "
                                "model's calls and the scheduler's choices (the rest of the service's CPU is HTTP "
                                "and streaming; a model's math threads beyond the first are not counted)",
                                registry=self.registry)
        self.model_cpu = Counter("wenxin_generation_model_cpu_seconds", "of the decoding thread's CPU in its turns, "
                                 "that inside the model's step calls: against the service's CPU, the share its "
                                 "bare steps would take (a model's math threads beyond the first not counted)",
                                 registry=self.registry)
        self.refused = Counter("wenxin_generations_refused", "generation requests answered 503: the batch and its "
                               "waiting line were full", registry=self.registry)
        self.in_flight = Gauge("wenxin_predict_in_flight", "/predict requests whose headers arrived, not yet answered",
                               multiprocess_mode="livesum", registry=self.registry)
        self._answered: Dict[Tuple[str, int], Any] = {}

    def answered(self, path: str, status: int) -> Any:
        """The counter of requests to ``path`` answered with ``status`` (kept: ``labels()`` builds
        and checks its key each call, 2 us of a request's 90 us of HTTP work)."""
        child = self._answered.get((path, status))
        if child is None:
            child = self._answered[(path, status)] = self.requests.labels(path, str(status))
        return child

    def observe_turn(self, turn: Turn) -> None:
        """What a generation turn did: its step's rows, the prompt tokens it prefilled and those a
        kept start covered, and its thread's CPU (and of that, the model's calls')."""
        if turn.step_rows:
            self.generation_rows.observe(turn.step_rows)
        prefilled = sum(part.tokens for part in turn.prefilled)
        if prefilled:
            self.prompt_tokens.inc(prefilled)
        if turn.cpu_seconds > 0:
            self.turn_cpu.inc(turn.cpu_seconds)
        if turn.model_cpu_seconds > 0:
            self.model_cpu.inc(turn.model_cpu_seconds)
        reused = sum(admitted.reused_tokens for admitted in turn.admitted)
        if reused:
            self.prompt_tokens_reused.inc(reused)

    def exposition(self) -> bytes:
        """The Prometheus text of this process, or of all the service's processes."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)
