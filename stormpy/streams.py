"""Every system component and stream name, defined once (Storm's ``Constants`` and Trident's).

Storm reserves ids starting with ``__`` for the system: the acker bolt, the tick source and the
acker's streams. Trident's framework components and streams start with ``$`` (the master batch
coordinator ``$mastercoord-bg0``, its ``$batch``/``$commit``/``$success`` streams, and the
``$coord-<stream>`` direct streams that tell each downstream task how many tuples of a batch it
was sent). Both kinds are *framework* components: the UI hides them unless asked, and
``ComponentPlan.is_framework`` says so. Only ``__`` ids are *system* ids in Storm's sense
(``Utils.isSystemId``): they are left out of the counts Storm leaves them out of, while the
``$`` components of Trident are counted like user components.

Pure constants and predicates: imported by the DSL, the plan, the executors, the acker, Nimbus
and the UI alike, so it imports nothing from stormpy.
"""
from __future__ import annotations

DEFAULT_STREAM = "default"

# ---------------------------------------------------------------- Storm (reserved "__")
SYSTEM_PREFIX = "__"
ACKER_COMPONENT = "__acker"
ACKER_CLASS = "stormpy.acker.bolt:AckerBolt"
REQUIREMENTS_COMPONENT = "__requirements"   # errors of a topology's virtualenv install (supervisors)
SYSTEM_COMPONENT = "__system"        # the source of tick tuples
ACK_INIT = "__ack_init"              # spout -> acker: [root, xor of edges, spout task]
ACK_ACK = "__ack_ack"                # bolt -> acker: [root, xor]; acker -> spout: [root]
ACK_FAIL = "__ack_fail"              # bolt -> acker, acker -> spout: [root]
TICK = "__tick"
HEARTBEAT = "__heartbeat"            # pystorm's heartbeat stream (stormpy never sends one)
ACKER_STREAMS = frozenset({ACK_INIT, ACK_ACK, ACK_FAIL})

# ---------------------------------------------------------------- Trident (framework "$")
FRAMEWORK_PREFIX = "$"
MASTER_COORDINATOR = "$mastercoord-bg0"
SPOUT_COORDINATOR_PREFIX = "$spoutcoord-"   # + the stream: a Trident spout's coordinator bolt
BATCH_STREAM = "$batch"
COMMIT_STREAM = "$commit"
SUCCESS_STREAM = "$success"
COORD_STREAM_PREFIX = "$coord-"


# Stateful bolts (Storm's CheckpointSpout): the spout added to topologies with stateful bolts
# and the stream carrying [txid, action] (prepare, commit, rollback, initstate) to them.
CHECKPOINT_COMPONENT = "$checkpointspout"
CHECKPOINT_STREAM = "$checkpoint"
CHECKPOINT_SPOUT_CLASS = "stormpy.stateful.checkpoint:CheckpointSpout"

# Storm's ShellComponent (multilang): the stormpy components that run its command, one
# subprocess per task, built by the worker from (command, script).
SHELL_BOLT_CLASS = "stormpy.multilang.components:ShellBoltRunner"
SHELL_SPOUT_CLASS = "stormpy.multilang.components:ShellSpoutRunner"


def coord_stream(stream: str) -> str:
    """The direct stream carrying "I sent you N tuples of this batch" for ``stream``."""
    return COORD_STREAM_PREFIX + stream


def is_system_id(name: str) -> bool:
    """Storm's ``Utils.isSystemId``: a ``__`` component or stream (acker, ticks)."""
    return name.startswith(SYSTEM_PREFIX)


def paces_others(component_id: str) -> bool:
    """Trident's master and spout coordinators: their steps are short, but every batch and
    commit of the user's components waits for them. A cluster worker's scheduler loop
    (``topology.executor.threads``) leaves them to threads of their own: in it each of their
    steps would wait behind whole steps of the components they pace (``WorkerRuntime``'s
    ``pacers_apart``)."""
    return component_id == MASTER_COORDINATOR or component_id.startswith(SPOUT_COORDINATOR_PREFIX)


def is_framework_id(name: str) -> bool:
    """A component or stream the framework made (``__`` system or ``$`` Trident), not the user."""
    return name.startswith(SYSTEM_PREFIX) or name.startswith(FRAMEWORK_PREFIX)
