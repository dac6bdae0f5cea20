"""Names shared by readers, models and trainers."""


class InstanceName:
    """Suffixes and keys used in the tensors a field reader produces and a model returns."""

    SEQ_LENS = "seq_lens"
    LOSS = "loss"
    PREDICTIONS = "predictions"
    PROBS = "probs"
    LABELS = "labels"
    SCORES = "scores"


class Phase:
    """The phase a model is called in."""

    TRAINING = "training"
    EVALUATE = "evaluate"
    TEST = "test"
    PREDICT = "predict"


# Engines that run an exported model (wenxin.inference.backends); auto: ONNX Runtime when the
# folder has model.onnx and onnxruntime is installed, else Paddle Inference.
INFERENCE_BACKENDS = ("auto", "paddle", "onnxruntime")
# The Paddle backend's oneDNN (wenxin.inference.backends.PaddleEngine); auto: off for small
# batches, and for larger ones whichever way the first of them ran faster.
ONEDNN_SETTINGS = ("auto", "on", "off")
DEFAULT_MAX_LINE_BYTES = 512 << 10  # a longer data line is malformed (config.max_line_bytes)
