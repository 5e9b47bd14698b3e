"""Why the verl keys rlsim does not read are ignored, grouped so the list stays readable.

Each rule is (test on the dotted key, reason); the first rule that matches wins, and whatever no rule
names is ignored as "not modelled by rlsim". Keys already used are never touched.
"""

from __future__ import annotations

from collections.abc import Callable

from rlsim.tools.importers.common import NOT_MODELLED, Ledger
from rlsim.tools.importers.common import any_of as _any
from rlsim.tools.importers.common import key_leaf as _leaf
from rlsim.tools.importers.common import key_prefix as _prefix
from rlsim.tools.importers.common import key_segment as _segment

RULES: list[tuple[Callable[[str], bool], str]] = [
    (_leaf("rollout_n"), "a copy of actor_rollout_ref.rollout.n (interpolated)"),
    (_prefix("critic.ppo_mini_batch_size", "critic.ppo_epochs", "critic.ppo_micro_batch_size",
             "critic.forward_max_token_len_per_gpu", "critic.forward_micro_batch_size",
             "critic.forward_micro_batch_size_per_gpu"),
     "rlsim's critic follows the actor's mini-batches and epochs and its own token budget"),
    (_prefix(*(f"actor_rollout_ref.rollout.log_prob_{k}" for k in (
        "micro_batch_size", "use_dynamic_bsz", "max_token_len_per_gpu", "micro_batch_size_per_gpu"))),
     "old log-probs: rlsim's actor forward pass uses the actor's token budget"),
    (_leaf("_target_"), "Hydra instantiation targets"),
    (_prefix("hydra", "defaults", "model_engine"), "Hydra composition settings"),
    (_segment("profiler", "global_profiler", "npu_profile", "prometheus", "trace", "skip"),
     "profiling, tracing and metrics export: no effect on simulated speed"),
    (_segment("checkpoint"), "checkpointing: no effect on simulated step time"),
    (_prefix("trainer.save_freq", "trainer.default_local_dir", "trainer.default_hdfs_dir", "trainer.resume_mode",
             "trainer.resume_from_path", "trainer.max_actor_ckpt_to_keep", "trainer.max_critic_ckpt_to_keep",
             "trainer.del_local_ckpt_after_load", "trainer.checkpoint_callback_class", "trainer.esi_redundant_time"),
     "checkpointing: no effect on simulated step time"),
    (_prefix("trainer.logger", "trainer.project_name", "trainer.experiment_name", "trainer.log_val_generations",
             "trainer.rollout_data_dir", "trainer.validation_data_dir"), "logging: no effect on speed"),
    (_prefix("trainer.test_freq", "trainer.val_before_train", "trainer.val_only", "data.val_files",
             "data.val_batch_size", "data.validation_shuffle", "data.val_max_samples")
     , "validation runs: not part of a training step"),
    (_segment("val_kwargs"), "validation runs: not part of a training step"),
    (_prefix("trainer.total_epochs", "trainer.total_training_steps", "rollout.total_rollout_steps"),
     "run length: rlsim simulates `steps` steps (--set steps=N)"),
    (_any(_segment("optim", "policy_loss", "kl_ctrl", "pf_ppo", "rollout_correction"), _leaf(
        "clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "entropy_coeff", "loss_agg_mode",
        "loss_scale_factor", "kl_loss_coef", "kl_loss_type", "gamma", "lam", "kl_penalty", "norm_adv_by_std_in_grpo",
        "cliprange_value", "grad_clip", "tau_pos", "tau_neg", "shuffle", "data_loader_seed", "calculate_entropy",
        "calculate_sum_pi_squared", "use_pf_ppo", "critic_warmup")),
     "optimisation hyper-parameters: change what is learned, not the step time"),
    (_leaf("temperature", "top_k", "top_p", "do_sample", "seed", "full_determinism", "logprobs_mode",
           "calculate_log_probs", "ignore_eos", "over_sample_rate"),
     "sampling parameters: lengths come from workload.response_length"),
    (_prefix("data", "custom_reward_function", "reward.custom_reward_function", "reward.reward_manager",
             "sandbox_fusion", "reward.sandbox_fusion"),
     "dataset, tokenizer and reward-function plumbing: lengths come from workload.*"),
    (_prefix("ray_kwargs", "transfer_queue", "trainer.device", "trainer.ray_wait_register_center_timeout",
             "actor_rollout_ref.nccl_timeout"), "runtime plumbing (Ray, timeouts, devices)"),
    (_segment("lora", "lora_rank", "lora_alpha", "target_modules", "exclude_modules", "lora_adapter_path"),
     "LoRA details that do not change the step time (alpha, initialisation, exclusions, adapter path); "
     "actor_rollout_ref.model.lora_rank and target_modules map to schedule.lora"),
    (_segment("qat", "quantization_config_file", "turbo_config"),
     "quantisation-aware training, torchao configs: not modelled"),
    (_segment("disaggregation"), "PD disaggregation off, its plumbing (bootstrap port, InfiniBand device), or the "
     "reward model's (not modelled); the rollout's enabled, replicas and transfer backend map to "
     "roles.rollout.engine.disaggregation"),
    (_segment("quantization"), "rollout quantisation off (null) or not FP8 (torchao: not modelled); fp8 maps to "
     "roles.rollout.engine.quantization"),
    (_segment("mtp"), "MTP off in rollout, or its training and EAGLE tree settings (not modelled); with enable and "
     "enable_rollout it maps to roles.rollout.engine.speculative"),
    (_leaf("use_remove_padding"),
     "padding removal: not modelled (rlsim prices unpadded tokens, as use_remove_padding: true runs; padded "
     "batches can make the update several times slower)"),
    (_leaf("ulysses_sequence_parallel_size", "context_parallel_size", "virtual_pipeline_model_parallel_size",
           "data_parallel_size", "dynamic_context_parallel", "fsdp_size"),
     "virtual-pipeline parallelism, and sequence / context parallelism of a section rlsim does not read: not "
     "modelled"),
    (_leaf("expert_model_parallel_size", "expert_parallel_size"),
     "expert parallelism outside a Megatron training role or a rollout engine: not modelled"),
    (_leaf("expert_tensor_parallel_size"),
     "expert tensor parallelism: rlsim takes it as tp / ep when ep divides tp, else 1 (docs/operators.md)"),
    (_prefix("distillation"), "on-policy distillation: not modelled"),
    (_segment("multi_turn", "agent"), "multi-turn / agent loop settings: model tools with workload.agent"),
    (_prefix("reward_model", "reward.reward_model"), "reward model disabled (or its settings not modelled)"),
]


def ignore_rest(ledger: Ledger, kind: str) -> None:
    """Ignore every leaf no mapping used, with the first matching reason."""
    if kind == "fully-async":
        ledger.ignore("rollout.n", "not read by verl fully_async (it reads actor_rollout_ref.rollout.n)")
        ledger.ignore("async_training", "trainer-side validation: not modelled")
    for test, reason in RULES:
        ledger.ignore_matching(test, reason)
    ledger.finish(NOT_MODELLED)
