"""Names shared by readers, models and trainers."""

METRICS_FILE = "logs/metrics.jsonl"  # under trainer.output_path: one JSON record per line (the metric writers')


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


# The Paddle backend's oneDNN (wenxin.inference.paddle_backend); auto: the exported model's rule
# (with oneDNN from a number of rows a batch, or never).
ONEDNN_SETTINGS = ("auto", "on", "off")
DEFAULT_MAX_LINE_BYTES = 512 << 10  # a longer data line is malformed (config.max_line_bytes)
