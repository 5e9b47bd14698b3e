"""Scenario section `models`: the LLMs a run holds (presets or explicit shapes)."""

from __future__ import annotations

from pydantic import ConfigDict, model_validator

from rlsim.sim.model_shapes import ModelShape, resolve_preset

# ---------------------------------------------------------------- models


class ModelSpec(ModelShape):
    """A model shape; `preset: qwen2.5-7b` fills every dimension, explicit keys override."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data):
        if isinstance(data, dict) and data.get("preset") is not None:
            try:
                base = resolve_preset(str(data["preset"]))
            except KeyError as exc:
                raise ValueError(exc.args[0]) from None
            return {**base, **data}
        return data

    @model_validator(mode="after")
    def _head_dim(self) -> ModelSpec:
        """hidden // heads is the head size unless head_dim is given: it must not round to 0."""
        if self.head_dim is None and self.hidden < self.heads:
            raise ValueError(
                f"hidden ({self.hidden}) must be >= heads ({self.heads}): the head size is hidden // heads "
                "(or give head_dim)"
            )
        return self


