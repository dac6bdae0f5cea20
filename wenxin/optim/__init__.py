"""Optimizers and learning-rate schedules, built from ``model.optimization`` (below the models,
which build theirs in ``BaseModel.set_optimizer``)."""
from wenxin.common.paddle_support import require_paddle

require_paddle()  # one clear line, before any module here imports Paddle
