"""``wenxin export --format onnx``: the exported Paddle model converted to ``model.onnx`` with
paddle2onnx, kept only when ONNX Runtime reproduces Paddle Inference's outputs on real inputs."""
from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from wenxin.common.errors import InferenceError
from wenxin.data.export_bundle import ADVANCE_STEP, INFILL_STEP, PREPROCESS_FILE, seal_export
from wenxin.inference.onnx_backend import INT8, ONNX_FILE, onnx_file
from wenxin.inference.onnx_convert import ONE_FILE_BYTES, external_data_file, program_files
from wenxin.inference.paddle_backend import generation_files, model_files, runs_empty_groups
from wenxin.models.advance_step import PAIR, in_place, in_place_inputs, no_rows, pair_feed, pair_runs_alone
from wenxin.models.infill_step import LENGTHS, SOURCE_IDS, SOURCE_POSITIONS, SOURCE_TYPES, InfillRunner

logger = logging.getLogger("wenxin")

OPSET = 13
TOLERANCE = 1e-5
CHECK_ROWS = 32  # dev examples both engines must agree on before model.onnx is kept


# paddle2onnx aborts the whole process (SIGABRT) on an operator it does not support, as it does
# for the CRF taggers' decoding; it runs in a child process (``wenxin.inference.onnx_convert``,
# which hands it the program with the weights as inputs) so that this is one error line.
# Its default graph optimizer is Polygraphy, which paddle2onnx runs with POLYGRAPHY_AUTOINSTALL_DEPS=1:
# Polygraphy then pip-installs what it misses (sympy, for ONNX Runtime's shape inference). Nothing
# may install packages at run time, so the optimizer is onnxoptimizer (a dependency of paddle2onnx),
# and the child cannot reach a package index (PIP_NO_INDEX) should anything else try.
CONVERTER = [sys.executable, "-m", "wenxin.inference.onnx_convert"]  # then: GRAPH PARAMS TARGET OPSET ONE_FILE_BYTES
QUANTIZER = [sys.executable, "-m", "wenxin.inference.onnx_quantize"]  # then: SOURCE TARGET ONE_FILE_BYTES


