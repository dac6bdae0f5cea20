"""The fast tier's task package, which loads without Paddle: the task-file keys of the numpy
engine's model. ``fake_engine.numpy_trainer`` builds that model (``NumpyBow``) itself; the class
registered here only declares its keys (none beyond those every model has)."""
from typing import Any, Dict

from wenxin.common.registry import RegisterSet


@RegisterSet.models.register("NumpyBow")
class NumpyBowKeys:
    """``model.type: NumpyBow``: a bag-of-words softmax classifier trained in numpy."""

    config_schema: Dict[str, Any] = {}
