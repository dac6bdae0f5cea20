"""Tabular classification: a vector of numeric features per example -> an MLP -> a class."""
from . import models  # noqa: F401  (importing registers the task's models; the trainers are built in)
