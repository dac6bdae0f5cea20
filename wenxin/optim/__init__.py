"""Optimizers and learning-rate schedules, built from ``model.optimization`` (below the models,
which build theirs in ``BaseModel.set_optimizer``). The builders import Paddle themselves."""
