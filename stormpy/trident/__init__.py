"""Trident: exactly-once batch processing on stormpy (see DESIGN.md section 7)."""
