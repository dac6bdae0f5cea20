"""ONNX Runtime's packed weights kept on disk and mapped, so a large program's weights are held once.

ONNX Runtime packs each weight of a product (``MatMul``, ``MatMulIntegerToFloat``) into the layout
its kernels read while it loads, and keeps the weight as the file gave it beside the packed copy:
a step program of ERNIE-4.5-0.3B's shape held its weights and more on the heap. ONNX Runtime can
write a program with its weights already packed (``session.save_external_prepacked_constant_initializers``,
ONNX Runtime 1.21 and later) into a data file it maps when it loads: the kernels read the packed
weights from the mapped file, the weights as given are read only where a node reads them directly
(an embedding's rows), and what the process holds is
the packed weights once, in pages of a file (shared by every process that serves the same export,
given back to the system under pressure, read again from disk when needed). Measured at that shape,
one thread, after decoding 16 streams (``benchmarks/onnx_prepacked.py``): float32 1.59 GiB
resident, 0.17 of it on the heap, against 2.21 and 2.17 (1.34 GiB of weights); int8 0.63 and 0.18
against 0.84 and 0.79 (0.44 GiB); the same outputs, 0.91-0.99x the CPU a token, loading in 0.5-0.7x
the time.

The packed layout belongs to the CPU's instruction set and to ONNX Runtime's version, so the
packed copy is made on the machine that serves, the first time a program is loaded, in a child
process (the peak of loading, once), into wenxin's cache folder (``wenxin.common.cache_folder``)::

    <cache>/onnx/<program>-<SHA-256 of the program, 16>-ort<version>-<CPU, 8>/
        model.onnx, model.onnx.data, entry.json (written last: what it was made from)

and found there afterwards (``wenxin cache`` lists the entries, ``--clear`` deletes them). The key
is the program's SHA-256 from its export's manifest (verified before a backend loads; with its
external data file's where its weights lie beside it), ONNX Runtime's version and the CPU's model
and instruction-set flags.

``$WENXIN_ONNX_PREPACKED`` chooses: ``auto`` (the default) for programs of
``PREPACKED_MIN_BYTES`` or more (a generation export's step programs; a classifier's small graph
gains too little to be worth a cache entry), ``on`` for every program, ``off`` never. A copy that
cannot be made (a read-only cache, a full disk, an ONNX Runtime before 1.21) or read is logged once
and the program is loaded as it is.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

from wenxin.common.cache_folder import cache_root
from wenxin.common.errors import ConfigError
from wenxin.common.files import exclusive, write_text_atomically
from wenxin.common.manifest import sealed_sha256
from wenxin.inference.onnx_convert import program_files

logger = logging.getLogger("wenxin")
SETTING_ENV = "WENXIN_ONNX_PREPACKED"
SETTINGS = ("auto", "on", "off")
PREPACKED_DIR = "onnx"
PREPACKED_MIN_BYTES = 64 << 20  # auto: programs at least this large
FIRST_VERSION = (1, 21)  # the first ONNX Runtime that writes packed weights to the data file (tried: 1.19.2 and
# 1.20.1 accept the setting and write the weights as given only)
MODEL, DATA, ENTRY = "model.onnx", "model.onnx.data", "entry.json"
MAKE_SECONDS, MAKE_SECONDS_PER_GB = 300, 120  # the child's time limit: loading and packing, then writing


def setting() -> str:
    """``$WENXIN_ONNX_PREPACKED``, checked."""
    chosen = os.environ.get(SETTING_ENV, "auto").strip().lower() or "auto"
    if chosen not in SETTINGS:
        raise ConfigError(f"${SETTING_ENV}: {chosen!r} is not one of {', '.join(SETTINGS)}")
    return chosen


def runtime_writes_packed(version: str) -> bool:
    """Whether ONNX Runtime ``version`` writes packed weights to a program's data file."""
    try:
        numbers = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return False
    return numbers >= FIRST_VERSION


