"""Mixed-precision settings shared by the dynamic and static trainers.

What Paddle 3.3 does with them depends on the mode and the device:

- eager mode: ``paddle.amp.auto_cast`` and ``GradScaler`` act on GPU/XPU only; on a CPU Paddle
  turns them off itself, so the run computes in float32 (the trainer logs this);
- static mode: ``auto_cast`` inserts casts while the program is built, on any device, and the
  mixed-precision optimizer (``paddle.static.amp.decorate``) with a ``GradScaler`` adds the
  unscale / skip / loss-scale update ops. bfloat16 on a CPU needs oneDNN's bfloat16 kernels
  (AVX512-BF16 or AMX); without them the static trainer builds float32 programs and says so.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Optional

from wenxin.common.errors import ConfigError

if TYPE_CHECKING:
    import paddle


def float16_kernels_available(place_type: str) -> bool:
    """Whether float16 matmul/conv kernels exist on the device (Paddle has none on CPU)."""
    return place_type == "gpu"


def bfloat16_kernels_available(place_type: str) -> bool:
    """Whether bfloat16 matmul/conv kernels exist (on CPU: oneDNN with AVX512-BF16 or AMX)."""
    from wenxin.compat.paddle_internals import cpu_supports_bfloat16
    return place_type == "gpu" or cpu_supports_bfloat16()


@dataclasses.dataclass
class AmpSettings:
    """What ``trainer.precision`` resolves to on a device."""

    enabled: bool
    dtype: Literal["float16", "bfloat16"]
    level: Literal["O1", "O2"]
    use_loss_scaling: bool
    scaler_kwargs: Dict[str, Any]
    custom_white_list: List[str] = dataclasses.field(default_factory=list)
    custom_black_list: List[str] = dataclasses.field(default_factory=list)
    place_type: str = "cpu"

    @classmethod
    def from_config(cls, cfg: Dict[str, Any], place_type: str) -> "AmpSettings":
        """The settings of a ``trainer.precision`` section on the device ``place_type``."""
        dtype: Literal["float16", "bfloat16"] = cfg["amp_dtype"]  # the schema allows these two and auto
        if cfg["amp_dtype"] == "auto":
            dtype = "float16" if place_type == "gpu" else "bfloat16"
        if cfg["use_amp"] and dtype == "float16" and not float16_kernels_available(place_type):
            raise ConfigError("trainer.precision.amp_dtype: float16 AMP needs a GPU; use bfloat16 on CPU")
        scaling = cfg["use_loss_scaling"] if cfg["use_loss_scaling"] is not None else dtype == "float16"
        return cls(enabled=cfg["use_amp"], dtype=dtype, level=cfg["amp_level"],
                   use_loss_scaling=bool(cfg["use_amp"] and scaling),
                   scaler_kwargs={
                       "init_loss_scaling": cfg["init_loss_scaling"],
                       "incr_ratio": cfg["incr_ratio"],
                       "decr_ratio": cfg["decr_ratio"],
                       "incr_every_n_steps": cfg["incr_every_n_steps"],
                       "decr_every_n_nan_or_inf": cfg["decr_every_n_nan_or_inf"],
                       "use_dynamic_loss_scaling": cfg["use_dynamic_loss_scaling"],
                   },
                   custom_white_list=list(cfg["amp_custom_white_list"]),
                   custom_black_list=list(cfg["amp_custom_black_list"]),
                   place_type=place_type)

    def unavailable_reason(self, mode: str) -> Optional[str]:
        """Why AMP cannot compute in low precision here (the run then computes in float32),
        or None where it can."""
        if not self.enabled or self.place_type == "gpu":
            return None
        if mode == "dynamic":
            return "Paddle's eager AMP (auto_cast, GradScaler) acts only on GPU/XPU devices"
        if self.dtype == "bfloat16" and not bfloat16_kernels_available(self.place_type):
            return "this CPU has no bfloat16 kernels (oneDNN needs AVX512-BF16 or AMX)"
        return None

    def disabled(self) -> "AmpSettings":
        return dataclasses.replace(self, enabled=False, use_loss_scaling=False)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The training forward's context."""
        import paddle
        if not self.enabled:
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(enable=True, dtype=self.dtype, level=self.level,
                                    custom_white_list=self.custom_white_list or None,
                                    custom_black_list=self.custom_black_list or None)

    def eval_autocast(self) -> contextlib.AbstractContextManager:
        """The evaluation forward's context: float32 at O1; at O2 the parameters themselves are
        in low precision, so evaluation casts like training."""
        return self.autocast() if self.level == "O2" else contextlib.nullcontext()

    def make_scaler(self) -> "paddle.amp.GradScaler | None":
        """A ``GradScaler`` (eager mode; in static mode it must be made inside the program)."""
        import paddle
        return paddle.amp.GradScaler(enable=True, **self.scaler_kwargs) if self.use_loss_scaling else None
