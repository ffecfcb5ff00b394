"""stormpy ui: the web UI and Storm's JSON REST API (/api/v1/) over Nimbus.

server.py (HTTP, routing, Nimbus calls, run_ui) -> api.py (Thrift structs -> JSON documents)
-> stats.py (aggregation over executors and windows); pages.py renders the same documents as HTML.
"""
