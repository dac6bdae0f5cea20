"""ONNX Runtime's per-channel int8 weight quantization done for all channels at once
(``wenxin.inference.onnx_channel_scales``, issue 69): the numbers are ONNX Runtime's own, channel
by channel, for the weights a model has and for the edge cases of its arithmetic; the program
``quantize_dynamic`` writes is the same to the byte with it and without it; where ONNX Runtime's
numbers would differ, or where it is turned off, ONNX Runtime's own loop quantizes."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime.quantization")

from conftest import wenxin_log  # noqa: E402
from test_onnx_quantize_groups import small_language_model  # noqa: E402
from wenxin.inference import onnx_channel_scales  # noqa: E402
from wenxin.inference.onnx_channel_scales import channel_quantized, vectorized_per_channel  # noqa: E402

used = pytest.mark.skipif(onnx_channel_scales._quantizer_class() is None,
                          reason="an older ONNX Runtime's quantizer: its own loop quantizes every weight")


def library_channels(weights, axis):
    """ONNX Runtime's ``quantize_data`` on each channel, as its per-channel loop calls it."""
    from onnx import TensorProto
    from onnxruntime.quantization.quant_utils import quantize_data
    results = [quantize_data(weights.take(c, axis).flatten(), TensorProto.INT8, True, reduce_range=False)[-3:]
               for c in range(weights.shape[axis])]
    shape = list(weights.shape)
    shape[axis] = 1
    values = np.concatenate([np.asarray(q).reshape(shape) for _, _, q in results], axis)
    return values, np.hstack([s for _, s, _ in results]), np.hstack([z for z, _, _ in results])


def awkward_weights():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 40)).astype(np.float32)
    w[:, 0] = 0.0  # a channel of zeros: scale 1
    w[:, 1] = 1e-40  # subnormal: its scale would fall below float32's smallest normal
    w[:, 2] = -np.abs(w[:, 2])  # negative only: the range widened to hold zero
    w[5, 3] = 3e38  # near float32's largest: the range computed in float64
    w[:, 4] = np.arange(64, dtype=np.float32) - 31.5  # many values at half a step: rounded half to even
    w[:, 5] = 127.0 * np.linspace(-1, 1, 64, dtype=np.float32)
    return w


@used
@pytest.mark.parametrize("axis", [1, 0, -1])
def test_every_channel_gets_onnx_runtimes_own_numbers(axis):
    weights = awkward_weights()
    ours, theirs = channel_quantized(weights, axis), library_channels(weights, axis)
    for mine, library in zip(ours, theirs):
        assert mine.dtype == library.dtype and mine.shape == library.shape
        assert mine.tobytes() == library.tobytes()


@used
def test_a_weight_of_three_axes_and_an_empty_one():
    rng = np.random.default_rng(1)
    weights = (rng.standard_normal((3, 5, 7)) * 10).astype(np.float32)
    for axis in (0, 1, 2):
        assert all(a.tobytes() == b.tobytes() for a, b in zip(channel_quantized(weights, axis),
                                                              library_channels(weights, axis)))
    empty = np.zeros((0, 4), np.float32)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(channel_quantized(empty, 1), library_channels(empty, 1)))


def int8_program(source, target, vectorized):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    if vectorized:
        with vectorized_per_channel():
            quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True)
    else:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True)
    return onnx.load(str(target)).SerializeToString()


def counting(monkeypatch):
    calls = []
    quantized = onnx_channel_scales.channel_quantized

    def counted(weights, axis):
        calls.append(weights.shape)
        return quantized(weights, axis)

    monkeypatch.setattr(onnx_channel_scales, "channel_quantized", counted)
    return calls


def test_the_int8_program_is_the_same_to_the_byte(tmp_path, monkeypatch):
    source = tmp_path / "f32.onnx"
    small_language_model(source)
    calls = counting(monkeypatch)
    library = int8_program(source, tmp_path / "library.onnx", vectorized=False)
    assert calls == []
    assert int8_program(source, tmp_path / "vectorized.onnx", vectorized=True) == library
    if onnx_channel_scales._quantizer_class() is not None:  # (the kind of quantizer this was written for)
        assert len(calls) >= 6  # every layer's products went this way
    else:
        assert calls == []
    from onnxruntime.quantization.base_quantizer import BaseQuantizer
    assert BaseQuantizer.quantize_weight_per_channel_impl.__name__ == "quantize_weight_per_channel_impl"  # restored


@used
def test_where_onnx_runtimes_numbers_differ_its_own_loop_quantizes(tmp_path, monkeypatch):
    source = tmp_path / "f32.onnx"
    small_language_model(source)
    library = int8_program(source, tmp_path / "library.onnx", vectorized=False)
    quantized = onnx_channel_scales.channel_quantized

    def another_version(weights, axis):  # as if ONNX Runtime's arithmetic had changed: scales a hair off
        values, scales, zero_points = quantized(weights, axis)
        return values, np.nextafter(scales, np.float32(np.inf)), zero_points

    monkeypatch.setattr(onnx_channel_scales, "channel_quantized", another_version)
    with wenxin_log() as messages:
        assert int8_program(source, tmp_path / "vectorized.onnx", vectorized=True) == library
    assert any("left to its own loop (NumbersDiffer" in message for message in messages)


@used
def test_a_quantizer_unlike_the_one_tested_quantizes_with_its_own_loop(tmp_path, monkeypatch):
    source = tmp_path / "f32.onnx"
    small_language_model(source)
    library = int8_program(source, tmp_path / "library.onnx", vectorized=False)

    def older(*args):  # as an older ONNX Runtime's quantizer, whose is_weight_symmetric is a bool
        raise TypeError("'bool' object is not callable")

    monkeypatch.setattr(onnx_channel_scales, "_common_case", older)
    with wenxin_log() as messages:
        assert int8_program(source, tmp_path / "vectorized.onnx", vectorized=True) == library
    assert sum("left to its own loop (TypeError" in message for message in messages) == 1  # once: the rest follow


def test_turned_off_onnx_runtimes_loop_quantizes(tmp_path, monkeypatch):
    source = tmp_path / "f32.onnx"
    small_language_model(source)
    calls = counting(monkeypatch)
    monkeypatch.setenv("WENXIN_ONNX_CHANNEL_SCALES", "library")
    library = int8_program(source, tmp_path / "library.onnx", vectorized=False)
    assert int8_program(source, tmp_path / "vectorized.onnx", vectorized=True) == library
    assert calls == []
