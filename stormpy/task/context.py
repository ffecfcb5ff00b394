"""What a component learns about its place in the topology: ``initialize(stormconf, context)``.

The context is a dict with the keys pystorm components read (``taskid``, ``componentid``,
``task->component``) and attributes for the rest, so code written for streamparse runs
unchanged. It is built once per task by the executor thread and never changes afterwards.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stormpy.topology.plan import TopologyPlan

log = logging.getLogger(__name__)


class TopologyContext(dict[str, Any]):
    """Task id, component id and the topology's task layout, as seen by one task."""

    def __init__(self, plan: TopologyPlan, component_id: str, task_id: int, worker_tasks: set[int],
                 host: str = "localhost", port: int = 0, transactional_state: Any = None) -> None:
        component = plan.components[component_id]
        tasks = sorted(component.tasks)
        super().__init__({
            "taskid": task_id,
            "componentid": component_id,
            "task->component": dict(plan.task_component),
            "topology_id": plan.topology_id,
            "topology_name": plan.name,
        })
        self._plan = plan
        self.task_id = task_id
        self.component_id = component_id
        self.component_tasks = tasks
        self.task_index = tasks.index(task_id)
        self.topology_id = plan.topology_id
        self.topology_name = plan.name
        self.worker_port = port
        self.host = host
        self.worker_tasks = sorted(worker_tasks)
        self.task_to_component = dict(plan.task_component)
        #: The worker's TransactionalState factory for Trident's coordinators (None when the
        #: runtime was given none, e.g. a core topology in a test).
        self.transactional_state = transactional_state

    def get_component_tasks(self, component_id: str) -> list[int]:
        """Task ids of any component, sorted."""
        return sorted(self._plan.components[component_id].tasks)

    def get_output_fields(self, stream: str = "default", component_id: str | None = None) -> tuple[str, ...]:
        comp = self._plan.components[component_id or self.component_id]
        return tuple(comp.streams[stream].fields)

    def get_sources(self) -> dict[tuple[str, str], Any]:
        """(component, stream) -> thrift Grouping, for this component's inputs."""
        return dict(self._plan.components[self.component_id].inputs)

    def get_targets(self, stream: str = "default") -> list[tuple[str, Any]]:
        """(component, thrift Grouping) subscribed to one of this component's streams."""
        return list(self._plan.subscribers(self.component_id, stream))
