"""Agents: built-in reference agents (scripts run inside a workspace), CLI scaffold adapters (agents/cli) and the
driver proxy that meters their LLM calls (agents/proxy)."""
