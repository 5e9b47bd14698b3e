"""The walls of the house, checked: which package may import which, and no circles of imports.

Every `import rlsim...` in the package counts, including imports inside functions (a lazy import
is still a dependency); only imports under `if TYPE_CHECKING:` are exempt. The data path is
scenario -> placement -> schedule phases -> engine/costs -> collector -> Result -> report.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rlsim"

# package -> packages it must never import (top-level modules count as packages of their own).
FORBIDDEN = {
    "costs": {"scenario", "engine", "schedules", "report", "cli", "simulate", "sweep", "reproduce", "workload",
              "results", "plan", "importers", "calibration", "sensitivity"},
    "scenario": {"engine", "schedules", "report", "cli", "simulate", "sweep", "reproduce", "results", "plan",
                 "importers", "calibration", "sensitivity"},
    "engine": {"schedules", "report", "cli", "simulate", "sweep", "reproduce", "plan", "importers", "sensitivity"},
    "schedules": {"report", "cli", "simulate", "sweep", "reproduce", "plan", "importers", "sensitivity"},
    "report": {"cli", "simulate", "schedules", "engine", "sweep", "reproduce", "plan", "importers", "sensitivity"},
    "sweep": {"cli", "reproduce", "plan"},
    "results": {"cli", "simulate", "schedules", "report"},
}


def _unit(module: str) -> str:
    """rlsim.sim.costs.generation -> costs; rlsim.sim.simulate -> simulate; rlsim.tools.cli.run -> cli."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in ("sim", "tools"):
        return parts[2]
    return parts[1] if len(parts) > 1 else ""


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _lazy_table(path: Path) -> dict[str, str]:
    """A lazy facade's `_WHERE` table (name -> defining module), read from its source."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["_WHERE"]:
            return ast.literal_eval(node.value)
    return {}


LAZY_FACADES = {name: _lazy_table(PACKAGE.parent / path) for name, path in (
    ("rlsim.sim.api", "rlsim/sim/api.py"), ("rlsim.sim.scenario", "rlsim/sim/scenario/__init__.py"),
    ("rlsim.sim.costs", "rlsim/sim/costs/__init__.py"))}


@cache
def _parsed(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once for every test here (none of them changes it)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path) -> set[str]:
    tree = _parsed(path)
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("rlsim"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlsim") and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)  # `from rlsim.x import module`
            if node.module in LAZY_FACADES:  # a lazily re-exported name depends on the module that defines it
                found.update(LAZY_FACADES[node.module].get(a.name, node.module) for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


@cache
def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        graph[name] = {m for m in _imports(path) if m in files and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    pkgs: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        a = _unit(mod)
        pkgs.setdefault(a, set()).update(_unit(d) for d in deps if _unit(d) != a)
    return pkgs


@pytest.mark.slow  # over 2 s alone: the slow layer (CI runs it)
def test_no_circle_of_imports_between_files():
    # A package's __init__ re-exporting its modules is not a circle of code; leave those edges out.
    graph = {m: {d for d in deps if not (m.startswith(d + ".") or d == m.rsplit(".", 1)[0])}
             for m, deps in _graph().items()}
    assert _cycles(graph) == []


def test_no_circle_of_imports_between_packages():
    graph = _package_graph(_graph())
    graph.pop("", None)  # rlsim/__init__ is the public facade: it imports what it re-exports
    for deps in graph.values():
        deps.discard("")
    assert _cycles(graph) == []


def test_packages_keep_to_their_side_of_the_walls():
    broken = []
    for mod, deps in sorted(_graph().items()):
        banned = FORBIDDEN.get(_unit(mod), set())
        broken += [f"{mod} imports {d}" for d in sorted(deps) if _unit(d) in banned]
    assert broken == []


def test_nothing_imports_the_cli():
    offenders = [f"{m} imports {d}" for m, deps in _graph().items() for d in deps
                 if _unit(d) == "cli" and _unit(m) != "cli"]
    assert offenders == []


# The simulator's declared surfaces (lazily loaded): the simulation API, the pure costs, the input helpers.
SURFACES = ("rlsim.sim.api", "rlsim.sim.costs", "rlsim.sim.inputs")
# What the tools still import from the simulator besides its surfaces: nothing; a tool that needs a new
# simulator name adds it to a surface instead of reaching past it.
TOOLS_BEYOND_THE_API: set[str] = set()


def test_tools_reach_the_simulator_through_its_public_api():
    """A tool imports the simulator through its surfaces, or from a module on the list above (which must shrink
    when a tool moves onto a surface: the list is exactly what is left)."""
    direct = set()
    for path in sorted((PACKAGE / "tools").rglob("*.py")):
        tree = _parsed(path)
        direct |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                   and n.module.startswith("rlsim.sim.") and n.module not in SURFACES}
        direct |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
                   if a.name.startswith("rlsim.sim.") and a.name not in SURFACES}
    assert direct == TOOLS_BEYOND_THE_API


# The public names, pinned: adding or removing one is a conscious change (update the list, the module's docstring
# and docs/architecture.md together). The simulation surface stays small; helpers live on their own surfaces.
PUBLIC_NAMES = {
    "rlsim": ["Result", "ScenarioError", "__version__", "load_scenario", "simulate"],
    "rlsim.sim.api": [
        "HardwareProfile", "LengthLaw", "ModelShape", "PoolSpec", "Problem", "Result", "RoleName", "Scenario",
        "ScenarioError", "ScheduleSpec", "SimulationStalled", "StalenessUnit", "Strict", "apply_overrides",
        "available_profiles", "clip_to_window", "describe_mode", "dump_scenario", "load_profile", "load_scenario",
        "max_sequence_tokens", "measured_window", "parse_scenario", "placement_rows", "preset_names",
        "profile_numeric_fields", "profile_override_fields", "read_yaml", "resolve_preset", "sanity_warnings",
        "shipped_dir", "simulate", "validation_problems",
    ],
    "rlsim.sim.costs": [
        "DecodeCoefficients", "ENGINE_KINDS", "MemoryBreakdown", "SyncSetup", "allgather_time",
        "allreduce_time", "decode_coefficients", "decode_step_time", "engine_overheads",
        "engine_weight_bytes_per_gpu", "exposed_grad_comm", "forward_flops", "forward_memory_per_gpu",
        "forward_pass_time", "grad_allreduce_time", "grouped_gemm_work", "kv_capacity_tokens",
        "layer_memory_elements", "linear_layers_time", "offload_bytes_per_gpu", "offload_time",
        "pcie_transfer_time", "pipeline_bubble_factor", "prefill_time", "reshard_bytes_per_gpu",
        "reshard_redundant_bytes_per_gpu", "reshard_time", "ring_bandwidth_bytes_per_s", "serving_itl",
        "sync_parts", "sync_time", "touched_fraction", "tp_allreduce_time", "train_pass_time",
        "training_activation_bytes", "training_flops", "training_memory_per_gpu",
    ],
    "rlsim.sim.inputs": [
        "MAX_CSV_BYTES", "MAX_GPUS_PER_NODE", "MAX_NODES", "MAX_NUMBER", "MIN_MAGNITUDE", "PLACEMENT_ALIASES",
        "SCHEDULE_ALIASES", "YamlInputError", "canonical_name", "canonical_profile", "closest", "did_you_mean",
        "model_problems", "parse_yaml", "read_text_bounded", "unknown_profile_message",
    ],
}


@pytest.mark.parametrize("module", sorted(PUBLIC_NAMES))
def test_the_public_names_are_the_pinned_ones(module):
    assert sorted(importlib.import_module(module).__all__) == sorted(PUBLIC_NAMES[module])


def test_the_surfaces_do_not_overlap():
    """A name lives on one surface: the API does not re-offer the costs' or the input helpers' names."""
    names = {m: set(importlib.import_module(m).__all__) for m in SURFACES}
    assert names["rlsim.sim.api"] & (names["rlsim.sim.costs"] | names["rlsim.sim.inputs"]) == set()
    assert names["rlsim.sim.costs"] & names["rlsim.sim.inputs"] == set()


def test_costs_import_only_hardware_and_model_shapes():
    # csv_inputs is the one validated CSV parser (a leaf: it imports only the size limits), shared by the
    # checks that validate a measured latency/length file and the costs that sample from it.
    allowed = {"costs", "hardware", "model_shapes", "csv_inputs", "limits", "_lazy", "sampling"}
    broken = [f"{m} imports {d}" for m, deps in _graph().items() if _unit(m) == "costs"
              for d in deps if _unit(d) not in allowed]
    assert broken == []


# The walls at run time: what an import actually loads (lazy re-exports, imports inside functions).
# module -> modules (or packages) that importing it must not load.
HEAVY = ("pandas", "simpy", "matplotlib", "scipy")
LOADS_NOTHING_HEAVY = {
    "rlsim": (*HEAVY, "numpy", "pydantic", "typer", "rlsim.sim.scenario", "rlsim.sim.engine", "rlsim.tools"),
    "rlsim.sim.api": (*HEAVY, "numpy", "pydantic", "rlsim.sim.scenario", "rlsim.sim.engine", "rlsim.tools"),
    "rlsim.sim.inputs": (*HEAVY, "numpy", "pydantic", "rlsim.sim.scenario", "rlsim.sim.engine", "rlsim.tools"),
    "rlsim.sim.scenario": (*HEAVY, "numpy", "pydantic", "rlsim.sim.scenario.schema"),
    "rlsim.sim.costs": (*HEAVY, "numpy", "pydantic", "rlsim.sim.costs.generation"),
    "rlsim.sim.costs.phase_costs": (*HEAVY, "rlsim.sim.engine", "rlsim.sim.schedules"),  # pure: testable without SimPy
    "rlsim.tools.report.formats": (*HEAVY, "numpy", "rlsim.sim"),
    "rlsim.tools.cli": (*HEAVY, "numpy", "pydantic", "yaml", "rlsim.sim.scenario.schema", "rlsim.sim.engine"),
    "rlsim.sim.scenario.schema": ("pandas", "simpy", "matplotlib", "rlsim.sim.engine", "rlsim.sim.simulate",
                                  "rlsim.tools"),
    "rlsim.sim.simulate": ("matplotlib", "typer", "rich", "rlsim.tools"),
}


def _loaded_by(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("module", sorted(LOADS_NOTHING_HEAVY))
def test_an_import_loads_only_what_it_uses(module):
    loaded = _loaded_by(module)
    banned = LOADS_NOTHING_HEAVY[module]
    assert sorted(m for m in loaded if any(m == b or m.startswith(b + ".") for b in banned)) == []


def test_the_lazy_facades_still_hand_out_every_name():
    import rlsim
    import rlsim.sim.api as api
    import rlsim.sim.costs as costs
    import rlsim.sim.inputs as inputs
    import rlsim.sim.scenario as scenario

    for facade in (rlsim, api, costs, inputs, scenario):
        for name in facade.__all__:
            assert getattr(facade, name) is not None, f"{facade.__name__}.{name}"
    assert rlsim.simulate is api.simulate and rlsim.load_scenario is scenario.load_scenario
    with pytest.raises(AttributeError):
        _ = api.no_such_name


# The speed layer in one room: SimPy's private internals are named in rlsim/sim/engine/kernel.py only.
KERNEL = PACKAGE / "sim" / "engine" / "kernel.py"
SIMPY_PRIVATE = {"_queue", "_eid", "_now", "_value", "_ok", "_target", "_defused", "_resume", "_generator",
                 "_delay", "_events", "_check", "_populate_value", "_build_value"}


def _simpy_private_uses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in SIMPY_PRIVATE:
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Constant) and node.value in SIMPY_PRIVATE:  # getattr(event, "_ok")
            found.append((node.lineno, repr(node.value)))
        elif isinstance(node, ast.Attribute) and node.attr == "__new__" and ast.unparse(node.value) == "object":
            found.append((node.lineno, "object.__new__"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("simpy"):
            found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names
                      if a.name.startswith("_") or node.module.startswith("simpy.core")]
    return found


def test_only_the_kernel_names_simpys_private_attributes():
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line} {what}"
                 for path in sorted(PACKAGE.rglob("*.py")) if path != KERNEL
                 for line, what in _simpy_private_uses(_parsed(path))]
    assert offenders == []


def test_the_wall_check_sees_what_the_kernel_does():
    """The check above finds the kernel's own uses: it would find them anywhere else."""
    found = {what for _, what in _simpy_private_uses(ast.parse(KERNEL.read_text(encoding="utf-8")))}
    assert {"._queue", "._eid", "._now", "._value", "._ok", "._target", "object.__new__"} <= found


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 500, 80


