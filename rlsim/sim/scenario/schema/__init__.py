"""The scenario language: pydantic models of a cluster, its models, roles, algorithm, workload and schedule.

Every model forbids unknown keys: a typo must be an error, never a silent default. Knob names
mirror verl / vLLM / ROLL / AReaL where those systems have one (`gpu_memory_utilization`,
`max_num_seqs`, `rollout.n` ~ `samples_per_prompt`, `data.train_batch_size` ~ `prompts_per_step`).

One module per section; this package re-exports every model, so `from rlsim.sim.scenario.schema
import X` names any of them.
"""

from rlsim.sim.scenario.schema.algorithm import (  # noqa: F401
    AlgorithmSpec,
)
from rlsim.sim.scenario.schema.base import (  # noqa: F401
    Strict,
)
from rlsim.sim.scenario.schema.cluster import (  # noqa: F401
    _BOUND_CHECKS,
    _BOUND_TYPES,
    ClusterSpec,
    PoolSpec,
    _pool_profile,
    profile_override_fields,
)
from rlsim.sim.scenario.schema.environments import (  # noqa: F401
    AgentSpec,
    EmpiricalSeconds,
    EnvironmentsSpec,
    EnvPoolSpec,
    FixedSeconds,
    LatencyDistribution,
    LatencyDistributionBase,
    LognormalSeconds,
    ToolSpec,
    UniformSeconds,
    WorkloadSpec,
)
from rlsim.sim.scenario.schema.lengths import (  # noqa: F401
    EmpiricalLength,
    FixedLength,
    LengthDistribution,
    LengthDistributionBase,
    LengthStage,
    LengthTrace,
    LognormalLength,
    UniformLength,
    _refuse_per_group,
)
from rlsim.sim.scenario.schema.models import (  # noqa: F401
    ModelSpec,
)
from rlsim.sim.scenario.schema.roles import (  # noqa: F401
    DisaggregationSpec,
    EngineSpec,
    ParallelSpec,
    QuantizationSpec,
    RoleName,
    RoleSpec,
    SpeculativeSpec,
    TrainSpec,
)
from rlsim.sim.scenario.schema.scenario import (  # noqa: F401
    Scenario,
)
from rlsim.sim.scenario.schema.schedule import (  # noqa: F401
    FullyAsyncSpec,
    GenerationOnlySpec,
    HybridFlowSpec,
    OneStepOffSpec,
    RollSpec,
    ScheduleSpec,
    VerlV1Spec,
    _knob_error,
)
from rlsim.sim.scenario.schema.schedule_options import (  # noqa: F401
    AsyncRolloutOptions,
    ElasticSpec,
    HybridSwitchOptions,
    LoraSpec,
    ReplayBufferSpec,
    ResplitSpec,
    RoutingSpec,
    SwitchSpec,
    SyncDispatchOptions,
    TailReshardSpec,
    TrainingOptions,
    WeightSyncOptions,
)
from rlsim.sim.scenario.schema.schedule_traits import (  # noqa: F401
    ScheduleTraits,
)
from rlsim.sim.scenario.schema.simulation import SimulationSpec  # noqa: F401
