"""Importing framework configs (verl, ROLL, AReaL) as rlsim scenarios: `rlsim import FRAMEWORK CONFIG`.

Each importer reads the config as its framework would (Hydra composition and overrides included),
maps what rlsim models, and accounts for every key: used (-> scenario field), ignored (why) or
assumed (with the flag that sets it). See docs/import-calibration.md.
"""
