"""Tests of the SimPy inference engine (rlsim/sim/engine/inference.py).

The tiny cases use a toy model on hand-built hardware whose numbers make the step times easy:

* `FLAT`: weights 1152 B streamed at 1152 B/s (1 s), KV 11.52 B/token (0.01 s per token of context),
  a 100 ms fixed overhead and compute so fast it never matters. A decode step at total context S
  costs 1.1 + 0.01*S seconds; a prefill is memory bound and costs 1.1 s whatever its size.
* `PREFILL_COMPUTE`: same, but prefill runs at 1152 FLOP/s, so a prefill of T new tokens over a
  cached prefix of P costs (1152*T + 16*(T^2 + 2*T*P)) / 1152 + 0.1 = T + (T^2 + 2TP)/72 + 0.1 s.
* `MIXED` (property tests): decode compute runs at 2000 FLOP/s: the GEMMs (0.576*B s) combine with the
  1 s weight read as a smooth roofline, and attention FLOPs (0.016 s per context token) outweigh its KV read.

Expected times in the trace tests are written out by hand from those formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsim.sim.costs.generation import decode_coefficients, prefill_time
from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.engine.inference import EngineCapacityError, InferenceEngine
from rlsim.sim.engine.request import Request
from rlsim.sim.hardware import _NUMERIC_FIELDS, HardwareProfile
from rlsim.sim.model_shapes import ModelShape
from rlsim.sim.scenario.schema import EngineSpec

_SRC = "test value (tests/test_engine.py)"

# 1 layer, hidden 8, 1 head of 8, ffn 8, vocab 8: attention 8*(8+16) + 64 = 256, MLP 3*8*8 = 192,
# untied embeddings 2*8*8 = 128 -> 576 params, 1152 B in bf16; KV 2*1*1*8*0.72 = 11.52 B/token.
MODEL = ModelShape(layers=1, hidden=8, heads=1, kv_heads=1, ffn=8, vocab=8, kv_bytes=0.72)


def _hw(name: str, **override: float) -> HardwareProfile:
    values = dict(
        bf16_tflops=1.0, fp8_tflops=2.0, hbm_gb=1.0, hbm_tb_per_s=1.152e-9, nvlink_gb_per_s=1.0,
        nic_gbit_per_s=1.0, pcie_gb_per_s=1.0, decode_eta_mem=1.0, decode_eta_compute=1.0,
        decode_fixed_overhead_ms=100.0, prefill_eta_compute=1.0, train_mfu=0.5, forward_mfu=0.5,
        collective_latency_us=0.0, price_usd_per_gpu_hour=1.0,
    )
    values.update(override)
    # A toy GPU far below any plausible range (1,152 B/s of HBM), so it is built without validation.
    return HardwareProfile.model_construct(name=name, sources={k: _SRC for k in _NUMERIC_FIELDS}, **values)


FLAT = _hw("flat")
PREFILL_COMPUTE = _hw("prefill-compute", prefill_eta_compute=1.152e-9)  # 1e12 * 1.152e-9 = 1152 FLOP/s
MIXED = _hw("mixed", decode_eta_compute=2e-9, prefill_eta_compute=1.152e-7)


def x(v: float):
    return pytest.approx(v, rel=1e-12, abs=1e-12)


def step(s: float) -> float:
    """FLAT/PREFILL_COMPUTE decode step at total context s."""
    return 1.1 + 0.01 * s


def steps(s0: float, n: int, b: int = 1) -> float:
    """n decode steps from total context s0 with b running sequences (context grows by b per step)."""
    return sum(step(s0 + k * b) for k in range(n))


def pc_prefill(t: int, p: int = 0) -> float:
    """PREFILL_COMPUTE prefill of one sequence: t new tokens over a cached prefix of p."""
    return t + (t * t + 2 * t * p) / 72 + 0.1


def make(hw: HardwareProfile = FLAT, cap: float = 10_000, name: str = "e0", env: SimEnvironment | None = None,
         cls: type[InferenceEngine] | None = None, **spec) -> tuple[SimEnvironment, InferenceEngine]:
    env = env or SimEnvironment()
    if "p" not in env.ledger.pool_gpus:
        env.ledger.add_pool("p", 8)
    return env, (cls or InferenceEngine)(env, name, MODEL, hw, 1, EngineSpec(**spec), cap, pool="p")


def at(env: SimEnvironment, t: float, fn) -> None:
    def proc():
        yield env.timeout(t)
        fn()

    env.process(proc())


def rows(env: SimEnvironment, group: str = "e0") -> list[tuple[float, float]]:
    df = env.ledger.to_frame()
    df = df[df.gpu_group == group]
    return list(zip(df.start_s.tolist(), df.end_s.tolist(), strict=True))


# ---------------------------------------------------------------- the test hardware


def test_test_profiles_give_the_round_numbers():
    c = decode_coefficients(MODEL, FLAT, 1, 1)
    assert (c.intercept, c.slope, c.fixed) == (x(1.0), x(0.01), x(0.1))
    assert c.step_time(11) == x(1.21)
    assert prefill_time(MODEL, FLAT, 1, 10) == x(1.1)
    assert prefill_time(MODEL, FLAT, 1, 300) == x(1.1)
    assert prefill_time(MODEL, PREFILL_COMPUTE, 1, 10) == x(pc_prefill(10))
    assert prefill_time(MODEL, PREFILL_COMPUTE, 1, 7, 49, 7 * 15) == x(pc_prefill(7, 15))
    m = decode_coefficients(MODEL, MIXED, 1, 1)
    # One sequence: linear layers hypot(1.0 s weight read, 0.576 s GEMM); attention FLOPs (0.016 s per
    # context token) outweigh its KV read (0.01 s per token).
    assert m.intercept == x(math.hypot(1.0, 0.576)) and m.slope == x(0.016)
    assert m.step_time(70) == x(math.hypot(1.0, 0.576) + 0.016 * 70 + 0.1)


# ---------------------------------------------------------------- whole event traces


def test_single_request_prefill_then_decode():
    env, eng = make()
    r = Request(0, prompt_tokens=10, max_new_tokens=5)
    done = eng.submit(r)
    env.run()
    # Prefill 1.1 s emits token 1; tokens 2..5 are 4 steps at contexts 11, 12, 13, 14.
    assert r.arrival_s == 0
    assert r.first_token_s == x(1.1)
    assert r.finished_s == x(1.1 + steps(11, 4)) == x(6.0)
    assert done.triggered and done.value is r
    assert r.generated == 5 and r.version_tokens == {0: 5}
    assert r.prefilled_tokens == 10 and not r.aborted and r.preemptions == 0
    assert (eng.tokens_generated, eng.tokens_prefilled, eng.completed) == (5, 10, 1)
    assert eng.kv_used == 0 and eng.load == 0
    assert rows(env) == [(0.0, x(6.0))]


def test_two_requests_admitted_together_short_one_first():
    env, eng = make()
    short, long_ = Request(0, 10, 3), Request(1, 10, 6)
    eng.submit(short)
    eng.submit(long_)
    env.run()
    # One joint prefill (1.1 s). Batch of 2 at contexts 11+11 = 22: the short one needs 2 steps (22, 24).
    t_short = 1.1 + step(22) + step(24)
    assert short.first_token_s == long_.first_token_s == x(1.1)
    assert short.finished_s == x(t_short) == x(3.76)
    # The long one has 3 tokens (context 13) and runs alone: steps at 13, 14, 15.
    assert long_.finished_s == x(t_short + step(13) + step(14) + step(15)) == x(7.48)
    assert eng.tokens_generated == 9
    # Batch changes are sampled: the admission (empty batch), the batch of 2, the batch of 1.
    assert [(t, b) for t, b, _ in eng.stats] == [(0, 0), (x(1.1), 2), (x(t_short), 1)]
    assert [kv for _, _, kv in eng.stats] == [0, 22, 13]


def test_max_num_seqs_one_serialises():
    env, eng = make(max_num_seqs=1)
    a, b = Request(0, 10, 5), Request(1, 20, 3)
    eng.submit(a)
    eng.submit(b)
    env.run()
    assert a.finished_s == x(6.0)
    # b waits for a, then prefills (1.1 s) and decodes 2 steps at contexts 21 and 22.
    assert b.arrival_s == 0
    assert b.admitted_s >= a.finished_s
    assert b.first_token_s == x(6.0 + 1.1)
    assert b.finished_s == x(7.1 + step(21) + step(22)) == x(9.73)
    assert max(n for _, n, _ in eng.stats) == 1
    assert rows(env) == [(0.0, x(9.73))]


def test_admitted_s_is_when_prefill_starts():
    env, eng = make(max_num_seqs=1)
    a, b = Request(0, 10, 5), Request(1, 20, 3)
    eng.submit(a)
    eng.submit(b)
    env.run()
    assert a.admitted_s == 0.0  # got 1.1
    assert b.admitted_s == x(6.0)  # got 7.1: queueing time would include b's own prefill


def test_arrival_mid_decode_finishes_step_in_flight():
    env, eng = make()
    a, b = Request(0, 10, 5), Request(1, 10, 4)
    eng.submit(a)
    at(env, 2.5, lambda: eng.submit(b))
    env.run()
    # a: prefill [0, 1.1], steps at 11 [1.1, 2.31], at 12 [2.31, 3.53]; b arrives at 2.5 in that step.
    t_in_flight = 1.1 + step(11) + step(12)
    assert t_in_flight == x(3.53)
    # b's prefill runs right after the step in flight: [3.53, 4.63]; a has 3 tokens (context 13).
    assert b.arrival_s == 2.5
    assert b.first_token_s == x(t_in_flight + 1.1)
    # Batch of 2 from 13 + 11 = 24: a needs 2 more steps (24, 26) and finishes with b at 3 tokens.
    t_a = t_in_flight + 1.1 + step(24) + step(26)
    assert a.finished_s == x(t_a) == x(7.33)
    assert b.finished_s == x(t_a + step(13)) == x(8.56)
    assert a.version_tokens == {0: 5} and b.version_tokens == {0: 4}
    assert rows(env) == [(0.0, x(8.56))]


def test_arrival_when_batch_is_full_waits_for_a_completion():
    env, eng = make(max_num_seqs=1)
    a, b = Request(0, 10, 5), Request(1, 10, 2)
    eng.submit(a)
    at(env, 2.5, lambda: eng.submit(b))
    env.run()
    # The full batch is not interrupted: a runs undisturbed to 6.0, then b prefills and takes one step.
    assert a.finished_s == x(6.0)
    assert b.first_token_s == x(7.1)
    assert b.finished_s == x(7.1 + step(11))


def test_kv_preemption_recomputes_newest_request():
    env, eng = make(cap=40)
    a, b = Request(0, 10, 20), Request(1, 10, 20)
    eng.submit(a)
    eng.submit(b)
    env.run()
    # Joint prefill (a needs 10+1+1 KV, b 10+1+max(2, 0.4) on top: 25 <= 40). Batch context 22 grows
    # by 2 per step: 9 steps fill the 40 tokens, then b (newest) is preempted with 10 tokens.
    t_pre = 1.1 + steps(22, 9, b=2)
    assert t_pre == x(13.7)
    # a (context 20) runs alone: 10 steps at 20..29; b cannot come back before (20+1+2 > 40-20).
    t_a = t_pre + steps(20, 10)
    assert a.finished_s == x(t_a) == x(27.15)
    # b re-prefills its 20-token context (emitting token 11), then 9 steps at 21..29.
    assert b.finished_s == x(t_a + 1.1 + steps(21, 9)) == x(40.4)
    assert (eng.preemptions, a.preemptions, b.preemptions) == (1, 0, 1)
    assert b.prefilled_tokens == 10 + 20 and eng.tokens_prefilled == 40
    assert a.generated == b.generated == 20 and eng.tokens_generated == 40
    assert b.version_tokens == {0: 20}
    assert b.first_token_s == x(1.1)
    assert eng.kv_used == 0


def test_preemption_victim_is_most_recently_admitted():
    env, eng = make(cap=120, cls=KVCheckedEngine)
    eng.violations = []
    a, b, c = Request(0, 30, 60), Request(1, 5, 60), Request(2, 10, 60)
    eng.submit(a)
    eng.submit(b)
    at(env, 5.0, lambda: eng.submit(c))
    env.run()
    assert c.preemptions >= 1 and eng.preemptions >= 1
    assert a.preemptions == 0  # the oldest is never the victim while others run
    for r in (a, b, c):
        assert r.finished and r.generated == 60 and sum(r.version_tokens.values()) == 60
    assert eng.violations == []  # the KV peak, right after each decode advance, stays within 120
    assert eng.tokens_generated == 180


def test_abort_running_and_waiting():
    env, eng = make(max_num_seqs=1)
    a, b, c = Request(0, 10, 50), Request(1, 10, 5), Request(2, 10, 3)
    seen = []
    for r in (a, b, c):
        eng.submit(r).callbacks.append(lambda ev: seen.append((ev.value.rid, env.now)))
    at(env, 0.5, lambda: eng.abort(b))  # waiting
    at(env, 2.0, lambda: eng.abort(a))  # running, in its first decode step [1.1, 2.31]
    env.run()
    assert seen[:2] == [(1, 0.5), (0, 2.0)]
    assert a.aborted and b.aborted and not c.aborted
    assert not a.finished and not b.finished
    assert a.generated == 1 and b.generated == 0 and b.admitted_s is None and b.prefilled_tokens == 0
    assert sum(a.version_tokens.values()) == a.generated
    # The step in flight ends at 2.31, then c prefills [2.31, 3.41] and decodes at 11 and 12.
    assert c.first_token_s == x(2.31 + 1.1)
    assert c.finished_s == x(2.31 + 1.1 + step(11) + step(12)) == x(5.84)
    assert eng.tokens_generated == a.generated + c.generated == 4
    assert eng.completed == 1
    assert eng.kv_used == 0 and eng.load == 0
    eng.abort(c)  # aborting a finished request is a no-op
    assert not c.aborted
    assert len(seen) == 3


def test_abort_frees_kv_while_others_run():
    env, eng = make()
    a, b = Request(0, 10, 40), Request(1, 50, 40)
    eng.submit(a)
    eng.submit(b)
    kv = {}

    def abort_b():
        kv["before"] = eng.kv_used
        eng.abort(b)
        kv["after"] = eng.kv_used

    at(env, 10.0, abort_b)
    env.run()
    assert kv["before"] - kv["after"] == 50 + b.generated
    assert b.aborted and a.finished and a.generated == 40
    assert eng.kv_used == 0


def _pause_run(mode: str) -> tuple[SimEnvironment, InferenceEngine, Request, dict]:
    env, eng = make(hw=PREFILL_COMPUTE)
    r = Request(0, 10, 10)
    eng.submit(r)
    log = {}

    def driver():
        yield env.timeout(pc_prefill(10) + 1.5)  # inside the second decode step
        ev = eng.pause()
        yield ev
        log["paused_at"] = env.now
        log["paused_flag"] = eng.paused
        log["version_tokens"] = dict(r.version_tokens)  # flushed at the pause
        yield env.timeout(20.0 - env.now)
        eng.resume(version=1, mode=mode)

    env.process(driver())
    env.run()
    return env, eng, r, log


def test_hold_admits_only_what_it_keeps_and_release_puts_the_rest_back_in_order():
    """A draining weight update: the engine admits only its in-flight request; the others wait aside (out of
    `load`), come back to the head of the queue in arrival order, and one aborted meanwhile stays out."""
    env, eng = make(max_num_seqs=4)
    first = Request(1, 10, 20)
    eng.submit(first)
    later = [Request(i, 10, 5) for i in (2, 3, 4)]
    log = {}

    def driver():
        yield env.timeout(1.0)
        eng.hold({first})
        for r in later:
            eng.submit(r)
        eng.abort(later[1])
        yield first.done
        yield env.timeout(1.0)
        log["load"], log["holding"] = eng.load, eng.holding
        log["admitted"] = [r.admitted_s for r in later]
        eng.release()
        log["waiting"] = [r.rid for r in eng.waiting]

    env.process(driver())
    env.run()
    assert log["holding"] and log["load"] == 0  # what waits aside is not the engine's load
    assert log["admitted"] == [None, None, None]  # nothing else started while held
    assert log["waiting"] == [2, 4]  # back in arrival order; the aborted one is gone
    assert not eng.holding and later[1].aborted and later[1].admitted_s is None
    assert later[0].finished and later[2].finished and not later[1].finished


def test_weights_load_at_a_pause_or_into_an_idle_engine_only():
    env, eng = make()
    eng.resume(version=3)  # idle: fine (a woken lent engine, the first batch of a step)
    assert eng.weight_version == 3
    eng.submit(Request(1, 10, 50))
    at(env, 5.0, lambda: eng.resume(version=4))
    with pytest.raises(RuntimeError, match="weights load at a pause"):
        env.run()
    with pytest.raises(AttributeError):
        eng.weight_version = 5


@pytest.mark.parametrize("mode", ["keep", "recompute"])
def test_pause_then_resume(mode):
    env, eng, r, log = _pause_run(mode)
    p1 = pc_prefill(10)  # 10 + 100/72 + 0.1
    # The pause lands after the step in flight: steps at contexts 11 and 12, 3 tokens made by version 0.
    assert log["paused_at"] == x(p1 + step(11) + step(12))
    assert log["paused_flag"] and log["version_tokens"] == {0: 3}
    assert not eng.paused and eng.weight_version == 1
    if mode == "keep":
        # 7 more steps at contexts 13..19 from the resume at t=20.
        assert r.finished_s == x(20.0 + steps(13, 7))
        assert r.prefilled_tokens == 10
    else:
        # The 13-token context is re-prefilled (emitting token 4), then 6 steps at 14..19.
        assert r.finished_s == x(20.0 + pc_prefill(13) + steps(14, 6))
        assert r.prefilled_tokens == 10 + 13
    assert r.version_tokens == {0: 3, 1: 7}
    assert r.generated == 10 and r.first_token_s == x(p1)
    assert rows(env) == [(0.0, x(log["paused_at"])), (20.0, x(r.finished_s))]
    df = env.ledger.to_frame()
    assert df.policy_version.tolist() == [0, 1]


def test_recompute_resume_costs_more_than_keep():
    _, _, keep, _ = _pause_run("keep")
    _, _, rec, _ = _pause_run("recompute")
    assert rec.finished_s - keep.finished_s == x(pc_prefill(13) - step(13))
    assert rec.finished_s > keep.finished_s
    assert sum(rec.version_tokens.values()) == sum(keep.version_tokens.values()) == 10


def test_pause_idle_engine_and_submit_while_paused():
    env, eng = make()
    r = Request(0, 10, 2)
    log = {}

    def driver():
        yield env.timeout(1.0)
        yield eng.pause()
        log["paused_at"] = env.now
        eng.submit(r)  # queued, not started while paused
        yield env.timeout(4.0)
        log["started"] = r.first_token_s
        eng.resume()

    env.process(driver())
    env.run()
    assert log == {"paused_at": 1.0, "started": None}
    assert r.first_token_s == x(5.0 + 1.1)
    assert r.finished_s == x(6.1 + step(11))
    assert r.version_tokens == {0: 2}


@pytest.mark.parametrize("caching", [True, False])
def test_prefix_caching_second_turn(caching):
    env, eng = make(hw=PREFILL_COMPUTE, enable_prefix_caching=caching)
    t1 = Request(0, 10, 5, trajectory_id="traj")
    t2 = Request(1, 7, 3, prefix_tokens=15, trajectory_id="traj")

    def agent():
        yield eng.submit(t1)
        assert t1.context_tokens == 15
        assert eng.kv_used == (15 if caching else 0)  # the finished turn stays cached
        yield eng.submit(t2)

    env.process(agent())
    env.run()
    f1 = pc_prefill(10) + steps(11, 4)
    assert t1.finished_s == x(f1)
    if caching:
        # Only the 7 new tokens are prefilled; they attend the 15 cached ones.
        assert t2.prefilled_tokens == 7 and eng.tokens_prefilled == 17
        p2 = pc_prefill(7, 15)
    else:
        assert t2.prefilled_tokens == 22 and eng.tokens_prefilled == 32
        p2 = pc_prefill(22)
    # Token 1 of turn 2 from the prefill, then steps at contexts 23 and 24.
    assert t2.first_token_s == x(f1 + p2)
    assert t2.finished_s == x(f1 + p2 + step(23) + step(24))
    assert t2.generated == 3
    assert eng.kv_used == (25 if caching else 0)


def test_prefix_cache_is_evicted_for_a_newcomer():
    env, eng = make(cap=40, enable_prefix_caching=True)
    t1 = Request(0, 10, 5, trajectory_id="t")
    other = Request(1, 30, 2, trajectory_id="u")
    t2 = Request(2, 7, 3, prefix_tokens=15, trajectory_id="t")

    def agent():
        yield eng.submit(t1)
        assert eng.kv_used == 15
        # 30 + 1 + 1 KV do not fit next to the 15 cached tokens: the cache of "t" is evicted.
        yield eng.submit(other)
        assert eng.kv_used == 32  # now "u" is cached
        yield eng.submit(t2)

    env.process(agent())
    env.run()
    assert t2.prefilled_tokens == 22  # its prefix was evicted: the whole context is prefilled
    assert t2.finished and t2.generated == 3
    assert eng.kv_used <= 40


def test_ledger_records_busy_periods():
    env, eng = make()
    a, b = Request(0, 10, 5), Request(1, 10, 5)
    eng.submit(a)
    at(env, 10.0, lambda: eng.submit(b))
    env.run()
    eng.close()  # nothing open: no extra row
    assert rows(env) == [(0.0, x(6.0)), (10.0, x(16.0))]
    df = env.ledger.to_frame()
    assert set(df.role) == {"rollout"} and set(df.phase) == {"generate"} and set(df.gpus) == {1}
    assert set(df.pool) == {"p"}


def _rl_step_change_run() -> tuple[SimEnvironment, Request]:
    env, eng = make()
    a, b = Request(0, 10, 5), Request(1, 10, 2)
    eng.submit(a)

    def next_step():
        env.rl_step = 1
        eng.submit(b)

    at(env, 3.0, next_step)
    env.run()
    return env, b


def test_ledger_splits_busy_interval_at_rl_step_change():
    env, b = _rl_step_change_run()
    # b wakes the engine in a's step [2.31, 3.53]; the admission at 3.53 opens a new interval.
    df = env.ledger.to_frame()
    assert df.start_s.tolist() == [0.0, x(3.53)]
    # b prefills [3.53, 4.63] and takes one step with a (at 13 + 11 = 24); a then takes its last one at 14.
    assert b.finished_s == x(4.63 + step(24)) == x(5.97)
    assert df.end_s.tolist() == [x(3.53), x(5.97 + step(14))]
    assert df.step.tolist()[1] == 1


def test_ledger_interval_closed_by_step_change_keeps_its_step():
    env, _ = _rl_step_change_run()
    assert env.ledger.to_frame().step.tolist() == [0, 1]  # got [1, 1]


def test_close_records_open_interval():
    env, eng = make()
    eng.submit(Request(0, 10, 100))
    env.run(until=5.0)
    eng.close()
    assert rows(env) == [(0.0, 5.0)]


def test_prefill_split_by_max_num_batched_tokens():
    env, eng = make(max_num_batched_tokens=10)
    a, b = Request(0, 15, 2), Request(1, 10, 2)
    eng.submit(a)
    eng.submit(b)
    env.run()
    # 25 prompt tokens in iterations of <= 10: 3 prefill passes of 1.1 s.
    assert a.first_token_s == b.first_token_s == x(3.3)
    assert a.finished_s == b.finished_s == x(3.3 + step(27))


def test_chunked_prefill_piggybacks_on_decode():
    env, eng = make(max_num_batched_tokens=10, chunked_prefill=True)
    a, b = Request(0, 10, 30), Request(1, 20, 3)
    eng.submit(a)
    at(env, 2.0, lambda: eng.submit(b))
    env.run()
    # b arrives in a's step at 11 [1.1, 2.31]. Its 20 tokens take 2 chunks (2 x 1.1 s) during which a
    # decodes 2 steps (at 12 and 13) without their fixed overhead.
    t_b1 = 2.31 + 2 * 1.1 + step(12) + step(13) - 2 * 0.1
    assert b.first_token_s == x(t_b1) == x(6.76)
    # Batch of 2 from 14 + 21 = 35: b needs 2 steps (35, 37).
    t_b = t_b1 + step(35) + step(37)
    assert b.finished_s == x(t_b)
    # a has 6 tokens (context 16) and 24 steps to go.
    assert a.finished_s == x(t_b + steps(16, 24))
    assert a.generated == 30 and b.generated == 3


def test_chunked_prefill_respects_kv_capacity():
    env, eng = make(cap=55, max_num_batched_tokens=10, chunked_prefill=True, cls=KVCheckedEngine)
    eng.violations = []
    a, b = Request(0, 10, 30), Request(1, 40, 5)
    eng.submit(a)
    at(env, 2.0, lambda: eng.submit(b))
    env.run()
    # At 2.31 a holds 12 tokens; b needs 40 + 1 + 2 <= 55 - 12 and is admitted. Its 4 chunks let a
    # decode 4 tokens, so after the prefill a holds 16 and b 41: 57 > 55 (as it once was).
    assert eng.violations == [] and a.finished and b.finished


def test_request_larger_than_engine_raises():
    env, eng = make(cap=20)
    eng.submit(Request(0, 30, 5))
    with pytest.raises(EngineCapacityError):
        env.run()


# ---------------------------------------------------------------- property tests


@dataclass
class Outcome:
    env: SimEnvironment
    engines: list[InferenceEngine]
    requests: list[Request]
    fired: dict[int, int]
    kv_violations: list[tuple[str, float, float]] = field(default_factory=list)

    def trace(self):
        return [
            (r.rid, r.engine, r.arrival_s, r.admitted_s, r.first_token_s, r.finished_s, r.generated,
             r.preemptions, r.prefilled_tokens, r.aborted, tuple(sorted(r.version_tokens.items())))
            for r in sorted(self.requests, key=lambda r: r.rid)
        ]


@st.composite
def workloads(draw, chunked=False):
    n_eng = draw(st.integers(1, 3))
    engines = [
        dict(
            max_num_seqs=draw(st.integers(1, 16)),
            slack=draw(st.sampled_from([1.0, 1.0, 1.2, 2.0, 5.0, 50.0])),
            caching=draw(st.booleans()),
            mbt=draw(st.sampled_from([32, 256, 8192])),
            pause=draw(st.none() | st.tuples(st.floats(0, 80), st.floats(0, 20),
                                              st.sampled_from(["keep", "recompute"]))),
        )
        for _ in range(n_eng)
    ]
    aborts = draw(st.booleans())
    reqs = []
    for i in range(draw(st.integers(1, 40))):
        reqs.append(dict(
            rid=i,
            engine=draw(st.integers(0, n_eng - 1)),
            arrival=draw(st.sampled_from([0.0, 0.0]) | st.floats(0, 100)),
            prompt=draw(st.integers(1, 300)),
            new=draw(st.integers(1, 300)),
            abort=draw(st.none() | st.floats(0, 60)) if aborts else None,
            turn2=draw(st.none() | st.tuples(st.integers(1, 100), st.integers(1, 100))),
        ))
    return dict(engines=engines, requests=reqs, chunked=chunked)


class KVCheckedEngine(InferenceEngine):
    """Records each moment the KV in use is past capacity, checked around every decode advance's completions
    (before them: the peak) and every prefill's end."""

    violations: list

    def _check(self, where: str) -> None:
        if self.kv_used > self.kv_capacity:
            self.violations.append((where, self.env.now, self.kv_used))

    def _pop_completions(self) -> None:
        self._check("_pop_completions")
        super()._pop_completions()
        self._check("_pop_completions")

    def _complete_prefill(self, admitted) -> None:
        self._check("_complete_prefill")
        super()._complete_prefill(admitted)
        self._check("_complete_prefill")


