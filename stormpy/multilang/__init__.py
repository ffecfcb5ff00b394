"""Storm's multilang protocol: ShellBolt/ShellSpout components in any language.

A shell component is a subprocess per task speaking JSON messages, each followed by a line
``end``, over its stdin/stdout (Storm's multilang protocol): the handshake sends the config,
the topology context and a pid directory and gets the pid back; spouts get ``next``, ``ack``,
``fail``, ``activate`` and ``deactivate`` commands and answer each with ``sync``; bolts get
tuples (and ``__heartbeat`` tuples, answered with ``sync``) and send ``emit``, ``ack``,
``fail``, ``log``, ``error`` and ``metrics`` when they like. Unless an emit says
``"need_task_ids": false`` the subprocess is answered with the receiving task ids.

- ``process``: :class:`ShellProcess`, the subprocess and its message streams
- ``components``: :class:`ShellBoltRunner` / :class:`ShellSpoutRunner`, the stormpy components
  that drive one subprocess each; the plan names them for a ``ShellComponent``
  (``stormpy.topology.plan.component_code``; ``streamparse_run pkg.mod.Class`` runs that class
  natively instead) and the worker calls them with ``(command, script)``.
"""