def convert_in_subprocess(graph: str, params: str, target: str, folder: str,
                          one_file_bytes: int = ONE_FILE_BYTES) -> None:
    """Convert the Paddle model files to ``target`` in a child process (``onnx_convert``: its
    weights inside it under ``one_file_bytes``, else beside it); raise one InferenceError, with
    paddle2onnx's own error line, when it fails or crashes."""
    env = {**os.environ, "GLOG_minloglevel": "2", "PIP_NO_INDEX": "1", "POLYGRAPHY_AUTOINSTALL_DEPS": "0"}
    try:
        proc = subprocess.run([*CONVERTER, graph, params, target, str(OPSET), str(one_file_bytes)], env=env,
                              capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        raise InferenceError(f"{folder}: paddle2onnx did not finish within 30 minutes") from None
    output = proc.stdout + proc.stderr
    logger.debug("paddle2onnx: %s", output)
    pass_on_words(proc.stderr, folder)
    too_large = re.search(r"exceeded maximum protobuf size of 2GB: (\d+)", output)
    if too_large:  # a legacy program converted with its weights: it says so, writes an empty file and exits 0
        raise InferenceError(f"{folder}: paddle2onnx cannot convert this model: its ONNX file would hold "
                             f"{int(too_large.group(1)):,} bytes, over ONNX's 2 GB limit for one file, and "
                             f"paddle2onnx {paddle2onnx_version()} writes no external weights for a legacy program; "
                             f"the Paddle model is exported and runs with the paddle backend")
    written = os.path.isfile(target) and os.path.getsize(target) > 0
    if proc.returncode == 0 and written:
        return
    errors = [line.split("]")[-1].strip() for line in output.splitlines() if "[ERROR]" in line]
    last = [line.strip() for line in output.splitlines() if line.strip()][-1:] or \
        [exit_words(proc.returncode) if proc.returncode or not os.path.isfile(target) else "an empty file written"]
    detail = "; ".join(dict.fromkeys(errors)) or last[0]
    raise InferenceError(f"{folder}: paddle2onnx cannot convert this model ({detail}); the Paddle model is "
                         f"exported and runs with the paddle backend")


def paddle2onnx_version() -> str:
    """The installed paddle2onnx's version (without importing it: it loads Paddle)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("paddle2onnx")
    except PackageNotFoundError:
        return "(not installed)"


def check_in_subprocess(folder: str, onnx_file: str, batches: Sequence[Dict[str, np.ndarray]],
                        program: str = "") -> Dict[str, Any]:
    """ONNX Runtime's outputs against Paddle Inference's on each of ``batches``, compared in a
    child process (``wenxin.inference.onnx_check``): the two engines' copies of the model stay out
    of the exporting process (a training run's), whose peak memory they would otherwise raise by
    about twice the model's size."""
    import tempfile

    from wenxin.inference.onnx_check import batch_file_arrays
    with tempfile.TemporaryDirectory(prefix="wenxin-onnx-check-") as scratch:
        batch_file = os.path.join(scratch, "batch.npz")
        np.savez(batch_file, **batch_file_arrays(batches))  # type: ignore[arg-type]  # (numpy stubs: allow_pickle)
        env = {**os.environ, "GLOG_minloglevel": "2"}
        try:
            proc = subprocess.run([sys.executable, "-m", "wenxin.inference.onnx_check", folder, onnx_file, batch_file,
                                   *([program] if program else [])],
                                  env=env, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            raise InferenceError(f"{folder}: checking {ONNX_FILE} against Paddle did not finish within 30 minutes") \
                from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise InferenceError(f"{folder}: checking {ONNX_FILE} against Paddle failed "
                             f"({last_words(proc.stderr, proc.returncode)})")
    result: Dict[str, Any] = json.loads(lines[-1])
    if "error" in result:
        raise InferenceError(str(result["error"]))
    return result


def check_batch(readers: Dict[str, Any], rows: int = CHECK_ROWS) -> Dict[str, np.ndarray]:
    """The batch both engines must agree on: the first ``rows`` dev examples (else training's)."""
    reader = readers.get("dev_reader") or readers["train_reader"]
    return reader.collate_rows(list(range(min(rows, len(reader)))))


def export_onnx(folder: str, check_batch: Dict[str, np.ndarray], tolerance: float = TOLERANCE,
                one_file_bytes: int = ONE_FILE_BYTES) -> str:
    """Write ``folder/model.onnx`` beside the Paddle model in ``folder`` (its weights in
    ``model.onnx.data`` beside it from ``one_file_bytes``: ``onnx_convert``); ``check_batch`` (input
    arrays by name, e.g. a collated dev batch) must give the same outputs in both within
    ``tolerance``, or nothing is written. Returns the ONNX file's path."""
    if importlib.util.find_spec("paddle2onnx") is None:
        raise InferenceError('--format onnx needs paddle2onnx and onnxruntime: pip install "wenxin[onnx]"')
    files = model_files(folder)
    steps = generation_files(folder)
    if files is None and steps is not None:
        if os.path.basename(steps[0]).split(".")[0] not in STEP_PROGRAM_PLANS:
            raise InferenceError(f"{folder}: a generation model's export whose step program is "
                                 f"{os.path.basename(steps[0])} (from an older wenxin) is written and runs with the "
                                 f"paddle backend; converting it to ONNX is not supported (only an export with "
                                 f"{' or '.join(STEP_PROGRAM_PLANS)}: export it again)")
        graph, params = steps
        return export_step_onnx(folder, graph, params, tolerance, one_file_bytes)
    if files is None:
        raise InferenceError(f"{folder}: no exported Paddle model to convert")
    graph, params = files
    target = os.path.join(folder, ONNX_FILE)
    with building_in(folder) as building:
        built = os.path.join(building, ONNX_FILE)
        convert_in_subprocess(graph, params, built, folder, one_file_bytes)
        checked = check_in_subprocess(folder, built, [check_batch])
        difference, rows = checked["difference"], checked["rows"]
        if not difference <= tolerance:
            why = (f"; {checked['flips']} predicted ids differ, as a near-tie between two labels can under float "
                   f"rounding") if checked["flips"] else ""
            raise InferenceError(f"{folder}: the ONNX model's outputs differ from Paddle's by {difference:.3g} "
                                 f"(more than {tolerance:g}) on {rows} examples{why}; {ONNX_FILE} was not written")
        move_built(building, folder)
        seal_export(folder)  # the manifest now covers model.onnx too
    logger.info("exported %s (ONNX opset %d; outputs within %.2g of Paddle's on %d examples)", target, OPSET,
                difference, rows)
    return target


STEP_CHECK_ROWS, STEP_CHECK_TOKENS = 2, 8


def advance_check_batch(steps: Dict[str, Any]) -> Dict[str, np.ndarray]:
    """``advance``'s inputs both engines must agree on: two prompts of 8 and 5 tokens (ids 1-8)
    after an empty cache, the shorter one's first columns padding (``batch_prefill``'s layout).
    ``steps``: the export's (``read_steps``)."""
    from wenxin.models.advance_step import empty_cache, layer_inputs, with_hidden_column
    rows, width = STEP_CHECK_ROWS, STEP_CHECK_TOKENS
    lengths = [width, width - 3]
    tokens = np.zeros((rows, width), dtype=np.int64)
    positions = np.zeros((rows, width), dtype=np.int64)
    visible = np.zeros((rows, width, width), dtype=np.float32)
    for row, length in enumerate(lengths):
        pad = width - length
        tokens[row, pad:] = np.arange(1, length + 1)
        positions[row, pad:] = np.arange(length)
        visible[row] = np.eye(width)
        visible[row, pad:, pad:] = np.tril(np.ones((length, length)))
    cache = np.repeat(empty_cache(steps), rows, axis=2)  # [L, 2, R, KV, 0, D]
    if not in_place(steps):
        return {"tokens": tokens, "positions": positions, "cache": cache, "visible": visible}
    cache, visible = with_hidden_column(cache, visible)
    return {"tokens": tokens, "positions": positions, "visible": visible, **layer_inputs(cache)}


class ConvertedProgram(NamedTuple):
    """One step program to convert: its Paddle files, the batches ONNX Runtime must agree with
    Paddle on, and whether its float32 file is kept (else it is only the int8 copy's source)."""

    program: str
    files: Tuple[str, str]
    batches: List[Dict[str, np.ndarray]]
    kept: bool


def advance_programs(folder: str, graph: str, params: str) -> List[ConvertedProgram]:
    """What an ERNIE 4.5 export converts, the last one also quantized: ``advance_pair`` alone
    where it runs a group of no rows (``pair_runs_alone``; checked on two groups and on one beside
    none); ``advance``, then the pair as int8 only, in an older export with the pair; else
    ``advance``."""
    steps = read_steps(folder)
    batch = advance_check_batch(steps)
    pair = model_files(folder, PAIR) if in_place(steps) else None
    if pair is None:
        return [ConvertedProgram(ADVANCE_STEP, (graph, params), [batch], True)]
    two_groups = pair_feed(batch, {name: value[1:] for name, value in batch.items()})  # two rows, then one
    if pair_runs_alone(steps):  # checked beside no rows too where Paddle runs that (runs_empty_groups)
        beside_none = [pair_feed(batch, no_rows(batch))] if runs_empty_groups() else []
        return [ConvertedProgram(PAIR, pair, [two_groups, *beside_none], True)]
    return [ConvertedProgram(ADVANCE_STEP, (graph, params), [batch], True),
            ConvertedProgram(PAIR, pair, [two_groups], False)]


def infill_programs(folder: str, graph: str, params: str) -> List[ConvertedProgram]:
    """What an ERNIE-Gen export converts: ``infill``, checked on two sources of 8 and 5 tokens
    prefilled as rows of one call (``InfillRunner.prefill_feed``: ids 1-8, the shorter one's first
    columns padding) and on a decoding step of those two rows after 9 columns of cache (seeded
    random keys and values)."""
    entry = read_steps(folder)[INFILL_STEP]
    runner = InfillRunner(lambda name, inputs: {}, entry)
    ids = np.zeros((STEP_CHECK_ROWS, STEP_CHECK_TOKENS), dtype=np.int64)
    lengths = np.asarray([STEP_CHECK_TOKENS, STEP_CHECK_TOKENS - 3])
    for row, length in enumerate(lengths):
        ids[row, :length] = np.arange(1, length + 1)
    prefill, _ = runner.prefill_feed({SOURCE_IDS: ids, SOURCE_TYPES: np.zeros_like(ids), LENGTHS: lengths,
                                      SOURCE_POSITIONS: np.broadcast_to(np.arange(ids.shape[1]), ids.shape)})
    layers, _, _, heads, _, width = runner.empty.shape
    columns = STEP_CHECK_TOKENS + 1
    cache = np.random.default_rng(0).standard_normal((layers, 2, STEP_CHECK_ROWS, heads, columns, width))
    step = {"tokens": np.asarray([[3], [4]]), "types": np.full((STEP_CHECK_ROWS, 1), runner.target_type),
            "positions": np.asarray([[columns], [columns - 3]]),
            **in_place_inputs(cache.astype(np.float32), np.ones((STEP_CHECK_ROWS, 1, columns + 1), np.float32))}
    return [ConvertedProgram(INFILL_STEP, (graph, params), [prefill, step], True)]


# a generation export's one step program -> what converting it converts and checks
STEP_PROGRAM_PLANS: Dict[str, Callable[[str, str, str], List[ConvertedProgram]]] = {
    ADVANCE_STEP: advance_programs, INFILL_STEP: infill_programs}


def export_step_onnx(folder: str, graph: str, params: str, tolerance: float = TOLERANCE,
                     one_file_bytes: int = ONE_FILE_BYTES) -> str:
    """A generation export's step program converted to ONNX beside it (``STEP_PROGRAM_PLANS``:
    ``advance_pair.onnx``, or ``advance.onnx`` in an older export; ERNIE-Gen's ``infill.onnx``),
    its logits within ``tolerance`` of Paddle's (relative to their largest), and an int8 copy of
    the last one converted (ONNX Runtime's dynamic quantization, weights int8 per output channel,
    with activations quantized per token: ``onnx_quantize``), whose difference is measured and
    logged (``advance_pair.int8.onnx``: the int8 engine runs every call as the pair, so a serving
    turn is one call; ``advance.int8.onnx`` for an export without the pair; ``infill.int8.onnx``).
    A program's weights lie in ``<file>.data`` beside it where they would take it past
    ``one_file_bytes`` (``onnx_convert``). Returns the float32 file's path."""
    program = os.path.basename(graph).split(".")[0]
    plan = STEP_PROGRAM_PLANS[program](folder, graph, params)
    source = plan[-1]
    name8 = onnx_file(source.program, INT8)
    kept = os.path.join(folder, onnx_file(plan[0].program))  # the first is always kept
    checks = {}
    with building_in(folder) as building:
        for converted in plan:
            built = os.path.join(building, onnx_file(converted.program))
            convert_in_subprocess(*converted.files, built, folder, one_file_bytes)
            checks[converted.program] = _checked(folder, built, converted.batches, converted.program, tolerance,
                                                 onnx_file(converted.program) if converted.kept else name8)
        checked8 = int8_copy(os.path.join(building, onnx_file(source.program)), os.path.join(building, name8),
                             source, folder, one_file_bytes)
        for converted in plan:
            if not converted.kept:  # it was the int8 copy's source only
                for path in program_files(os.path.join(building, onnx_file(converted.program))):
                    os.remove(path)
        if checked8 is None:  # an int8 copy of an earlier export would not be this program's
            for path in program_files(os.path.join(folder, name8)):
                os.remove(path)
        move_built(building, folder)
        seal_export(folder)
    float32 = f"exported {kept} (float32: logits within {checks[plan[0].program]['difference']:.2g} of Paddle's)"
    if checked8 is not None:
        logger.info("%s and %s (int8: within %.2g of %.2g, %d of %d rows' best token moved)", float32, name8,
                    checked8["difference"], checked8["scale"], checked8["flips"], checked8["rows"])
    else:
        logger.info("%s, without its int8 copy", float32)
    return kept


def int8_copy(source: str, target: str, program: "ConvertedProgram", folder: str,
              one_file_bytes: int) -> Optional[Dict[str, Any]]:
    """``source`` quantized to int8 into ``target`` and checked against Paddle (the check's
    result), or None where that failed: said in a warning and the float32 program kept (a
    quantizer killed for memory, say, need not cost the float32 program)."""
    try:
        quantize_in_subprocess(source, target, folder, one_file_bytes)
        return check_in_subprocess(folder, target, program.batches, program.program)
    except InferenceError as e:
        for path in program_files(target):
            os.remove(path)
        logger.warning("%s (%s not written; the float32 program is, and --backend onnxruntime-int8 cannot serve "
                       "this export)", e, os.path.basename(target))
        return None


@contextlib.contextmanager
def building_in(folder: str) -> Iterator[str]:
    """A hidden scratch folder inside ``folder`` (deleted after) where ONNX files are made under
    their final names, as an external data file is named inside its program; ``move_built``
    moves them in once checked."""
    building = tempfile.mkdtemp(prefix=".onnx-", dir=folder)
    try:
        yield building
    finally:
        shutil.rmtree(building, ignore_errors=True)


def move_built(building: str, folder: str) -> None:
    """Move what ``building`` holds into ``folder``, deleting the external data file of a program
    replaced by one that holds its weights itself."""
    for name in sorted(os.listdir(building)):
        replaced = os.path.join(folder, name)
        if not os.path.exists(external_data_file(os.path.join(building, name))):
            with contextlib.suppress(FileNotFoundError):
                os.remove(external_data_file(replaced))
        os.replace(os.path.join(building, name), replaced)


def _checked(folder: str, onnx_path: str, batches: List[Dict[str, np.ndarray]], program: str, tolerance: float,
             target: str) -> Dict[str, Any]:
    """The converted ``program``'s logits against Paddle's on ``batches``: within ``tolerance`` of
    their largest, or an error saying ``target`` (a file name) was not written."""
    checked = check_in_subprocess(folder, onnx_path, batches, program)
    if not checked["difference"] <= tolerance * max(checked["scale"], 1.0):
        raise InferenceError(f"{folder}: the ONNX program's logits differ from Paddle's by "
                             f"{checked['difference']:.3g} (their largest is {checked['scale']:.3g}); "
                             f"{target} was not written")
    return checked


def read_steps(folder: str) -> Dict[str, Any]:
    """``preprocess.json``'s ``steps`` of the export in ``folder``."""
    with open(os.path.join(folder, PREPROCESS_FILE), encoding="utf-8") as f:
        steps: Dict[str, Any] = json.load(f)["steps"]
    return steps


def quantize_in_subprocess(source: str, target: str, folder: str, one_file_bytes: int = ONE_FILE_BYTES) -> None:
    """``source`` quantized to int8 into ``target`` in a child process (``onnx_quantize``, a group
    of weights at a time: at ERNIE-4.5-0.3B's size it holds 3.2 GiB while it works, 2.4x the
    float32 weights, where ONNX Runtime's quantizer handed them all held 5.8)."""
    try:
        proc = subprocess.run([*QUANTIZER, source, target, str(one_file_bytes)], capture_output=True, text=True,
                              timeout=1800, env={**os.environ, "PIP_NO_INDEX": "1"})
    except subprocess.TimeoutExpired:
        raise InferenceError(f"{folder}: quantizing the ONNX program to int8 did not finish within 30 minutes") \
            from None
    pass_on_words(proc.stderr, folder)
    if proc.returncode != 0 or not os.path.isfile(target):
        raise InferenceError(f"{folder}: quantizing the ONNX program to int8 failed "
                             f"({last_words(proc.stderr, proc.returncode)})")


def pass_on_words(stderr: str, folder: str) -> None:
    """Log what a conversion's child said itself (a ``wenxin: `` line: a fallback it took)."""
    for line in stderr.splitlines():
        if line.startswith("wenxin: "):
            logger.warning("%s: %s", folder, line[len("wenxin: "):])


def last_words(stderr: str, returncode: int) -> str:
    """A failed child's last line on stderr (300 characters at most), or how it ended."""
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    return said[-1][:300] if said else exit_words(returncode)


def exit_words(returncode: int) -> str:
    """How a child process that said nothing ended."""
    if returncode >= 0:
        return f"exit status {returncode}"
    name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
    return f"killed by {name}" + (", as the system does when it runs out of memory" if name == "SIGKILL" else "")
