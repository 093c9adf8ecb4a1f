"""Workflows: executions, operations, graphs and events; the engine, REST API, admin, commands.

Workflow authors import from :mod:`workflows_app.sdk`.
"""