def run_workload(w: dict, check_kv: bool = True) -> Outcome:
    env = SimEnvironment(seed=0)
    env.ledger.add_pool("p", 8)
    out = Outcome(env, [], [], {})
    for i, e in enumerate(w["engines"]):
        mine = [r for r in w["requests"] if r["engine"] == i]
        need = max((r["prompt"] + r["new"] + (sum(r["turn2"]) if r["turn2"] else 0) for r in mine), default=1)
        cap = math.ceil((need + 2) * e["slack"])
        spec = EngineSpec(max_num_seqs=e["max_num_seqs"], enable_prefix_caching=e["caching"],
                          max_num_batched_tokens=e["mbt"], chunked_prefill=w["chunked"])
        if check_kv:
            eng = KVCheckedEngine(env, f"e{i}", MODEL, MIXED, 1, spec, cap, pool="p")
            eng.violations = out.kv_violations
        else:
            eng = InferenceEngine(env, f"e{i}", MODEL, MIXED, 1, spec, cap, pool="p")
        out.engines.append(eng)
        if e["pause"] is not None:
            t, d, mode = e["pause"]

            def pauser(eng=eng, t=t, d=d, mode=mode):
                yield env.timeout(t)
                yield eng.pause()
                yield env.timeout(d)
                eng.resume(version=1, mode=mode)

            env.process(pauser())

    def count(ev):
        out.fired[ev.value.rid] = out.fired.get(ev.value.rid, 0) + 1

    def client(spec):
        eng = out.engines[spec["engine"]]
        yield env.timeout(spec["arrival"])
        r = Request(spec["rid"], spec["prompt"], spec["new"], trajectory_id=spec["rid"])
        out.requests.append(r)
        done = eng.submit(r)
        done.callbacks.append(count)
        if spec["abort"] is not None:
            at(env, spec["abort"], lambda: eng.abort(r))
        yield done
        if spec["turn2"] is not None and not r.aborted:
            p2, n2 = spec["turn2"]
            r2 = Request(1000 + spec["rid"], p2, n2, prefix_tokens=r.context_tokens, trajectory_id=spec["rid"])
            out.requests.append(r2)
            eng.submit(r2).callbacks.append(count)

    for spec in w["requests"]:
        env.process(client(spec))
    while env.peek() != math.inf:
        env.step()
        if check_kv:
            for eng in out.engines:
                if eng.kv_used > eng.kv_capacity:
                    out.kv_violations.append(("event", env.now, eng.kv_used))
    for eng in out.engines:
        eng.close()
    return out


