"""Sane upper bounds on scenario numbers and input files, in one place.

Far above any published RL run, low enough that a typo (1e5 nodes, 1e9 epochs, a 50 MB scenario) is
refused with the bound in the message instead of running for days, overflowing a counter or filling
memory. The schema (rlsim/sim/scenario/schema.py) and the file readers (rlsim/sim/yaml_input.py,
rlsim/sim/csv_inputs.py) import them from here.
"""

MAX_NODES = 4096  # 32,768 GPUs at 8 per node
MAX_GPUS_PER_NODE = 72  # an NVL72 rack
MAX_TOKENS = 10_000_000  # any length, context or token budget
MAX_STEPS = 100_000  # RL steps (measured or warm-up)
MAX_EPOCHS = 64  # PPO epochs / mini-batches per step
MAX_PROMPTS_PER_STEP = 1_000_000
MAX_SAMPLES_PER_PROMPT = 4096
MAX_STALENESS_STEPS = 16  # policy versions a sample may lag: AReaL's staleness ablation stops at 16 before
# unbounded, ROLL's examples use 1 (docs/sources.md §7, §8); a bound far above it admits the whole run at once
MAX_TURNS = 128  # agent turns per trajectory (ASearcher: up to 128, docs/sources.md §7)
MAX_ATTEMPTS = 100  # tries of one tool call
MAX_NUMBER = 1e9  # any other count or quantity without a bound of its own
MAX_SECONDS = 86_400.0  # any duration: a tool call, a switch, a backoff (one day)
MAX_SIGMA = 10.0  # std-dev of a log-length or log-latency: e^10 is a factor of 22,000 already
MIN_MAGNITUDE = 1e-12  # a non-zero number smaller than this is a typo (or a denormal): 1/x overflows
MAX_BANDWIDTH_GBIT = 100_000.0  # a NIC of 100 Tbit/s; the lower bound, 0.1 Gbit/s, is a 100 Mbit/s link
MIN_BUCKET_MB, MAX_BUCKET_MB = 0.001, 1_000_000.0  # a weight-sync bucket: 1 kB .. 1 TB

MAX_SCENARIO_BYTES = 1_000_000  # a scenario or hardware profile YAML is a few kB
MAX_CSV_BYTES = 256_000_000  # a length trace of millions of rows; not a disk image
