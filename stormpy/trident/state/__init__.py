"""Trident state: the State contract, the map wrappers over a BackingMap, the built-in backends
(``memory``, ``sqlite``, ``redis``) and ``txstate`` (where coordinators and spouts keep their
metas). The bottom layer: it imports nothing else of Trident.

``stormpy.trident.state`` was one module; every name it defined is still importable from here
(topologies pickled before the split name its classes by that path).
"""
from stormpy.trident.state.backing import BackingMaker, CachedMap
from stormpy.trident.state.codec import decode_key, decode_value, encode_key, encode_value
from stormpy.trident.state.contract import (FENCE_KEY, KINDS, NON_TRANSACTIONAL, OPAQUE, OPAQUE_LOG_KEY, OWNER_KEY,
                                            RESERVED_PREFIX, TRANSACTIONAL, BackingMap, State, StateFactory,
                                            StateFencedError, StateUpdater, is_reserved_key)
from stormpy.trident.state.fence import Fence, supports_fencing
from stormpy.trident.state.map_state import (MapState, MapStateFactory, NonTransactionalMap, OpaqueMap,
                                             TransactionalMap, _Constant, check_kind, map_state_factory)

__all__ = ["KINDS", "NON_TRANSACTIONAL", "OPAQUE", "OPAQUE_LOG_KEY", "FENCE_KEY", "OWNER_KEY", "RESERVED_PREFIX",
           "TRANSACTIONAL", "BackingMaker", "BackingMap", "CachedMap", "Fence", "MapState", "MapStateFactory",
           "NonTransactionalMap", "OpaqueMap", "State", "StateFactory", "StateFencedError", "StateUpdater",
           "TransactionalMap", "_Constant", "check_kind", "decode_key", "decode_value", "encode_key",
           "encode_value", "is_reserved_key", "map_state_factory", "supports_fencing"]
