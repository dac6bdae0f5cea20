"""Sequence labeling: per-token tags (BIO, BIOES, BMES) with a BiGRU or transformer encoder and a
CRF or softmax decoder; chunk-level precision, recall and F1."""
from . import models  # noqa: F401  (importing registers the task's models; the trainers are built in)
