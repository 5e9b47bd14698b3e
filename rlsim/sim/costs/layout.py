"""How a role's GPUs are split: tensor, pipeline, context, data and expert parallelism, in one object.

Every "how many GPUs" rule reads a `ParallelLayout`: the memory check and the training costs (GPUs per
replica, data-parallel ranks, how the experts are sharded), the colocated reshard (the expert group the
experts are gathered over), the fleet (GPUs per inference engine), validation, placement and the
planner's bounds. docs/operators.md, "Expert parallelism".

The expert rule is Megatron-Core's (`parallel_state.initialize_model_parallel`): per pipeline stage a
layer's experts are sharded over `expert_model_parallel_size` (ep) x `expert_tensor_parallel_size` (etp)
GPUs, the expert group, and the tp x dp ranks of a stage hold tp x dp / (ep x etp) copies of each shard,
the expert data-parallel ranks (which must be whole). rlsim does not expose etp: it takes tp / ep when ep
divides tp (each GPU of a TP group keeps a slice of the experts it holds, the layout SGLang's --ep-size
gives an engine) and 1 otherwise (whole experts, as verl's and Megatron-Bridge's MoE recipes set
etp = 1 with ep >= tp). Why this rule and not another: it is the one layout both training (Megatron's
groups) and the engines (ep divides tp) can hold, and the only one under which the memory a GPU holds and
the bytes a reshard gathers describe the same shard: the expert group is ep x etp GPUs, never max(tp, ep)
(which counts 6 GPUs for tp 6 / ep 4 where Megatron puts whole experts on 4).

Context parallelism (`cp`, a training or forward role) splits each micro-batch's sequences over cp GPUs that hold
the same weights: a data-parallel rank is tp x pp x cp GPUs (`rank_gpus`), and the gradients and the sharded
optimizer span dp x cp ranks (`weight_ranks`), as Megatron's distributed optimizer and verl's FSDP + Ulysses
mesh do (costs/context_parallel.py).
"""

from __future__ import annotations

from dataclasses import dataclass

CP_KINDS = ("ring", "ulysses")


@dataclass(frozen=True)
class ContextParallel:
    """A role's context parallelism: degree `cp` (the largest, when `dynamic`), `kind` ring or ulysses."""

    cp: int
    kind: str = "ring"
    dynamic: bool = False

    def __post_init__(self):
        if self.cp < 1 or self.kind not in CP_KINDS:
            raise ValueError(f"cp must be >= 1 and kind one of {CP_KINDS}, got cp={self.cp}, kind={self.kind!r}")

    def degrees(self) -> tuple[int, ...]:
        """The degrees a micro-batch may run at: cp alone, or when dynamic every power of two dividing cp (verl
        requires each dynamic group to be contiguous ranks aligned to its size, `_cp_members` checks)."""
        if not self.dynamic:
            return (self.cp,)
        return tuple(d for d in (2 ** k for k in range(self.cp.bit_length())) if self.cp % d == 0)


@dataclass(frozen=True)
class ParallelLayout:
    """The parallelism of one role: `tp` x `pp` GPUs per replica, `dp` replicas, experts over `ep` GPUs.

    `engine`: an inference-engine role (rollout, an LLM judge): one engine per `tp` GPUs; engines have no
    pipeline stages (validation refuses pp > 1) and shard experts over their own GPUs (ep divides tp).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    engine: bool = False
    cp: int = 1
    cp_kind: str = "ring"
    cp_dynamic: bool = False

    @classmethod
    def of(cls, parallel, gpus: int, engine: bool = False) -> ParallelLayout:
        """A role's layout from its `parallel` settings (tp, pp, cp, ep, optional dp) on `gpus` GPUs."""
        tp, pp, cp = parallel.tp, parallel.pp, parallel.cp
        dp = parallel.dp if parallel.dp is not None else max(1, gpus // (tp * pp * cp))
        return cls(tp=tp, pp=pp, dp=dp, ep=parallel.ep, engine=engine, cp=cp, cp_kind=parallel.cp_kind,
                   cp_dynamic=parallel.cp_dynamic)

    # ---------------------------------------------------------------- GPUs

    @property
    def replica_gpus(self) -> int:
        """GPUs of one model replica (a data-parallel rank): tp x pp."""
        return self.tp * self.pp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def rank_gpus(self) -> int:
        """GPUs of one data-parallel rank: a replica's tp x pp, times the cp GPUs its sequences are split over."""
        return self.tp * self.pp * self.cp

    @property
    def weight_ranks(self) -> int:
        """Ranks holding the same weight shard, over which gradients are reduced and the optimizer sharded: dp x cp."""
        return self.dp * self.cp

    @property
    def context(self):
        """The context parallelism the passes price (costs/context_parallel.ContextParallel), None without."""
        if self.cp <= 1:
            return None
        return ContextParallel(self.cp, self.cp_kind, self.cp_dynamic)

    def context_problem(self, heads: int) -> str:
        """Why this layout cannot split sequences over cp GPUs ('' when it can): engine roles have none; Ulysses
        scatters the attention heads over the cp ranks, so the heads must divide by tp x cp."""
        if self.cp <= 1:
            return ""
        if self.engine:
            return "must be 1 for an engine role: rlsim prices context parallelism in training and forward passes"
        if self.cp_kind == "ulysses" and heads % (self.tp * self.cp):
            return (f"ulysses scatters the {heads} attention heads over tp × cp = {self.tp * self.cp} GPUs; "
                    "they must divide evenly")
        return ""

    @property
    def engine_gpus(self) -> int:
        """GPUs of one inference engine: its tp (engines have no pipeline stages)."""
        return self.tp

    @property
    def stage_ranks(self) -> int:
        """GPUs of one pipeline stage over every replica: tp x cp x dp (Megatron's expert layout spans them: its MoE
        parallel folding forms expert groups over the context-parallel ranks too)."""
        return self.tp * self.cp * self.dp

    # ---------------------------------------------------------------- experts

    @property
    def expert_tensor_split(self) -> int:
        """GPUs each expert is tensor-split over (Megatron's expert_tensor_parallel_size): tp / ep when ep
        divides tp, else 1."""
        return self.tp // self.ep if self.tp % self.ep == 0 else 1

    @property
    def expert_group(self) -> int:
        """GPUs of one pipeline stage that share a layer's experts: ep x the expert tensor split."""
        return self.ep * self.expert_tensor_split

    @property
    def expert_group_gpus(self) -> int:
        """GPUs over which one copy of every expert is spread: the expert group of each stage, x pp."""
        return self.expert_group * self.pp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel ranks: copies of each expert shard in a stage, tp x dp / expert group (at least
        one: a layout with fewer ranks than its expert group, which validation refuses, is priced as one)."""
        return max(1, self.stage_ranks // self.expert_group)

    def expert_problem(self) -> str:
        """Why this layout cannot shard its experts ('' when it can): an engine's ep must divide its tp; a
        training role's expert group must divide its tp x dp ranks of a stage (Megatron's whole expert
        data parallelism)."""
        if self.ep <= 1:
            return ""
        if self.engine:
            if self.tp % self.ep:
                return f"must divide the engine's tp ({self.tp}): experts are sharded over the engine's GPUs"
            return ""
        if self.stage_ranks % self.expert_group:
            ranks = "tp × cp × dp" if self.cp > 1 else "tp × dp"
            return (f"must divide {ranks} ({self.stage_ranks}): experts are sharded over the data- and "
                    "tensor-parallel ranks")
        return ""