def _has_reason(lines: list[str], start: int, stop: int) -> bool:
    return any(line.lstrip().startswith("# size:") for line in lines[max(0, start):stop])


def test_modules_and_functions_stay_small_or_say_why():
    """<= 500 lines a module and <= 80 a function, or a `# size: <reason>` comment (module: near the top;
    function: just above it)."""
    too_big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        if len(lines) > MAX_MODULE_LINES and not _has_reason(lines, 0, 40):
            too_big.append(f"{path.relative_to(PACKAGE.parent)}: {len(lines)} lines")
        for node in ast.walk(_parsed(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if length > MAX_FUNCTION_LINES and not _has_reason(lines, first - 4, first - 1):
                    too_big.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}: {length} lines")
    assert too_big == []


# ---------------------------------------------------------------- private names stay in their module
# `x._name` is refused where `_name` is defined in another module of the package: an object offers what others need
# as methods or public attributes. `self._name` inside the module that defines it is fine; a subclass in another
# module touching a private name of its base class is a reach too. The SimPy internals the kernel names are the
# kernel's business (the test above).


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _names(tree: ast.AST) -> tuple[set[str], list[tuple[ast.AST, str]]]:
    """What a module (or a class body) does with private names, in one walk: the names it defines (functions,
    classes, assigned names, arguments, `self._x = ...` attributes, `__slots__` entries) and the nodes that use a
    private attribute (`x._name`, `getattr(x, "_name")`)."""
    defined, used = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if _private(node.attr):
                used.append((node, node.attr))
                if isinstance(node.ctx, ast.Store) and _is_self(node.value):
                    defined.add(node.attr)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                defined.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
                defined.update(c.value for c in ast.walk(node.value)
                               if isinstance(c, ast.Constant) and isinstance(c.value, str))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            used.append((node, node.args[1].value))
    return {n for n in defined if _private(n)}, used


def _classes(trees: dict[str, ast.AST]) -> dict[tuple[str, str], tuple[ast.ClassDef, list[tuple[str, str]]]]:
    """(module, class) -> (its node, its bases as (module, class)), bases found through `from rlsim... import`."""
    out = {}
    for mod, tree in trees.items():
        imported = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom)
                    and (n.module or "").startswith("rlsim") for a in n.names}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                out[(mod, node.name)] = (node, [(imported.get(b.id, mod), b.id) for b in node.bases
                                                if isinstance(b, ast.Name)])
    return out


