"""Errors that the framework raises for bad user input.

Every error names what the user must fix: the JSON key path, the file and line, or the
checkpoint path. Entry points catch ``WenxinError`` and print its message without a traceback.
"""


class WenxinError(Exception):
    """Base class of all user-facing errors."""


class ConfigError(WenxinError):
    """A task file is malformed, has an unknown key, or a value of the wrong type."""


class DataError(WenxinError):
    """A data file is missing or a line in it is malformed."""


class CheckpointError(WenxinError):
    """A checkpoint or pretrained-parameter file is missing, corrupt or incompatible."""


class TrainingError(WenxinError):
    """Training cannot continue (for example the loss became NaN/Inf)."""
