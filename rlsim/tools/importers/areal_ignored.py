"""Why the AReaL keys rlsim does not read are ignored (grouped; the first matching rule wins)."""

from __future__ import annotations

from rlsim.tools.importers.common import NOT_MODELLED, Ledger

PREFIXES = [
    (("experiment_name", "trial_name", "stats_logger", "perf_tracer", "memory_profiler", "wandb", "swanlab",
      "tensorboard", "fileroot"), "logging, tracing and experiment naming: no effect on speed"),
    (("saver", "recover", "checkpoint"), "checkpointing / recovery: no effect on simulated step time"),
    (("evaluator", "valid_dataset", "eval_gconfig"), "evaluation runs: not part of a training step"),
    (("total_train_epochs", "total_train_steps", "total_train_n_seqs", "seed"),
     "run length: rlsim simulates `steps` steps (--set steps=N)"),
    (("scheduler", "launcher", "cluster", "name_resolve", "tokenizer_path", "dataset", "train_dataset",
      "teacher", "mode"), "launcher, cluster plumbing, dataset and tokenizer: lengths come from workload.*"),
    (("gconfig", "ppo.gen"), "sampling parameters: lengths come from workload.response_length"),
]
SEGMENTS = [
    (("optimizer", "reward_norm", "adv_norm", "rejection_sampling", "kl_ctl", "eps_clip", "eps_clip_higher",
      "c_clip", "reward_scaling", "reward_bias", "reward_clip", "discount", "gae_lambda", "temperature",
      "use_decoupled_loss", "behav_imp_weight_cap", "importance_sampling_level", "prox_logp_method",
      "overlong_reward_penalty", "overlong_tokens", "overlong_penalty_factor", "mask_no_eos_with_zero",
      "kl_estimator", "use_sapo_loss", "sapo_tau_pos", "sapo_tau_neg", "m2_threshold", "dynamic_bs",
      "log_agent_stats", "log_agent_stats_keys", "disable_dropout"),
     "optimisation hyper-parameters: change what is learned, not the step time"),
    (("scheduling_spec", "admin_api_key", "request_timeout", "setup_timeout", "request_retries", "log_level",
      "poll_interval", "routing_strategy", "api_url", "provider_api_key", "_version"),
     "runtime plumbing (RPC, timeouts, containers)"),
    (("use_lora", "lora_rank", "lora_alpha", "target_modules", "peft_type", "lora_name", "enable_lora",
      "max_lora_rank", "max_loras", "lora_modules", "lora_paths", "lora_backend", "max_loaded_loras"),
     "LoRA: not modelled (rlsim trains full weights)"),
]


def ignore_rest(ledger: Ledger, backend: str) -> None:
    """Ignore every leaf no mapping used: the idle engine's section, then the grouped reasons, then the rest."""
    idle = "vllm" if backend == "sglang" else "sglang"
    ledger.ignore(idle, f"{idle} settings: the rollout engine is {backend}")
    for prefixes, reason in PREFIXES:
        for prefix in prefixes:
            ledger.ignore(prefix, reason)
    for names, reason in SEGMENTS:
        wanted = set(names)
        ledger.ignore_matching(lambda k, w=wanted: bool(w.intersection(k.split("."))), reason)
    ledger.finish(NOT_MODELLED)
