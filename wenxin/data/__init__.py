"""Tokenizers, vocabularies, field readers and dataset readers."""
from wenxin.common.paddle_support import require_paddle

require_paddle()  # one clear line, before any module here imports Paddle
