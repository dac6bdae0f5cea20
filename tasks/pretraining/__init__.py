"""Pretraining: a masked-language-model objective on raw text for the ERNIE-style transformer
encoder, whose weights other tasks then load through ``trainer.checkpoints.pre_train_model``."""
from . import models  # noqa: F401  (importing registers the task's models; the trainers are built in)