def _private_reaches(trees: dict[str, ast.AST], paths: dict[str, Path]) -> list[str]:
    names = {mod: _names(tree) for mod, tree in trees.items()}
    owner: dict[str, str] = {}
    for mod in sorted(names):
        for name in names[mod][0]:
            owner.setdefault(name, mod)
    classes = _classes(trees)
    class_names = {key: _names(node) for key, (node, bases) in classes.items() if bases}

    def inherited(key, seen=()) -> dict[str, str]:
        """Private names a class gets from base classes defined in other modules -> the module."""
        out: dict[str, str] = {}
        for base in classes[key][1]:
            if base not in classes or base in seen:
                continue
            if base[0] != key[0]:
                defined = class_names[base][0] if base in class_names else _names(classes[base][0])[0]
                out.update((n, base[0]) for n in defined if n not in out)
            out.update((n, m) for n, m in inherited(base, (*seen, key)).items() if m != key[0] and n not in out)
        return out

    found = set()
    for mod, (defined, used) in names.items():
        here = str(paths[mod].relative_to(PACKAGE.parent))
        for key in class_names:
            if key[0] == mod and (theirs := inherited(key)):
                found.update(f"{here}:{node.lineno} self.{name} (private to {theirs[name]})"
                             for node, name in class_names[key][1]
                             if name in theirs and isinstance(node, ast.Attribute) and _is_self(node.value))
        simpy_ok = paths[mod] == KERNEL
        for node, name in used:
            if name in defined or name not in owner or (simpy_ok and name in SIMPY_PRIVATE):
                continue
            where = next(m for m in sorted(names) if m != mod and name in names[m][0])
            found.add(f"{here}:{node.lineno} {ast.unparse(node)} (private to {where})")
    return sorted(found)


