"""The supervisor daemon: syncs assignments, fetches code, forks and watches worker processes.

``daemon.run_supervisor`` is ``stormpy supervisor``; ``slot`` is the pure per-port state
machine, ``sync`` maps assignments to ports and downloads code, ``launcher`` spawns and kills
workers, ``localstate`` owns the files on local disk.
"""
