"""Pickled weight files (``.pdparams``, ERNIE-kit's single-file ``params``) read without running
code from them.

Paddle's ``paddle.load`` unpickles with Python's full unpickler, so a weights file downloaded or
received can run any code it names (``os.system``, ...). This module reads the same files through
an unpickler that admits only what a weights file made by ``paddle.save``, ``paddle.static.save``
or PaddleNLP's ``save_pretrained`` holds: dicts and ``OrderedDict``, tuples, numpy arrays, their
dtypes and scalars, the bytes of protocol-2 files (``_codecs.encode``) and Paddle's own
reconstruction of a saved tensor (``eval('data', {'data': array})``, and nothing else through
``eval``). Any other global is refused before it is called, with one error naming the file and
the global, as ``torch.load(weights_only=True)`` does. Hand-written because Paddle has no such
loader; ``tests/test_pickled_weights.py`` checks it against ``paddle.load`` bit for bit.

What comes back is what ``paddle.load(path, return_numpy=True)`` returns for a state dict: a
dict of parameter name to numpy array, with Paddle's split large parameters joined again and
its name table dropped. Nothing here imports Paddle.
"""
from __future__ import annotations

import codecs
import collections
import io
import pickle
from typing import Any, Callable, Dict, Mapping, Tuple

import numpy as np

from wenxin.common.errors import CheckpointError

# the keys paddle.save adds beside the parameters (paddle/framework/io_utils.py)
NAME_TABLE_KEY = "StructuredToParameterName@@"
SPLIT_PARAMS_KEY = "UnpackBigParamInfor@@"

_numpy_core = getattr(np, "_core", None) or np.core  # numpy 2 renamed numpy.core to numpy._core


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle named a global that a weights file never holds."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _saved_tensor(expression: Any, namespace: Any = None) -> np.ndarray:
    """The one ``eval`` call Paddle's pickles make: ``eval('data', {'data': <array>})``."""
    if expression == "data" and isinstance(namespace, dict) and set(namespace) == {"data"} \
            and isinstance(namespace["data"], np.ndarray):
        return namespace["data"]
    raise RefusedGlobal(f"builtins.eval({expression!r:.60}, ...)")


def _latin1_bytes(text: Any, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode(str, 'latin1')``: how protocol-2 pickles written by Python 3 carry bytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise RefusedGlobal(f"_codecs.encode({type(text).__name__}, {encoding!r:.20})")
    return codecs.encode(text, encoding)


def _allowed_globals() -> Dict[Tuple[str, str], Callable[..., Any]]:
    numpy_names = {
        "_reconstruct": _numpy_core.multiarray._reconstruct,
        "scalar": _numpy_core.multiarray.scalar,
    }
    allowed: Dict[Tuple[str, str], Callable[..., Any]] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_bytes,
    }
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        for name, value in numpy_names.items():
            allowed[(module, name)] = value
    for module in ("numpy.core.numeric", "numpy._core.numeric"):  # protocol 5 arrays
        allowed[(module, "_frombuffer")] = _numpy_core.numeric._frombuffer
    for module in ("builtins", "__builtin__"):  # __builtin__: protocol 2 with fix_imports
        allowed[(module, "tuple")] = tuple
        allowed[(module, "eval")] = _saved_tensor
    return allowed


_ALLOWED = _allowed_globals()


class WeightsUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals a weights file holds (see the module doc)."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise RefusedGlobal(f"{module}.{name}") from None

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedGlobal(f"persistent id {pid!r:.60}")


def loads_weights(data: bytes) -> Any:
    """Unpickle ``data`` with :class:`WeightsUnpickler` (``latin1``, as ``paddle.load`` reads
    Python 2 pickles)."""
    return WeightsUnpickler(io.BytesIO(data), encoding="latin1").load()


def load_pickled_weights(path: str, what: str = "params file") -> Dict[str, np.ndarray]:
    """The parameters of a pickled weights file, as numpy arrays by name.

    Raises ``CheckpointError`` naming ``path`` for a missing or unreadable file, a refused
    global, a truncated or corrupt pickle, and for anything that is not a dict of numeric
    arrays."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CheckpointError(f"{what} not found: {path}") from None
    except OSError as e:
        raise CheckpointError(f"{what}: cannot read {path} ({e.strerror or e})") from None
    try:
        loaded = loads_weights(data)
    except RefusedGlobal as e:
        raise CheckpointError(
            f"{what} refused: {path} names {e.name}, which a weights file never holds (unpickling it could run "
            f"code); nothing from it was run. Load weights only from files you trust, as safetensors or a plain "
            f"paddle.save state dict") from None
    except Exception as e:  # pickle raises many types for truncated or corrupt data
        raise CheckpointError(f"{what} is corrupt or unreadable: {path} ({type(e).__name__}: {e})") from None
    return state_dict_arrays(loaded, f"{what} {path}")


def state_dict_arrays(loaded: Any, source: str) -> Dict[str, np.ndarray]:
    """A loaded pickle as ``{name: array}``: Paddle's ``(name, array)`` tensor tuples become
    arrays, split large parameters are joined, the name table is dropped."""
    if not isinstance(loaded, Mapping):
        raise CheckpointError(f"{source}: not a parameter dict (got {type(loaded).__name__})")
    params = dict(loaded)
    params.pop(NAME_TABLE_KEY, None)
    if SPLIT_PARAMS_KEY in params:
        params = _join_split_params(params, source)
    arrays: Dict[str, np.ndarray] = {}
    for name, value in params.items():
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], np.ndarray):
            value = value[1]  # paddle.save's tensor: (tensor name, data)
        if not isinstance(name, str) or not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
            kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise CheckpointError(f"{source}: entry {name!r:.80} is not a numeric array (got {kind})")
        arrays[name] = value
    return arrays


def _join_split_params(params: Dict[str, Any], source: str) -> Dict[str, Any]:
    """Paddle's protocol 2/3 files split parameters over 2**30 bytes into slices named in
    ``UnpackBigParamInfor@@``: ``{name: {"OriginShape": shape, "slices": [slice names]}}``."""
    info = params.pop(SPLIT_PARAMS_KEY)
    if not isinstance(info, Mapping):
        raise CheckpointError(f"{source}: {SPLIT_PARAMS_KEY} is not a dict")
    for name, entry in info.items():
        try:
            slices = [params.pop(part) for part in entry["slices"]]
            shape = tuple(int(d) for d in entry["OriginShape"])
            params[name] = np.concatenate([np.asarray(part).ravel() for part in slices]).reshape(shape)
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"{source}: split parameter {name!r:.80} cannot be joined ({type(e).__name__}: "
                                  f"{e})") from None
    return params
