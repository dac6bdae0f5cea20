"""Trainers: environment, steps, checkpoints, hooks and export. The Paddle engines
(``eager_engine``, ``static_engine``) check the installed Paddle before they import it; the loop,
hooks and checkpoints import Paddle only where they use it, so a trainer on the fast tier's numpy
engine runs without it."""
