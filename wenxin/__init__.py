"""wenxin: a dual static/dynamic graph task framework on PaddlePaddle."""
import os
import warnings

os.environ.setdefault("GLOG_minloglevel", "2")  # Paddle's C++ logging, before paddle is imported
os.environ.setdefault("GLOG_v", "0")
warnings.filterwarnings("ignore", message="No ccache found")  # printed by every paddle import

from wenxin.common.registry import RegisterSet

# Importing these modules registers the built-in tokenizers, readers and hooks.
from wenxin.data import dataset_reader as _dataset_reader  # noqa: F401
from wenxin.data import field_reader as _field_reader  # noqa: F401
from wenxin.data import tokenizers as _tokenizers  # noqa: F401
from wenxin.controller import hooks as _hooks  # noqa: F401

__version__ = "0.1.0"
__all__ = ["RegisterSet", "__version__"]
