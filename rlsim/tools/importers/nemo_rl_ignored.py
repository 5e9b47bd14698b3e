"""Why the NeMo-RL keys rlsim does not read are ignored: no effect on what rlsim simulates ("ignored"), or an
effect rlsim does not simulate ("not modelled"). The first matching rule wins; keys already used are kept."""

from __future__ import annotations

from rlsim.tools.importers.common import Ledger
from rlsim.tools.importers.common import any_of as _any
from rlsim.tools.importers.common import key_leaf as _leaf
from rlsim.tools.importers.common import key_prefix as _prefix
from rlsim.tools.importers.common import key_segment as _segment

NOT_MODELLED = "not modelled by rlsim (may change the step time; rlsim does not simulate it)"

RULES = [
    (_prefix("logger", "checkpointing"), "logging and checkpointing: no effect on the simulated step"),
    (_prefix("grpo.val_period", "grpo.val_start_at", "grpo.val_at_start", "grpo.val_at_end", "grpo.max_val_samples",
             "grpo.val_num_generations_per_prompt", "grpo.val_batch_size", "grpo.stop_at_validation_metric",
             "grpo.stop_at_validation_threshold", "data.validation"), "validation runs: not part of a training step"),
    (_any(_leaf("val_temperature", "val_top_p", "val_top_k")), "validation runs: not part of a training step"),
    (_prefix("grpo.max_num_epochs", "grpo.max_num_steps"), "run length: rlsim simulates `steps` steps (--set steps=N)"),
    (_any(_prefix("loss_fn", "grpo.adv_estimator", "grpo.reward_shaping", "grpo.reward_scaling", "reward_penalties",
                  "policy.optimizer", "policy.scheduler", "policy.megatron_cfg.optimizer",
                  "policy.megatron_cfg.scheduler"),
          _leaf("normalize_rewards", "use_leave_one_out_baseline", "advantage_clip_low", "advantage_clip_high",
                "seq_logprob_error_threshold", "invalid_tool_call_advantage", "malformed_thinking_advantage",
                "overlong_filtering", "seed", "max_grad_norm", "freeze_moe_router", "moe_router_dtype",
                "moe_router_load_balancing_type", "moe_router_bias_update_rate", "max_generation_failures")),
     "optimisation and loss hyper-parameters: change what is learned, not the step time"),
    (_leaf("temperature", "top_p", "top_k", "stop_token_ids", "stop_strings"),
     "sampling parameters: lengths come from workload.response_length"),
    (_prefix("data", "env", "policy.tokenizer", "policy.hf_config_overrides"),
     "dataset, tokenizer and environment plumbing: lengths come from workload.*"),
    (_any(_prefix("cluster.master_port_range_low", "cluster.master_port_range_high", "cluster.segment_size",
                  "policy.generation.port_range_low", "policy.generation.port_range_high", "data_plane"),
          _segment("env_vars"), _leaf("use_tqdm", "enable_vllm_metrics_logger", "vllm_metrics_logger_interval",
                                      "http_refit_api_key_env_var", "http_refit_server_port",
                                      "zmq_refit_server_port", "use_gloo_process_groups", "monitor_gpus",
                                      "force_reconvert_from_hf", "model_overrides", "automodel_kwargs",
                                      "_v2", "pipeline_dtype", "make_sequence_length_divisible_by")),
     "runtime plumbing (ports, environment variables, logging, conversion)"),
    (_prefix("policy.generation.mcore_generation_config"), "Megatron inference settings: the backend is vLLM"),
    (_prefix("policy.generation_batch_size"), "only used when generating with the HF / Megatron backend"),
    (_any(_leaf("precision", "kv_cache_dtype", "use_deep_gemm", "num_last_layers_in_bf16",
                "num_first_layers_in_bf16", "real_quant_export_cpu_offload"), _segment("fp8_cfg")),
     "training precision / FP8 training, BF16 rollout and FP8 kernel details: not modelled (an FP8, MXFP8 or NVFP4 "
     "vllm_cfg.precision and an fp8 kv_cache_dtype map to roles.rollout.engine.quantization)"),
    (_segment("lora_cfg", "peft"), "LoRA (disabled here, or its details): not modelled by this import"),
    (_prefix("policy.draft"), "speculative-decoding draft model training: not imported (set "
     "roles.rollout.engine.speculative, docs/rollout-quantisation.md)"),
    (_prefix("on_policy_distillation"), "on-policy distillation: not modelled"),
    (_prefix("policy.generation.refit_transport", "policy.generation.refit_cfg"),
     "weight-refit transport: rlsim prices the sync by placement (NCCL broadcast apart, reshard colocated); "
     "the transport choice is not modelled"),
    (_prefix("policy.logprob_batch_size", "policy.logprob_chunk_size", "policy.sequence_packing.logprob_mb_tokens",
             "policy.dynamic_batching.logprob_mb_tokens"),
     "log-prob micro-batching: rlsim's forward passes use the actor's token budget"),
    (_any(_leaf("sequence_length_round", "algorithm", "microbatch_order", "train_mb_tokens")),
     "sequence packing / dynamic batching details (the budget comes from train_mb_tokens when enabled)"),
    (_prefix("grpo.max_rollout_turns"), "multi-turn rollouts (1 here for math): model tools with workload.agent"),
    (_prefix("grpo.dynamic_sampling_max_gen_batches", "grpo.batch_multiplier"),
     "dynamic sampling's extra generation batches: not modelled (filtered groups are not re-generated)"),
    (_any(_segment("distributed_data_parallel_config"), _leaf(
        "empty_unused_memory_level", "offload_optimizer_for_logprob", "cuda_graph_impl", "cuda_graph_modules",
           "cuda_graph_warmup_steps", "fine_grained_activation_offloading", "offload_modules",
           "recompute_granularity", "recompute_modules", "num_layers_in_first_pipeline_stage",
           "num_layers_in_last_pipeline_stage", "sequence_parallel", "expert_tensor_parallel_size",
           "moe_permute_fusion", "apply_rope_fusion", "bias_activation_fusion", "defer_fp32_logits",
           "moe_per_layer_logging", "moe_enable_deepep", "moe_token_dispatcher_type", "moe_shared_expert_overlap",
           "gradient_accumulation_fusion", "use_fused_weighted_squared_relu", "use_fused_linear_logprobs",
           "fused_linear_logprobs_chunk_size", "async_engine",
           "reset_encoder_cache_after_weight_update", "logprobs_mode", "custom_parallel_plan",
           "mtp_num_layers", "mtp_loss_scaling_factor", "mtp_use_repeated_layer", "mtp_detach_heads",
           "async_save", "ckpt_assume_constant_structure", "vllm_kwargs", "use_fastokens", "chat_template_kwargs")),
     "kernel, memory and layout details: not modelled (their effect is inside the profile's efficiencies)"),
]


def ignore_rest(ledger: Ledger) -> None:
    for test, reason in RULES:
        ledger.ignore_matching(test, reason)
    ledger.finish(NOT_MODELLED)
