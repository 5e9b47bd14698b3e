"""Test-session settings shared by every test module.

Hypothesis: in CI (`CI` set) property tests are derandomized and have no per-example deadline, so a
shared, loaded 2-core runner can neither draw a new failing example on one run only nor trip a
timing deadline; locally they keep hypothesis's defaults (fresh examples every run).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
