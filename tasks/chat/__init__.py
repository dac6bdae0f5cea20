"""Chat models: supervised fine-tuning (SFT) of ERNIE 4.5 decoders on conversations in
ERNIEKit's format (``wenxin.data.chat_fields``)."""
from . import models  # noqa: F401  (importing registers the task's models)
