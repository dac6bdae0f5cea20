"""Trainers: environment, steps, checkpoints, hooks and export."""
from wenxin.common.paddle_support import require_paddle

require_paddle()  # one clear line, before any module here imports Paddle
