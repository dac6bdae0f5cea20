"""wenxin: a dual static/dynamic graph task framework on PaddlePaddle."""
import os
import warnings

os.environ.setdefault("GLOG_minloglevel", "2")  # Paddle's C++ logging, before paddle is imported
os.environ.setdefault("GLOG_v", "0")
warnings.filterwarnings("ignore", message="No ccache found")  # printed by every paddle import

from wenxin.common import threads  # noqa: E402

# the process-wide speed settings (BLAS, allocator) are applied by the entry points, not by this
# import: see wenxin.common.process_settings
threads.USER_THREADS = threads.user_threads()  # read before Paddle loads: it overwrites OMP_NUM_THREADS

# The built-in readers, tokenizers, hooks, optimizers and result formats register themselves
# when a registry is first asked (wenxin.common.registry.load_builtins), so that importing
# wenxin (and parsing a command line) does not load Paddle.
from wenxin.common.registry import RegisterSet  # noqa: E402

__version__ = "0.1.0"
__all__ = ["RegisterSet", "Task", "TrainResult", "__version__"]


def __getattr__(name: str) -> object:
    """``wenxin.Task`` and ``wenxin.TrainResult`` (the Python API, ``wenxin.api``), imported when first used."""
    if name in ("Task", "TrainResult"):
        from wenxin import api
        return getattr(api, name)
    raise AttributeError(f"module 'wenxin' has no attribute {name!r}")
