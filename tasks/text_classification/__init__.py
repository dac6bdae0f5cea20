"""Text classification: BoW, CNN and BiLSTM classifiers with dynamic-mode training."""
from . import models, trainers  # noqa: F401  (importing registers the task's classes)
