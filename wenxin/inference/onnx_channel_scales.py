"""ONNX Runtime's per-channel int8 weight quantization, computed for all of a weight's channels at
once: ``vectorized_per_channel`` while ``quantize_dynamic`` runs.

ONNX Runtime's quantizer (``BaseQuantizer.quantize_weight_per_channel_impl``) quantizes a weight
one output channel at a time in Python: at ERNIE-4.5-0.3B's shape its 296,961 channels took 28 of
the int8 step's 67 seconds under cProfile, a part of the first wait of a model folder served with
``--backend onnxruntime-int8`` that grows with the model (the step 53.7-54.2 -> 39.5-40.1 s with
this, the same file). Hand-written for that measured reason,
for the case the int8 copy asks for (signed 8-bit, symmetric, the full range, no overrides), with
ONNX Runtime's own arithmetic done a channel row at a time: the channel's range widened to hold
zero and made symmetric, its scale ``(max - min) / 254`` in float64 stored in the weight's float
type (1 where it would fall below the type's smallest normal), the zero point 0, and each value
``round(x / scale)`` (half to even) clipped to [-128, 127]. The initializers it adds are the ones
ONNX Runtime adds (names, types, order).

Every weight is checked against ONNX Runtime's own ``quantize_data`` on a few of its channels (the
first, the last, the widest and some drawn at random); where one differs (another version's
arithmetic), or the call fails (an interface unlike the tested one), ONNX Runtime's loop quantizes
it and the weights after it; where the case is another, that weight; and with an ONNX Runtime
whose quantizer is not the kind this was written for (an older one, whose ``is_weight_symmetric``
is not a method), every weight. ``$WENXIN_ONNX_CHANNEL_SCALES=library`` always leaves the
quantization to ONNX Runtime's loop. Tested: the int8 program is the same to the
byte either way.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Iterator, List, Optional, Tuple

import numpy as np

logger = logging.getLogger("wenxin")
SETTING_ENV = "WENXIN_ONNX_CHANNEL_SCALES"  # "library": ONNX Runtime's own loop, always
CHECKED_CHANNELS = 8  # drawn at random beside the first, the last and the widest


def channel_quantized(weights: np.ndarray, axis: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``weights`` (float32) quantized per channel along ``axis`` as ONNX Runtime's symmetric int8
    per-channel quantization does: (int8 values of ``weights``' shape, scales ``[C]`` in
    ``weights``' dtype, zero points ``[C]`` int8)."""
    rows = np.moveaxis(weights, axis, 0)
    flat = rows.reshape(rows.shape[0], -1)  # [C, values of a channel]
    if flat.shape[1]:
        low = np.minimum(flat.min(axis=1), 0).astype(weights.dtype)
        high = np.maximum(flat.max(axis=1), 0).astype(weights.dtype)
    else:  # (ONNX Runtime: an empty channel's range is 0)
        low = high = np.zeros(flat.shape[0], dtype=weights.dtype)
    widest = np.maximum(np.abs(low), np.abs(high))
    scale = (widest.astype(np.float64) - (-widest).astype(np.float64)) / (127.0 - -127.0)
    scales = np.where(scale < np.finfo(weights.dtype).tiny, 1.0, scale).astype(weights.dtype)
    quantized = np.round(flat.astype(np.float32, copy=False) / scales[:, None])  # float32 / float32, half to even
    np.clip(quantized, -128, 127, out=quantized)
    values = np.moveaxis(quantized.astype(np.int8).reshape(rows.shape), 0, axis)
    return values, scales, np.zeros(flat.shape[0], dtype=np.int8)


def _agrees(weights: np.ndarray, axis: int, values: np.ndarray, scales: np.ndarray, zero_points: np.ndarray) -> bool:
    """Whether ONNX Runtime's own ``quantize_data`` gives a few of the channels the same numbers."""
    from onnx import TensorProto
    from onnxruntime.quantization.quant_utils import quantize_data
    count = weights.shape[axis]
    widest = int(np.argmax(scales)) if count else 0  # the widest channel's (its scale the largest): no second pass
    drawn = np.random.default_rng(count).integers(0, count, CHECKED_CHANNELS).tolist() if count else []
    for channel in {0, count - 1, widest, *drawn} if count else ():
        zero_point, scale, quantized = quantize_data(weights.take(channel, axis).flatten(), TensorProto.INT8, True,
                                                     reduce_range=False)[-3:]  # (older: rmin and rmax first)
        if (scale.tobytes() != scales[channel:channel + 1].tobytes() or int(zero_point) != int(zero_points[channel])
                or not np.array_equal(np.asarray(quantized), values.take(channel, axis).flatten())):
            return False
    return True