@cache
def _package_trees() -> tuple[dict[str, ast.AST], dict[str, Path]]:
    paths = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    return {m: _parsed(p) for m, p in paths.items()}, paths


def test_no_module_reaches_into_another_modules_private_names():
    assert _private_reaches(*_package_trees()) == []


def test_the_private_name_check_finds_each_kind_of_reach():
    """A schedule reading an engine's private attribute, a subclass touching its base's private state, a getattr
    by name: each is found; the owner's own `self._x` is not."""
    engine = ("class Engine:\n    def __init__(self):\n        self._tick = 0\n    def t(self):\n"
              "        return self._tick\n")
    base = "class Loop:\n    def __init__(self):\n        self._live = {}\n"
    sched = ("from rlsim.x.base import Loop\n\nclass Lending(Loop):\n    def go(self, engine):\n"
             "        self._live.clear()\n        getattr(engine, '_tick')\n        return engine._tick\n")
    trees = {m: ast.parse(src) for m, src in
             (("rlsim.x.engine", engine), ("rlsim.x.base", base), ("rlsim.x.sched", sched))}
    paths = {m: PACKAGE / (m.split(".", 1)[1].replace(".", "/") + ".py") for m in trees}
    found = _private_reaches(trees, paths)
    assert [f.split(" ", 1)[1] for f in found] == [
        "self._live (private to rlsim.x.base)", "getattr(engine, '_tick') (private to rlsim.x.engine)",
        "engine._tick (private to rlsim.x.engine)"]
    assert all(f.startswith("rlsim/x/sched.py:") for f in found)


