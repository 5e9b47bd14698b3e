"""Where the shipped data lives: top-level folders in a checkout, `rlsim/<name>` inside a wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # the rlsim package (this file is rlsim/sim/paths.py)


def shipped_dir(name: str) -> Path:
    """`hardware_profiles` or `scenarios`: the checkout's folder if present, else the installed copy.

    pyproject maps the top-level folders to the packages `rlsim.<name>`, so a wheel carries them as
    `site-packages/rlsim/<name>/`.
    """
    checkout = _PACKAGE.parent / name
    if checkout.is_dir():
        return checkout
    return _PACKAGE / name