def check_invariants(out: Outcome, check_kv: bool = True) -> None:
    env = out.env
    for r in out.requests:
        assert out.fired.get(r.rid) == 1, f"done of {r.rid} fired {out.fired.get(r.rid)} times"
        assert r.done.triggered
        assert r.aborted != r.finished
        assert sum(r.version_tokens.values()) == r.generated
        assert set(r.version_tokens) <= {0, 1}
        if r.finished:
            assert r.generated == r.max_new_tokens
            assert r.arrival_s <= r.admitted_s <= r.first_token_s <= r.finished_s <= env.now
            assert r.prefilled_tokens >= r.prompt_tokens
        else:
            assert r.generated <= r.max_new_tokens
    for eng in out.engines:
        mine = [r for r in out.requests if r.engine == eng.name]
        assert eng.tokens_generated == sum(r.generated for r in mine)
        assert eng.tokens_prefilled == sum(r.prefilled_tokens for r in mine)
        assert eng.completed == sum(r.finished for r in mine)
        assert eng.preemptions == sum(r.preemptions for r in mine)
        assert not eng.running and not eng.waiting
        assert eng.kv_used == eng._cache.tokens >= 0
        if check_kv:
            assert all(kv <= eng.kv_capacity for _, _, kv in eng.stats)
    if check_kv:
        assert out.kv_violations == []
    df = env.ledger.to_frame()
    for eng in out.engines:
        ivs = sorted(rows(env, eng.name))
        assert sum(e - s for s, e in ivs) <= env.now + 1e-9
        for (_, e0), (s1, _) in zip(ivs, ivs[1:], strict=False):
            assert e0 <= s1, f"overlapping busy intervals on {eng.name}"
        for s, e in ivs:
            assert 0 <= s < e <= env.now
        # Every completion happens while its engine is busy.
        for r in out.requests:
            if r.engine == eng.name and r.finished:
                assert any(s - 1e-9 <= r.finished_s <= e + 1e-9 for s, e in ivs)
    assert set(df.gpu_group) <= {eng.name for eng in out.engines}


