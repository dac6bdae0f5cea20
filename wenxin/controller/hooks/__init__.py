"""Hooks of the training loop; importing this package registers the built-in hooks."""
from wenxin.controller.hooks.base import HookBase, HookList, Priority
from wenxin.controller.hooks.best_model import LoadBestModelHook
from wenxin.controller.hooks.checkpoint import CheckpointHook
from wenxin.controller.hooks.early_stopping import EarlyStoppingHook
from wenxin.controller.hooks.ema import EMAHook
from wenxin.controller.hooks.evaluation import EvaluationHook
from wenxin.controller.hooks.export import InferenceExportHook
from wenxin.controller.hooks.logger import LoggerHook
from wenxin.controller.hooks.lr_scheduler import LRSchedulerHook
from wenxin.controller.hooks.nan_guard import NaNGuardHook
from wenxin.controller.hooks.onnx_result import OnnxResultHook
from wenxin.controller.hooks.norms import NormsHook
from wenxin.controller.hooks.profiler import ProfilerHook
from wenxin.controller.hooks.progress import ProgressBarHook
from wenxin.controller.hooks.sweep_report import SweepReportHook
from wenxin.controller.hooks.timer import IterationTimerHook
from wenxin.controller.hooks.trackers import MLflowHook, TensorBoardHook

DEFAULT_HOOKS = (IterationTimerHook, LRSchedulerHook, NaNGuardHook, EvaluationHook, LoggerHook, CheckpointHook)

__all__ = ["HookBase", "HookList", "Priority", "DEFAULT_HOOKS", "CheckpointHook", "EarlyStoppingHook", "EMAHook",
           "EvaluationHook", "InferenceExportHook", "LoadBestModelHook", "LoggerHook", "LRSchedulerHook",
           "NaNGuardHook", "NormsHook", "OnnxResultHook", "IterationTimerHook", "MLflowHook", "ProfilerHook",
           "ProgressBarHook", "SweepReportHook", "TensorBoardHook"]
