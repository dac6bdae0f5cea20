"""Model building blocks and the ERNIE encoder."""
from wenxin.common.paddle_support import require_paddle

require_paddle()  # one clear line, before any module here imports Paddle