_PROPS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_PROPS
@given(workloads())
def test_random_workloads_complete_consistently(w):
    out = run_workload(w)
    check_invariants(out)
    # Every non-aborted request (first turns and the follow-up turns) completed.
    first = {r.rid for r in out.requests if r.rid < 1000}
    assert first == {s["rid"] for s in w["requests"]}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_deterministic(w):
    a, b = run_workload(w), run_workload(w)
    assert a.trace() == b.trace()
    assert a.env.events_processed == b.env.events_processed
    assert a.env.ledger.to_frame().equals(b.env.ledger.to_frame())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(chunked=True))
def test_random_chunked_workloads_complete(w):
    out = run_workload(w)  # the KV bound checked after every event, as for unchunked workloads
    check_invariants(out)


def reference_times(reqs: list[tuple[float, int, int]], max_num_seqs: int, mbt: int) -> list[tuple[float, float]]:
    """Token-by-token reference of one engine with ample KV: (first token, finish) per request.

    FIFO admission at step boundaries (up to max_num_seqs), one prefill pass over the admitted batch
    that emits each one's first token, then one decode step at a time at the batch's total context.
    """
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i][0], i))
    waiting: list[int] = []
    running: dict[int, int] = {}  # request -> context
    left: dict[int, int] = {}
    out: dict[int, list[float]] = {}
    t, nxt = 0.0, 0
    while nxt < len(order) or waiting or running:
        while nxt < len(order) and reqs[order[nxt]][0] <= t:
            waiting.append(order[nxt])
            nxt += 1
        admitted = []
        while waiting and len(running) + len(admitted) < max_num_seqs:
            admitted.append(waiting.pop(0))
        if admitted:
            toks = [reqs[i][1] for i in admitted]
            iters = max(1, math.ceil(sum(toks) / mbt))
            t += iters * prefill_time(MODEL, MIXED, 1, sum(toks) / iters, sum(k * k for k in toks) / iters)
            for i in admitted:
                out[i] = [t, t]
                if reqs[i][2] > 1:
                    running[i], left[i] = reqs[i][1] + 1, reqs[i][2] - 1
            continue
        if not running:
            t = max(t, reqs[order[nxt]][0])
            continue
        t += decode_coefficients(MODEL, MIXED, 1, len(running)).step_time(sum(running.values()))
        for i in list(running):
            running[i] += 1
            left[i] -= 1
            if left[i] == 0:
                out[i][1] = t
                del running[i], left[i]
    return [tuple(out[i]) for i in range(len(reqs))]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.floats(0, 60), st.integers(1, 300), st.integers(1, 120)), min_size=1, max_size=25),
    st.integers(1, 16),
    st.sampled_from([64, 8192]),
)
def test_closed_form_matches_token_by_token_reference(reqs, max_num_seqs, mbt):
    env, eng = make(hw=MIXED, cap=1e9, max_num_seqs=max_num_seqs, max_num_batched_tokens=mbt)
    made = []

    def client(i, arrival, prompt, new):
        yield env.timeout(arrival)
        r = Request(i, prompt, new)
        made.append(r)
        eng.submit(r)

    for i, spec in enumerate(reqs):
        env.process(client(i, *spec))
    env.run()
    got = [(r.first_token_s, r.finished_s) for r in sorted(made, key=lambda r: r.rid)]
    want = reference_times(reqs, max_num_seqs, mbt)
    assert got == [(pytest.approx(a, rel=1e-9), pytest.approx(b, rel=1e-9)) for a, b in want]


