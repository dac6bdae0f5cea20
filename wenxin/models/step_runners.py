"""The decoding calls of a generation model whose export holds one step program.

Every decoder calls ``prefill`` and ``extend`` (and an ERNIE 4.5 model's also ``prefill_chunk``
and ``advance``); a model exports one program that runs them all, so that it holds its weights
once: ``advance`` (ERNIE 4.5 chat models: ``wenxin.models.advance_step``) or ``infill``
(ERNIE-Gen: ``wenxin.models.infill_step``). ``ONE_PROGRAM_STEPS`` has a row for each: how the
calls it runs are described (as the entries of earlier exports' programs were) and the runner
that runs them. An export of several programs (earlier ones) runs each call as its own program.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional

import numpy as np

from wenxin.models.advance_step import ADVANCE, AdvanceRunner, advance_steps, empty_cache, in_place
from wenxin.models.decoding import StepRunner
from wenxin.models.infill_step import INFILL, InfillRunner, infill_cache, infill_steps

Steps = Mapping[str, Mapping[str, Any]]  # preprocess.json's steps, or a model's step_specs as such entries


class OneProgramSteps(NamedTuple):
    """How the decoding calls run through one step program: ``described`` gives ``steps`` with
    an entry for each call; ``runner`` runs them over a runner of the exported programs;
    ``in_place`` gives the cache of one row holding nothing where the runner's ``advance`` reads
    each layer's cache where it lies (``BatchDecoder``'s rows then stay in ``KVSlots``), else None."""

    described: Callable[[Steps], Dict[str, Dict[str, Any]]]
    runner: Callable[[StepRunner, Steps], StepRunner]
    in_place: Callable[[Steps], Optional[np.ndarray]]


ONE_PROGRAM_STEPS: Dict[str, OneProgramSteps] = {
    ADVANCE: OneProgramSteps(advance_steps, lambda run, steps: AdvanceRunner(run, empty_cache(steps), in_place(steps)),
                             lambda steps: empty_cache(steps) if in_place(steps) else None),
    INFILL: OneProgramSteps(infill_steps, lambda run, steps: InfillRunner(run, steps[INFILL]), infill_cache),
}


def one_program(steps: Steps) -> str:
    """The program of ``ONE_PROGRAM_STEPS`` that ``steps`` has, or ``""``."""
    return next((name for name in ONE_PROGRAM_STEPS if name in steps), "")


def caller_steps(steps: Steps) -> Dict[str, Dict[str, Any]]:
    """``steps`` with an entry for each decoding call its one program runs (as they are where it
    has none)."""
    program = one_program(steps)
    return ONE_PROGRAM_STEPS[program].described(steps) if program else {k: dict(v) for k, v in steps.items()}


def steps_runner(run: StepRunner, steps: Steps) -> StepRunner:
    """A runner of every decoding call over ``run`` (which runs the programs of ``steps``): the
    one program's runner, or ``run`` itself for an export of several programs."""
    program = one_program(steps)
    return ONE_PROGRAM_STEPS[program].runner(run, steps) if program else run


def in_place_cache(steps: Steps) -> Optional[np.ndarray]:
    """The cache of one row holding nothing where the one program of ``steps`` decodes rows whose
    caches stay in place (``OneProgramSteps.in_place``), else None."""
    program = one_program(steps)
    return ONE_PROGRAM_STEPS[program].in_place(steps) if program else None