# The deepest schedule class chain: FullyAsyncSchedule -> AsyncRolloutSchedule -> RLSchedule -> Schedule. What a
# framework adds to a loop is a component it plugs in (schedules/loop_components.py), not a subclass's subclass.
MAX_SCHEDULE_DEPTH = 3  # subclass levels below Schedule


def _schedule_classes() -> list[type]:
    import pkgutil

    import rlsim.sim.schedules as package
    from rlsim.sim.schedules.base import Schedule

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    found, todo = [], [Schedule]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_no_schedule_class_chain_is_deeper_than_fully_async():
    from rlsim.sim.schedules.base import Schedule
    from rlsim.sim.schedules.fully_async import FullyAsyncSchedule

    assert FullyAsyncSchedule.__mro__.index(Schedule) == MAX_SCHEDULE_DEPTH
    deep = [" -> ".join(c.__name__ for c in cls.__mro__[: cls.__mro__.index(Schedule) + 1])
            for cls in _schedule_classes()
            if cls.__module__.startswith("rlsim.") and cls.__mro__.index(Schedule) > MAX_SCHEDULE_DEPTH]
    assert deep == []


def test_the_depth_check_walks_every_schedule_class():
    from rlsim.sim.schedules import SCHEDULES

    classes = _schedule_classes()
    assert set(SCHEDULES.values()) <= set(classes)
    assert {c.__name__ for c in classes} >= {"RLSchedule", "AsyncRolloutSchedule", "VerlV1Schedule"}
