"""The base of every scenario model: unknown keys are errors, every number finite and sane."""

from __future__ import annotations

import math
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from rlsim.sim.limits import (  # sane upper bounds, shared with the file readers
    MAX_NUMBER,
    MAX_SECONDS,
    MIN_MAGNITUDE,
)


class Strict(BaseModel):
    """Unknown keys are errors; every float is finite (NaN or inf would run, then poison every result).

    A number without a bound of its own is at most MAX_NUMBER, and a duration in seconds (a field named
    `*_s` but not `*_per_s`, a rate; or `*_s_*`; or listed in `seconds_fields`) at most MAX_SECONDS: 1e18
    somewhere is a typo that would otherwise allocate exabytes or simulate for ages. A non-zero number below
    MIN_MAGNITUDE (a denormal such as 5e-324 passes `> 0`) is refused too: its reciprocal is inf.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    seconds_fields: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _sane_numbers(self) -> Strict:
        errors = []
        for name, field in type(self).model_fields.items():
            bounded = any(getattr(m, k, None) is not None for m in field.metadata for k in ("le", "lt"))
            rate = name.endswith("_per_s")  # tokens_per_s, gbit_per_s: a rate, not a duration
            seconds = name in self.seconds_fields or (name.endswith("_s") and not rate) or "_s_" in name
            limit = math.inf if bounded else MAX_SECONDS if seconds else MAX_NUMBER
            value = getattr(self, name)
            items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else None
            for key, v in items if items is not None else [(None, value)]:
                if not isinstance(v, int | float) or isinstance(v, bool):
                    continue
                loc = (name,) if key is None else (name, key)
                if abs(v) > limit:
                    errors.append(InitErrorDetails(type="less_than_equal", loc=loc, input=v, ctx={"le": limit}))
                elif 0 < abs(v) < MIN_MAGNITUDE:
                    why = ValueError(f"{v:g} is too small to be a setting: use 0 or a value of at least "
                                     f"{MIN_MAGNITUDE:g} (a typo?)")
                    errors.append(InitErrorDetails(type="value_error", loc=loc, input=v, ctx={"error": why}))
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self


