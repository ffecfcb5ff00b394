"""Who may make which Nimbus call: Storm's ``SimpleACLAuthorizer`` rules, as a table (issue 25).

A connection's principal is the subject CN of its client certificate (mutual TLS,
``nimbus.thrift.tls.client.auth: required``); its groups are the certificate's OUs plus those
``storm.group.mapping.file`` gives it. The rules:

- ``nimbus.admins`` may make every call on every topology;
- ``nimbus.supervisor.users`` (supervisors, Nimbus peers, the UI's host certificate) may
  download code and read every topology, but not submit, kill or change one;
- everyone else must be in ``nimbus.users`` / ``nimbus.groups`` when either is set, and may
  then submit, list (seeing only the topologies they may read) and act on a topology they
  own (the submitter Nimbus recorded) or that lists them in ``topology.users`` /
  ``topology.groups``.

Without required client certificates nobody has a principal and nothing here is enforced:
behaviour stays as before (the shared secret, when set, is the one identity).
:class:`AuthorizingHandler` wraps ``NimbusHandler`` so no call can be added without a rule
(an unknown call is refused), and every refusal is logged with the principal and the call.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stormpy import config as cfg
from stormpy.errors import UserError
from stormpy.thrift import storm

log = logging.getLogger(__name__)

#: call -> rule. "any": any allowed principal; "daemon": admins and daemons only;
#: "read"/"operate": on the topology named by the first argument (daemons may read, not operate).
RULES: dict[str, str] = {
    "submitTopology": "submit", "submitTopologyWithOpts": "submit",
    "beginFileUpload": "any", "uploadChunk": "any", "finishFileUpload": "any",
    "getClusterInfo": "any", "getNimbusConf": "any", "isTopologyNameAllowed": "any", "getLeader": "any",
    "beginFileDownload": "daemon", "downloadChunk": "daemon",
    "killTopology": "operate", "killTopologyWithOpts": "operate", "activate": "operate",
    "deactivate": "operate", "rebalance": "operate",
    "getTopologyInfo": "read", "getTopologyConf": "read", "getTopology": "read", "getUserTopology": "read",
    "getTopologyPageInfo": "read", "getComponentPageInfo": "read",
}


@dataclass(frozen=True)
class Caller:
    """The principal of one Thrift connection (None: no client certificate) and its certificate's groups."""
    principal: str | None
    cert_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class TopologyAcl:
    """Who a topology belongs to: its owner (the submitter) and its ``topology.users`` / ``groups``."""
    owner: str
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    @classmethod
    def from_conf(cls, owner: str, conf: Mapping[str, Any]) -> "TopologyAcl":
        return cls(owner, frozenset(_names(conf.get(cfg.TOPOLOGY_USERS.name))),
                   frozenset(_names(conf.get(cfg.TOPOLOGY_GROUPS.name))))


_current = threading.local()


def set_caller(caller: Caller | None) -> None:
    """Record the caller of this connection's thread (Nimbus serves a connection on one thread)."""
    _current.caller = caller


def current_caller() -> Caller | None:
    return getattr(_current, "caller", None)


