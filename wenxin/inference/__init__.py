"""Inference: batch prediction, the Predictor and the HTTP service."""
from wenxin.common.paddle_support import require_paddle

require_paddle()  # one clear line, before any module here imports Paddle
