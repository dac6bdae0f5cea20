"""Parameters into a model: reading them from a checkpoint or a params file (wenxin's,
PaddleNLP's, ERNIE-kit's), matching them to the model's names, shapes and dtypes, and the report
of what matched (``LoadReport``). The checkpoint folders themselves are ``wenxin.controller.checkpoint``'s."""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np

from wenxin.common.errors import CheckpointError
from wenxin.common.manifest import MANIFEST_FILE
from wenxin.common.pickled_weights import load_pickled_weights
from wenxin.common.state_io import load_arrays
from wenxin.controller.checkpoint import LEGACY_MODEL_FILE, MODEL_FILE, verify
from wenxin.translation import pretrained


def load_model_params(path: str, what: str = "checkpoint model file") -> Dict[str, Any]:
    """Parameters from a checkpoint folder (verified), a ``.safetensors`` file, or a pickled
    ``.pdparams`` file. A pickle is read through ``wenxin.common.pickled_weights``, which refuses
    anything but arrays, so no file runs code when it loads."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, MANIFEST_FILE)):
            verify(path)
            return load_arrays(os.path.join(path, MODEL_FILE), what)
        if os.path.isfile(os.path.join(path, MODEL_FILE)):
            return load_arrays(os.path.join(path, MODEL_FILE), what)
        path = os.path.join(path, LEGACY_MODEL_FILE)
    if path.endswith(".safetensors"):
        return load_arrays(path, what)
    return load_pickled_weights(path, what)


def resolve_params_file(path: str) -> str:
    """A params file, or a checkpoint folder (its model file, or a legacy ``model.pdparams``)."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, MODEL_FILE)) or not os.path.isfile(os.path.join(path, LEGACY_MODEL_FILE)):
            return os.path.join(path, MODEL_FILE)
        return os.path.join(path, LEGACY_MODEL_FILE)
    return path


def load_pretrained_params(path: str, model_names: Iterable[str]) -> Tuple[Dict[str, Any], str, str]:
    """Parameters of ``trainer.checkpoints.pre_train_model[].params_path`` under the model's names.

    ``path`` is a wenxin checkpoint folder or params file, a PaddleNLP model folder, an ERNIE-kit
    ``<model>_dir`` or its ``params`` (folder or file). ERNIE/BERT names are renamed to
    ``ernie.*`` when that matches more of ``model_names`` than the names as saved (a wenxin
    model's own ``encoder.*`` stays as it is). Returns (params, the file or folder read, the
    layout: ``erniekit``, ``paddlenlp`` or ``wenxin``)."""
    source = pretrained.find_weights(path) or path
    erniekit_params = os.path.isdir(source) and os.path.basename(os.path.normpath(source)) == "params"
    if pretrained.is_tensor_folder(source) or erniekit_params:
        params: Mapping[str, Any] = pretrained.read_tensor_folder(source)
    elif os.path.isdir(source):
        source = resolve_params_file(source)
        params = load_model_params(path, "pretrained params file")
    else:
        params = load_model_params(source, "pretrained params file")
    if not isinstance(params, Mapping):
        raise CheckpointError(f"{source}: not a parameter dict (got {type(params).__name__})")
    renamed, layout = pretrained.to_wenxin_names(params)
    wanted = set(model_names)
    if layout != "wenxin" and len(wanted.intersection(renamed)) <= len(wanted.intersection(params)):
        return dict(params), source, "wenxin"
    return renamed, source, layout


def _as_array(value: Any) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


