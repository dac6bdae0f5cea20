"""Imported just before ``import paddle`` by the modules that need Paddle, so that an installation
Paddle cannot run wenxin on (none, two builds, one too old) is one clear ``InstallError`` line
rather than an error deep inside Paddle. (The packages whose every module needs Paddle check in
their ``__init__``.)"""
from wenxin.common.paddle_support import require_paddle

require_paddle()
