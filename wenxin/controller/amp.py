"""Mixed-precision settings shared by the dynamic and static trainers."""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Dict

import paddle

from wenxin.common.errors import ConfigError


@dataclasses.dataclass
class AmpSettings:
    """What ``trainer.use_amp`` and its companion keys resolve to."""

    enabled: bool
    dtype: str
    level: str
    use_loss_scaling: bool
    scaler_kwargs: Dict[str, Any]

    @classmethod
    def from_config(cls, cfg: Dict[str, Any]) -> "AmpSettings":
        on_gpu = cfg["PADDLE_PLACE_TYPE"] == "gpu"
        dtype = cfg["amp_dtype"] if cfg["amp_dtype"] != "auto" else ("float16" if on_gpu else "bfloat16")
        if cfg["use_amp"] and dtype == "float16" and not on_gpu:
            raise ConfigError("trainer.amp_dtype: float16 AMP needs a GPU; use bfloat16 on CPU")
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
                   })

    def autocast(self) -> contextlib.AbstractContextManager:
        if not self.enabled:
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(enable=True, dtype=self.dtype, level=self.level)

    def make_scaler(self) -> "paddle.amp.GradScaler | None":
        return paddle.amp.GradScaler(enable=True, **self.scaler_kwargs) if self.use_loss_scaling else None