def _common_case(quantizer: Any, weight_name: str, weight_type: int, axis: int, reduce_range: bool,
                 keep_float_weight: bool) -> Optional[Tuple[Any, np.ndarray, int]]:
    """(the initializer, its array, its channel axis) where the call is the case handled here,
    else None."""
    from onnx import TensorProto
    from onnxruntime.quantization.quant_utils import find_by_name, normalize_axis, tensor_proto_to_array
    initializer = find_by_name(weight_name, quantizer.model.initializer())
    if (initializer is None or keep_float_weight or weight_type != TensorProto.INT8
            or initializer.data_type != TensorProto.FLOAT or getattr(quantizer, "min_real_range", None) is not None
            or not quantizer.is_weight_symmetric(weight_type) or (quantizer.reduce_range and reduce_range)):
        return None
    weights = tensor_proto_to_array(initializer)
    valid, axis = normalize_axis(axis, weights.ndim)
    overrides = quantizer.tensor_quant_overrides.get_per_channel_overrides(weight_name, default_val=[{"axis": axis}])
    if not valid or overrides != [{"axis": axis}] or not np.isfinite(weights).all():
        return None
    return initializer, weights, axis


class NumbersDiffer(Exception):
    """``channel_quantized`` gave a channel other numbers than ONNX Runtime's own ``quantize_data``."""


def _vectorized(quantizer: Any, weight_name: str, weight_type: int, axis: int, reduce_range: bool,
                keep_float_weight: bool) -> Optional[Tuple[str, str, str]]:
    """What ONNX Runtime's ``quantize_weight_per_channel_impl`` does, done by ``channel_quantized``
    and checked (``NumbersDiffer``): the names of the initializers it adds; None where the call is
    not the case handled here."""
    import onnx
    found = _common_case(quantizer, weight_name, weight_type, axis, reduce_range, keep_float_weight)
    if found is None:
        return None
    initializer, weights, axis = found
    values, scales, zero_points = channel_quantized(weights, axis)
    if not _agrees(weights, axis, values, scales, zero_points):
        raise NumbersDiffer("its numbers differ from ONNX Runtime's own on a channel")
    names = (weight_name + "_quantized", weight_name + "_zero_point", weight_name + "_scale")
    count = [initializer.dims[axis]]
    scale = onnx.helper.make_tensor(names[2], initializer.data_type, count, scales.tolist())
    zero_point = onnx.helper.make_tensor(names[1], weight_type, count, zero_points.tolist())
    quantizer.model.initializer_extend([scale, zero_point])
    quantizer.model.initializer_extend([onnx.numpy_helper.from_array(values.reshape(initializer.dims), names[0])])
    return names


def _quantizer_class() -> Any:
    """ONNX Runtime's quantizer class whose per-channel method is replaced, where its interface is
    the one this module was written against (``is_weight_symmetric`` a method beside
    ``quantize_weight_per_channel_impl``, as in 1.32), else None."""
    try:
        from onnxruntime.quantization.base_quantizer import BaseQuantizer
    except ImportError:  # (an older ONNX Runtime)
        return None
    if not (callable(getattr(BaseQuantizer, "is_weight_symmetric", None))
            and callable(getattr(BaseQuantizer, "quantize_weight_per_channel_impl", None))):
        return None  # (an older quantizer: its own loop)
    return BaseQuantizer


@contextlib.contextmanager
def vectorized_per_channel() -> Iterator[None]:
    """While it is open, ONNX Runtime's quantizer quantizes a weight per channel with
    ``channel_quantized`` where that gives its own numbers (see the module docstring)."""
    quantizer_class = _quantizer_class()
    if quantizer_class is None or os.environ.get(SETTING_ENV, "").strip().lower() == "library":
        yield
        return
    library = quantizer_class.quantize_weight_per_channel_impl
    differed: List[str] = []  # a weight whose numbers differed, or failed: ONNX Runtime quantizes the rest itself

    def per_channel(self: Any, weight_name: str, weight_qType: int, channel_axis: int,  # noqa: N803
                    reduce_range: bool = True, keep_float_weight: bool = False) -> Tuple[str, str, str]:
        if not differed:
            try:
                names = _vectorized(self, weight_name, weight_qType, channel_axis, reduce_range, keep_float_weight)
            except Exception as e:  # numbers unlike ONNX Runtime's, or an interface unlike the one tested
                differed.append(weight_name)
                logger.info("wenxin: ONNX Runtime's per-channel quantization of %s and the weights after it is left "
                            "to its own loop (%s: %s)", weight_name, type(e).__name__, e)
            else:
                if names is not None:
                    return names
        return library(self, weight_name, weight_qType, channel_axis, reduce_range, keep_float_weight)

    quantizer_class.quantize_weight_per_channel_impl = per_channel
    try:
        yield
    finally:
        quantizer_class.quantize_weight_per_channel_impl = library
