"""Windowed bolts (DESIGN section 12): pure window managers (``windows``) and ``WindowedBolt`` (``bolt``)."""
