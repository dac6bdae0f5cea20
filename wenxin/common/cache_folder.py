"""Where wenxin caches what it builds or downloads: ``$WENXIN_CACHE``, else
``$XDG_CACHE_HOME/wenxin``, else ``~/.cache/wenxin`` (model folders' decode step programs under
``exports/``, models downloaded by name under ``hubs/<hub>/``)."""
from __future__ import annotations

import os

CACHE_ENV = "WENXIN_CACHE"


def cache_root() -> str:
    """The cache folder (not created here)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return os.path.abspath(os.path.expanduser(chosen))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "wenxin")