# ---------------------------------------------------------------- cost scales with sequences


def _events(n: int, scale: int) -> int:
    env, eng = make(hw=MIXED, cap=1e9, max_num_seqs=16)
    for i in range(n):
        def client(i=i):
            yield env.timeout(0.7 * i)
            eng.submit(Request(i, 50 + (37 * i) % 200, scale * (100 + (53 * i) % 400)))

        env.process(client())
    env.run()
    assert eng.completed == n
    return env.events_processed


def test_longer_responses_cost_about_the_same_events():
    base, double = _events(60, 1), _events(60, 2)
    assert double <= 1.3 * base
    assert base <= 1.3 * double


def test_more_requests_cost_proportionally_more_events():
    base, double = _events(60, 1), _events(120, 1)
    assert 1.6 * base <= double <= 2.5 * base


def test_prefix_cache_evicts_least_recently_used_first_and_spares_keep():
    from rlsim.sim.engine.prefix_cache import PrefixCache

    cache = PrefixCache()
    for key, tokens in (("a", 10), ("b", 20), ("c", 30)):
        cache.put(key, tokens)
    cache.put("a", 15)  # re-cached: now the most recently used
    assert (cache.tokens, len(cache), cache.get("a"), cache.get("z")) == (65, 3, 15, -1)
    # capacity 100, 40 held by running sequences, 65 cached: -5 free; 10 needed -> evict b (20) only
    cache.evict_until(100.0, 40, 10, keep="a")
    assert (cache.get("b"), cache.get("c"), cache.get("a"), cache.tokens) == (-1, 30, 15, 45)
    cache.evict_until(100.0, 40, 100, keep="a")  # cannot get there: everything but `keep` goes
    assert (len(cache), cache.tokens) == (1, 15)
    assert cache.drop("a") == 15 and cache.drop("a") == 0 and cache.tokens == 0
