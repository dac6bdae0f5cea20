"""Text classification: BoW, CNN and BiLSTM classifiers with dynamic-mode training."""
from . import models  # noqa: F401  (importing registers the task's models; the trainers are built in)
