"""Why the slime flags rlsim does not read are ignored: no effect on what rlsim simulates ("ignored"), or an
effect rlsim does not simulate ("not modelled"). The first matching rule wins; flags already used are kept."""

from __future__ import annotations

from collections.abc import Callable

from rlsim.tools.importers.common import Ledger

NOT_MODELLED = "not modelled by rlsim (may change the step time; rlsim does not simulate it)"


def _starts(*prefixes: str) -> Callable[[str], bool]:
    return lambda key: key.startswith(prefixes)


def _is(*names: str) -> Callable[[str], bool]:
    wanted = set(names)
    return lambda key: key in wanted


RULES: list[tuple[Callable[[str], bool], str]] = [
    (_starts("--eval", "--n-samples-per-eval-prompt"), "evaluation runs: not part of a training step"),
    (_starts("--use-wandb", "--wandb", "--use-tensorboard", "--tb-"), "logging: no effect on speed"),
    (_is("--load", "--save", "--save-interval", "--ref-load", "--no-save-optim", "--keep-old-actor",
         "--ckpt-format"), "checkpoint paths and intervals: no effect on the simulated step"),
    (_is("--num-rollout", "--num-epoch"), "run length: rlsim simulates `steps` steps (--set steps=N)"),
    (_is("--prompt-data", "--input-key", "--label-key", "--metadata-key", "--tool-key", "--apply-chat-template",
         "--rollout-shuffle", "--rm-type", "--custom-rm-path", "--rollout-seed", "--seed"),
     "dataset, prompt template and reward-function plumbing: lengths come from workload.*"),
    (_starts("--rollout-temperature", "--rollout-top-p", "--rollout-top-k", "--rollout-stop"),
     "sampling parameters: lengths come from workload.response_length"),
    (_is("--optimizer", "--lr", "--lr-decay-style", "--weight-decay", "--adam-beta1", "--adam-beta2", "--adam-eps",
         "--clip-grad", "--kl-loss-coef", "--kl-loss-type", "--kl-coef", "--entropy-coef", "--eps-clip",
         "--eps-clip-high", "--eps-clip-c", "--normalize-advantages", "--use-tis", "--attention-dropout",
         "--hidden-dropout", "--moe-aux-loss-coeff", "--moe-router-score-function", "--moe-token-drop-policy",
         "--moe-router-dtype", "--lr-warmup-iters", "--min-lr"),
     "optimisation and loss hyper-parameters: change what is learned, not the step time"),
    (_is("--disable-bias-linear", "--qk-layernorm", "--normalization", "--position-embedding-type", "--norm-epsilon",
         "--rotary-percent", "--rotary-base", "--swiglu", "--use-rotary-position-embeddings"),
     "model details that do not change the shape rlsim prices (norms, rotary, activation)"),
    (_is("--sequence-parallel", "--expert-tensor-parallel-size", "--recompute-method", "--recompute-num-layers",
         "--overlap-cpu-optimizer-d2h-h2d", "--use-precision-aware-optimizer", "--accumulate-allreduce-grads-in-fp32",
         "--attention-softmax-in-fp32", "--attention-backend", "--moe-grouped-gemm", "--moe-permute-fusion",
         "--moe-token-dispatcher-type", "--sglang-cuda-graph-bs", "--moe-layer-freq"),
     "kernel, memory and layout details: not modelled (their effect is inside the profile's efficiencies)"),
    (_is("--offload-rollout"), "the engines' memory release at the colocated switch: rlsim's switch always "
     "frees the KV cache"),
    (_starts("--over-sampling-batch-size", "--partial-rollout", "--dynamic-sampling"),
     "over-sampling and partial rollouts: not modelled"),
]


def ignore_rest(ledger: Ledger) -> None:
    for test, reason in RULES:
        ledger.ignore_matching(test, reason)
    ledger.finish(NOT_MODELLED)
