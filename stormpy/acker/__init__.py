"""Storm's XOR acker: ``ledger`` (pure state and timeouts) and ``bolt`` (the ``__acker`` system bolt)."""