def _names(value: Any) -> list[str]:
    if not value:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def read_group_mapping(path: str | None) -> dict[str, frozenset[str]]:
    """``principal -> groups`` from ``storm.group.mapping.file`` (YAML ``group: [principal, ...]``)."""
    if not path:
        return {}
    try:
        doc = yaml.safe_load(Path(path).expanduser().read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"cannot read storm.group.mapping.file {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise UserError(f"storm.group.mapping.file {path} must map each group to a list of principals")
    groups: dict[str, set[str]] = {}
    for group, members in doc.items():
        for member in _names(members):
            groups.setdefault(member, set()).add(str(group))
    return {member: frozenset(gs) for member, gs in groups.items()}


class Policy:
    """The authorization keys of one Nimbus config, and the decisions made from them."""

    def __init__(self, conf: Mapping[str, Any], enforce: bool) -> None:
        self.enforce = enforce
        self.admins = frozenset(_names(conf.get(cfg.NIMBUS_ADMINS.name)))
        self.users = frozenset(_names(conf.get(cfg.NIMBUS_USERS.name)))
        self.user_groups = frozenset(_names(conf.get(cfg.NIMBUS_GROUPS.name)))
        self.daemons = frozenset(_names(conf.get(cfg.NIMBUS_SUPERVISOR_USERS.name)))
        self.group_mapping = read_group_mapping(conf.get(cfg.STORM_GROUP_MAPPING_FILE.name))

    def groups(self, caller: Caller) -> frozenset[str]:
        return frozenset(caller.cert_groups) | self.group_mapping.get(caller.principal or "", frozenset())

    def is_admin(self, caller: Caller | None) -> bool:
        return caller is not None and caller.principal in self.admins

    def is_daemon(self, caller: Caller | None) -> bool:
        return caller is not None and caller.principal in self.daemons

    def may_read_all(self, caller: Caller | None) -> bool:
        return not self.enforce or self.is_admin(caller) or self.is_daemon(caller)

    def may_operate(self, caller: Caller | None, acl: TopologyAcl) -> bool:
        """Whether ``caller`` may see and act on a topology with ``acl`` (owner, listed user or group)."""
        if not self.enforce or self.is_admin(caller):
            return True
        if caller is None or caller.principal is None:
            return False
        return (caller.principal == acl.owner or caller.principal in acl.users
                or bool(self.groups(caller) & acl.groups))

    def refusal(self, caller: Caller | None, call: str, acl: TopologyAcl | None) -> str | None:
        """None when ``caller`` may make ``call`` (on a topology with ``acl``), else why not."""
        if not self.enforce or self.is_admin(caller):
            return None
        rule = RULES.get(call)
        if rule is None:
            return f"{call} has no authorization rule"
        if caller is None or caller.principal is None:
            return "no client certificate"
        if self.is_daemon(caller):
            return None if rule in ("any", "daemon", "read") else f"daemon principals may not call {call}"
        if (self.users or self.user_groups) and caller.principal not in self.users \
                and not self.groups(caller) & self.user_groups:
            return "not in nimbus.users or nimbus.groups"
        if rule == "daemon":
            return "only Nimbus admins and daemons (nimbus.supervisor.users) may download topology code"
        if rule in ("read", "operate") and acl is not None and not self.may_operate(caller, acl):
            return f"the topology belongs to {acl.owner!r} and does not list this principal in topology.users"
        return None


def describe(caller: Caller | None) -> str:
    return repr(caller.principal) if caller is not None and caller.principal else "an anonymous client"


class AuthorizingHandler:
    """Wraps ``NimbusHandler``: checks :class:`Policy` before every call and filters what a
    non-admin may list. ``acl_of(name_or_id)`` gives a topology's :class:`TopologyAcl` (None:
    no such topology, the handler then raises NotAliveException as usual)."""

    def __init__(self, handler: Any, policy: Policy, acl_of: Callable[[str], TopologyAcl | None]) -> None:
        self._handler = handler
        self._policy = policy
        self._acl_of = acl_of

    def __getattr__(self, call: str) -> Any:
        target = getattr(self._handler, call)
        if not self._policy.enforce:
            return target

        def checked(*args: Any) -> Any:
            caller = current_caller()
            acl = self._acl_of(str(args[0])) if RULES.get(call) in ("read", "operate") and args else None
            reason = self._policy.refusal(caller, call, acl)
            if reason is not None:
                log.warning("refused %s to %s: %s", call, describe(caller), reason)
                raise storm.AuthorizationException(msg=f"{call} refused for {describe(caller)}: {reason}")
            if RULES[call] == "submit":
                args = _as_submitter(args, caller)
            result = target(*args)
            if call == "getClusterInfo" and not self._policy.may_read_all(caller):
                result.topologies = [t for t in result.topologies or []
                                     if (acl := self._acl_of(t.id)) is not None and self._policy.may_operate(caller, acl)]
            return result

        return checked


def _as_submitter(args: tuple[Any, ...], caller: Caller | None) -> tuple[Any, ...]:
    """The topology's owner is the certificate's principal, whatever the client's conf says."""
    name, location, json_conf, *rest = args
    try:
        conf = json.loads(json_conf) if json_conf else {}
    except ValueError:
        return args    # submit itself refuses it with a clear message
    if not isinstance(conf, dict) or caller is None or caller.principal is None:
        return args
    conf[cfg.TOPOLOGY_SUBMITTER_USER.name] = caller.principal
    return (name, location, json.dumps(conf), *rest)