def cpu_key() -> str:
    """What the packed layout depends on besides ONNX Runtime: the machine, the CPU's model and its
    instruction-set flags (Linux ``/proc/cpuinfo``'s first processor), as 8 hex digits."""
    described = [platform.machine(), platform.processor()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name = line.split(":", 1)[0].strip()
                if name in ("model name", "flags", "Features", "CPU part"):
                    described.append(line.strip())
                elif not line.strip() and len(described) > 2:
                    break  # the first processor's block ends
    except OSError:
        pass
    return hashlib.sha256("\n".join(described).encode("utf-8")).hexdigest()[:8]


def entry_name(program_file: str, sha256: str, version: str) -> str:
    stem = os.path.basename(program_file)[: -len(".onnx")] if program_file.endswith(".onnx") else "program"
    return f"{stem}-{sha256[:16]}-ort{version}-{cpu_key()}"


def prepacked_program(folder: str, name: str) -> Optional[str]:
    """The packed copy of the program ``name`` in the export ``folder`` to load instead of it (made
    now if missing), or None: where the setting leaves it out, the folder's manifest does not list
    it (a folder not sealed yet, as while an export checks its conversion), or the copy cannot be
    made (logged)."""
    chosen = setting()
    program_file = os.path.join(folder, name)
    if chosen == "off" or (chosen == "auto" and program_bytes(program_file) < PREPACKED_MIN_BYTES):
        return None
    sha256 = program_sha256(folder, name)  # read only where a copy is wanted
    if sha256 is None:
        return None
    import onnxruntime
    if not runtime_writes_packed(onnxruntime.__version__):
        logger.info("ONNX Runtime %s cannot keep packed weights on disk (%s.%s or later can): %s loads as it is",
                    onnxruntime.__version__, *FIRST_VERSION, program_file)
        return None
    root = os.path.join(cache_root(), PREPACKED_DIR)
    entry = os.path.join(root, entry_name(program_file, sha256, onnxruntime.__version__))
    try:
        os.makedirs(root, exist_ok=True)
        with exclusive(entry + ".lock"):
            if not complete(entry):
                logger.info("%s: packing its weights for this CPU once, into %s (ONNX Runtime maps them from "
                            "there; $%s=off loads the program as it is)", program_file, entry, SETTING_ENV)
                started = time.perf_counter()
                shutil.rmtree(entry, ignore_errors=True)
                make_entry(program_file, sha256, entry)
                forget_older_copies(program_file, entry)
                logger.info("%s: packed in %.1f s", program_file, time.perf_counter() - started)
    except (OSError, PrepackError) as e:
        logger.warning("%s: loaded as it is, without its weights packed on disk (%s)", program_file, e)
        return None
    return os.path.join(entry, MODEL)


def program_bytes(program_file: str) -> int:
    """The size of ``program_file`` with its external data file where it has one."""
    return sum(os.path.getsize(path) for path in program_files(program_file))


def program_sha256(folder: str, name: str) -> Optional[str]:
    """The SHA-256 the manifest of ``folder`` records for its program ``name`` or, where the
    program's weights lie beside it, a SHA-256 of the two files' (None where one is not listed)."""
    digests = []
    for path in program_files(os.path.join(folder, name)):
        digest = sealed_sha256(folder, os.path.basename(path))
        if digest is None:
            return None
        digests.append(digest)
    return digests[0] if len(digests) == 1 else hashlib.sha256(" ".join(digests).encode("ascii")).hexdigest()


class PrepackError(Exception):
    """The child that packs a program failed (its last words)."""


def complete(entry: str) -> bool:
    """Whether ``entry`` was written whole: its ``entry.json`` (written last) names the data file's size."""
    try:
        with open(os.path.join(entry, ENTRY), encoding="utf-8") as f:
            described = json.load(f)
        return os.path.getsize(os.path.join(entry, DATA)) == described["data_bytes"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def make_entry(program_file: str, sha256: str, entry: str) -> None:
    """Pack ``program_file`` into ``entry`` in a child process (its peak memory is loading's, once)."""
    for left in glob.glob(glob.escape(entry) + ".*"):  # a build a killed process left (we hold the lock)
        if os.path.isdir(left):
            shutil.rmtree(left, ignore_errors=True)
    building = tempfile.mkdtemp(prefix=os.path.basename(entry) + ".", dir=os.path.dirname(entry))
    try:
        limit = MAKE_SECONDS + MAKE_SECONDS_PER_GB * program_bytes(program_file) / 1e9
        try:
            done = subprocess.run([sys.executable, "-m", __name__, program_file, building], capture_output=True,
                                  text=True, timeout=limit, check=False)
        except subprocess.TimeoutExpired:
            raise PrepackError(f"packing took over {limit:.0f} s") from None
        if done.returncode != 0:
            words = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise PrepackError(f"packing failed: {words}")
        described = {"program": os.path.abspath(program_file), "sha256": sha256,
                     "data_bytes": os.path.getsize(os.path.join(building, DATA))}
        write_text_atomically(os.path.join(building, ENTRY), json.dumps(described, indent=1))
        os.replace(building, entry)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def forget_older_copies(program_file: str, kept: str) -> None:
    """Delete the packed copies of what ``program_file`` held before (an export made again in the
    same place, a model folder's export rebuilt): its path now holds another program, so they would
    only fill the disk. A process still serving from one keeps its mapped pages until it ends."""
    program = os.path.abspath(program_file)
    for entry in cached_programs():
        if entry["program"] == program and entry["entry"] != kept:
            shutil.rmtree(entry["entry"], ignore_errors=True)
            with contextlib.suppress(OSError):
                os.remove(entry["entry"] + ".lock")


def write_packed(program_file: str, into: str) -> None:
    """Load ``program_file`` in ONNX Runtime with its graph optimized and weights packed as a
    session does, and write that program to ``into`` (``model.onnx`` and its ``model.onnx.data``)."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.optimized_model_filepath = os.path.join(into, MODEL)
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", DATA)
    options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    options.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
    onnxruntime.InferenceSession(program_file, options, providers=["CPUExecutionProvider"])
    if not os.path.isfile(os.path.join(into, DATA)):
        raise SystemExit(f"{program_file}: ONNX Runtime wrote no data file (no weights large enough to map)")


def discard(packed_model: str) -> None:
    """Delete the entry holding ``packed_model`` (one ONNX Runtime could not load): made again next time."""
    entry = os.path.dirname(packed_model)
    with exclusive(entry + ".lock"):
        shutil.rmtree(entry, ignore_errors=True)


def cached_programs() -> List[Dict[str, Any]]:
    """The packed programs the cache holds: each entry's folder, size in bytes and the program it was made from."""
    root = os.path.join(cache_root(), PREPACKED_DIR)
    found = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        entry = os.path.join(root, name)
        if not os.path.isdir(entry) or not complete(entry):
            continue
        with open(os.path.join(entry, ENTRY), encoding="utf-8") as f:
            program = json.load(f).get("program", "?")
        size = sum(os.path.getsize(os.path.join(entry, file)) for file in os.listdir(entry))
        found.append({"entry": entry, "bytes": size, "program": program})
    return found


def clear_programs() -> int:
    """Delete the packed programs; returns how many."""
    root = os.path.join(cache_root(), PREPACKED_DIR)
    count = len(cached_programs())
    shutil.rmtree(root, ignore_errors=True)
    return count


def main(argv: Optional[List[str]] = None) -> int:
    program_file, into = (sys.argv[1:] if argv is None else argv)[:2]
    write_packed(program_file, into)
    return 0


if __name__ == "__main__":
    sys.exit(main())
