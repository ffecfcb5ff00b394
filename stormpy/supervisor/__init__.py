"""The supervisor daemon: syncs assignments, fetches code, forks and watches worker processes.

``daemon.run_supervisor`` is ``stormpy supervisor``; ``slot`` is the pure per-port state
machine, ``sync`` maps assignments to ports and downloads code, ``launcher`` spawns and kills
workers, ``localstate`` owns its keyed state on local disk (``stormpy.disk_layout``: the paths it shares with workers).
"""
