"""Scenario section `cluster`: GPU pools and their hardware profiles."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails

from rlsim.sim.limits import (  # sane upper bounds, shared with the file readers
    MAX_BANDWIDTH_GBIT,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
)
from rlsim.sim.scenario.schema.base import Strict

# ---------------------------------------------------------------- cluster


_BOUND_CHECKS = {
    "gt": lambda v, b: v > b,
    "ge": lambda v, b: v >= b,
    "lt": lambda v, b: v < b,
    "le": lambda v, b: v <= b,
}
_BOUND_TYPES = {"gt": "greater_than", "ge": "greater_than_equal", "lt": "less_than", "le": "less_than_equal"}


@lru_cache(maxsize=1)
def profile_override_fields() -> tuple[str, ...]:
    """The hardware profile fields a pool's `profile_overrides` may set: its numbers, except the price
    (the pool's own `price_usd_per_gpu_hour` sets that)."""
    import typing

    from rlsim.sim.hardware import HardwareProfile

    return tuple(
        name
        for name, field in HardwareProfile.model_fields.items()
        if float in (field.annotation, *typing.get_args(field.annotation)) and name != "price_usd_per_gpu_hour"
    )


@lru_cache(maxsize=256)
def _pool_profile(hardware: str, nic_gbit_per_s: float | None, overrides: tuple[tuple[str, float], ...]):
    """A pool's effective hardware profile (see PoolSpec.profile); the values were checked by PoolSpec."""
    from rlsim.sim.hardware import load_profile

    hw = load_profile(hardware)
    update = dict(overrides)
    if nic_gbit_per_s is not None:
        update["nic_gbit_per_s"] = nic_gbit_per_s
    if update:
        sources = {**hw.sources, **{key: "scenario pool override" for key in update}}
        hw = hw.model_copy(update={**update, "sources": sources})
    return hw


class PoolSpec(Strict):
    """A homogeneous group of nodes; heterogeneous clusters are several pools."""

    hardware: str = Field(description="Hardware profile name (see `rlsim profiles`) or path to a YAML")
    nodes: int = Field(default=1, gt=0, le=MAX_NODES)
    gpus_per_node: int = Field(default=8, gt=0, le=MAX_GPUS_PER_NODE)
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0, description="Overrides the profile's")
    nic_gbit_per_s: float | None = Field(
        default=None, ge=0.1, le=MAX_BANDWIDTH_GBIT,
        description="Inter-node bandwidth per GPU of this cluster, overriding the profile's",
    )
    profile_overrides: dict[str, float] = Field(
        default_factory=dict,
        description="Hardware profile numbers replaced for this pool, e.g. {train_mfu: 0.35, decode_eta_mem: 0.6} "
        "(any numeric profile field but the price; the profile's own bounds apply)",
    )

    @field_validator("hardware", mode="before")
    @classmethod
    def _canonical_hardware(cls, value):
        """`H100`, `NVIDIA H100` -> `h100-sxm` (rlsim.sim.hardware.canonical_profile); a path or an unknown name
        is kept as given (loading it reports the unknown name)."""
        if not isinstance(value, str) or value.endswith((".yaml", ".yml")) or "\0" in value:
            return value
        from rlsim.sim.hardware import available_profiles, canonical_profile

        known = available_profiles()
        return value if value in known else canonical_profile(value, known) or value

    @model_validator(mode="after")
    def _check_profile_overrides(self) -> PoolSpec:
        """Unknown or non-numeric field names and out-of-bounds values: one error each, at its own key."""
        if not self.profile_overrides:
            return self
        from pydantic_core import InitErrorDetails

        from rlsim.sim.hardware import HardwareProfile

        known = profile_override_fields()
        errors: list[InitErrorDetails] = []
        for key, value in self.profile_overrides.items():
            loc = ("profile_overrides", key)
            if key not in known:
                why = (
                    "the price is set on the pool: use price_usd_per_gpu_hour"
                    if key == "price_usd_per_gpu_hour"
                    else f"not a hardware profile number; known: {', '.join(known)}"
                )
                errors.append(InitErrorDetails(type="value_error", loc=loc, input=key, ctx={"error": ValueError(why)}))
                continue
            if key == "nic_gbit_per_s" and self.nic_gbit_per_s is not None:
                why = "also given as the pool's nic_gbit_per_s: give it once"
                errors.append(InitErrorDetails(type="value_error", loc=loc, input=key, ctx={"error": ValueError(why)}))
                continue
            for bound in HardwareProfile.model_fields[key].metadata:
                for kind, ok in _BOUND_CHECKS.items():
                    limit = getattr(bound, kind, None)
                    if limit is not None and not ok(value, limit):
                        kind_type = _BOUND_TYPES[kind]
                        errors.append(InitErrorDetails(type=kind_type, loc=loc, input=value, ctx={kind: limit}))
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def profile(self):
        """The hardware profile with this pool's own network (a testbed's NICs differ from the datasheet)
        and its `profile_overrides`; each overridden field's source says "scenario pool override".

        Cached: pools with the same hardware and overrides share one (frozen) profile object.
        """
        return _pool_profile(self.hardware, self.nic_gbit_per_s, tuple(sorted(self.profile_overrides.items())))

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


class ClusterSpec(Strict):
    pools: dict[str, PoolSpec] = Field(min_length=1)