class LoadReport:
    """What a parameter load matched, missed, did not expect and skipped for shape mismatch."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.loaded: List[str] = []
        self.missing: List[str] = []
        self.unexpected: List[str] = []
        self.mismatched: List[Tuple[str, Tuple[int, ...], Tuple[int, ...]]] = []
        self.cast: List[Tuple[str, str, str]] = []  # (name, file dtype, model dtype): floats of another width

    def summary(self) -> str:
        lines = [f"loaded {len(self.loaded)} parameters from {self.source}"]
        if self.missing:
            lines.append(f"  missing in file ({len(self.missing)}, keep their init): {', '.join(self.missing)}")
        if self.unexpected:
            lines.append(f"  unexpected in file ({len(self.unexpected)}, ignored): {', '.join(self.unexpected)}")
        for name, want, got in self.mismatched:
            lines.append(f"  shape mismatch, skipped: {name}: model {list(want)} vs file {list(got)}")
        if self.cast:
            lines.append(f"  cast to the model's dtype ({len(self.cast)}): "
                         + ", ".join(f"{name} {got} -> {want}" for name, got, want in self.cast))
        return "\n".join(lines)


def match_parameters(model_state: Mapping[str, Any], loaded: Mapping[str, Any], source: str,
                     prefix_map: Optional[Mapping[str, str]] = None) -> Tuple[Dict[str, np.ndarray], LoadReport]:
    """Rename ``loaded`` by ``prefix_map`` and keep what fits ``model_state`` by name and shape."""
    if not isinstance(loaded, Mapping):
        raise CheckpointError(f"{source}: not a parameter dict (got {type(loaded).__name__})")
    renamed: Dict[str, Any] = {}
    for name, value in loaded.items():
        for old, new in (prefix_map or {}).items():
            if name.startswith(old):
                name = new + name[len(old):]
                break
        renamed[name] = value
    report = LoadReport(source)
    matched: Dict[str, np.ndarray] = {}
    for name, param in model_state.items():
        if name not in renamed:
            report.missing.append(name)
            continue
        value = _as_array(renamed[name])
        want = tuple(param.shape)
        if tuple(value.shape) != want:
            report.mismatched.append((name, want, tuple(value.shape)))
            continue
        matched[name] = _in_model_dtype(name, value, param, report)
        report.loaded.append(name)
    report.unexpected = sorted(set(renamed) - set(model_state))
    return matched, report


def _model_dtype(param: Any) -> Optional[np.dtype]:
    """The numpy dtype of a model parameter (a Paddle tensor or an array); None for dtypes numpy
    lacks (bfloat16)."""
    name = str(param.dtype).replace("paddle.", "")
    if name == "bfloat16":  # numpy's own types lack it; once ml_dtypes is imported (ONNX Runtime's
        return None  # quantization does) np.dtype knows one, but not as a float: held_dtype handles it
    try:
        return np.dtype(name)
    except TypeError:
        return None


def _in_model_dtype(name: str, value: np.ndarray, param: Any, report: LoadReport) -> np.ndarray:
    """``value`` in the parameter's dtype: floats of another width are cast (and reported);
    any other difference (integers or booleans for floats, say) is one error naming both."""
    want = _model_dtype(param)
    if want is None or value.dtype == want:
        return value
    if value.dtype.kind == "f" and want.kind == "f":
        report.cast.append((name, str(value.dtype), str(want)))
        return value.astype(want)
    raise CheckpointError(f"{report.source}: {name} holds {value.dtype} values where the model has {want}; "
                          f"this is not a weights file for this model")


def rename_state_keys(state: Mapping[str, Any], names: Mapping[str, str]) -> Dict[str, Any]:
    """Rename optimizer-state keys ``<param name>_<suffix>`` by the longest matching param name.

    Optimizer accumulators are named after Paddle's internal parameter names (``linear_3.w_0``),
    which depend on creation order; checkpoints store them under structured names
    (``fc.weight_moment1_0``) so they load into a model built in another process or mode."""
    ordered = sorted(names, key=len, reverse=True)
    renamed: Dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, Mapping):  # e.g. master_weights, LR_Scheduler
            renamed[key] = rename_state_keys(value, names) if key == "master_weights" else dict(value)
            continue
        new = key
        for old in ordered:
            if key == old or key.startswith(old + "_"):
                new = names[old] + key[len(old):]
                break
        renamed[new] = value
    return renamed
