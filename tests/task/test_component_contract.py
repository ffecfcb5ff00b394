"""The component contract (``stormpy.api.contract``): components reach the engine only through it.

mypy checks statically that ``BoltTask``/``SpoutTask`` implement ``BoltOutputCollector``/
``SpoutOutputCollector`` (``tests/test_typecheck.py``); here the same holds at run time on real
tasks, the contract module stands alone (it imports no engine module), and no module but the
one that defines components touches the private ``_task`` handle.
"""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import stormpy
from stormpy import Bolt, Grouping, Spout, Topology
from stormpy.api import contract
from stormpy.task.bolt_executor import BoltTask
from stormpy.task.runtime import WorkerRuntime
from stormpy.task.spout_executor import SpoutTask
from stormpy.api.compile import compile_topology
from stormpy.topology.plan import build_plan

PACKAGE = Path(stormpy.__file__).resolve().parent


class Source(Spout):
    outputs = ["n"]


class Sink(Bolt):
    outputs: list[str] = []


class Pair(Topology):
    source = Source.spec()
    sink = Sink.spec(inputs={source: Grouping.SHUFFLE})


class _NoTransfer:
    def send(self, dest: int, messages: list[object]) -> None:
        raise AssertionError("nothing is emitted here")


def test_the_tasks_implement_the_contract() -> None:
    plan = build_plan(compile_topology(Pair), {}, "pair-1", "pair")
    runtime = WorkerRuntime(plan, plan.executors(), _NoTransfer())
    tasks = {ex.component_id: ex.task_class(ex, ex.start_task) for ex in runtime.executors.values()}
    assert isinstance(tasks["source"], SpoutTask) and isinstance(tasks["sink"], BoltTask)
    assert isinstance(tasks["source"], contract.SpoutOutputCollector)
    assert isinstance(tasks["sink"], contract.BoltOutputCollector)
    assert not isinstance(tasks["source"], contract.BoltOutputCollector), "a spout task cannot ack"
    assert contract.OutputCollector is contract.IOutputCollector is contract.BoltOutputCollector
    assert tasks["source"].pending_count() == 0
    ran: list[int] = []
    tasks["sink"].call_soon(lambda: ran.append(1))   # queued for the (not started) executor thread
    assert ran == [] and not runtime.executors[(tasks["sink"].task_id, tasks["sink"].task_id)].queue.empty()


def test_the_contract_imports_nothing_of_stormpy_at_run_time() -> None:
    """Only ``if TYPE_CHECKING:`` imports name stormpy modules (for the Tuple type)."""
    tree = ast.parse(Path(contract.__file__).read_text())
    runtime_imports = []
    for node in tree.body:   # module level; an ``if TYPE_CHECKING:`` block is not descended into
        if isinstance(node, ast.Import):
            runtime_imports += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            runtime_imports.append(node.module or "")
    assert runtime_imports and not [m for m in runtime_imports if m.startswith("stormpy")], runtime_imports


def test_only_the_component_module_touches_the_private_task_handle() -> None:
    defining = Path(inspect.getsourcefile(Bolt) or "").resolve()   # where Component, Spout, Bolt live
    users = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                   if path.resolve() != defining and re.search(r"\._task\b", path.read_text()))
    assert users == [], f"modules reaching into Component._task instead of the contract: {users}"
