"""A task that lives only in the test folder: does a text contain a keyword character?"""
from . import model, trainer  # noqa: F401
