"""Where the shipped data lives: top-level folders in a checkout, `rlsim.<name>` inside a wheel."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def shipped_dir(name: str) -> Path:
    """`hardware_profiles` or `scenarios`: the checkout's folder if present, else the installed copy."""
    checkout = Path(__file__).resolve().parent.parent / name
    if checkout.is_dir():
        return checkout
    return Path(str(resources.files(f"rlsim.{name}")))
