"""Agents: built-in reference agents (scripts run inside a workspace) and, later, CLI scaffold adapters."""
