"""Single-turn tasks (levels 1 and 2), each a module registering its class (contracts.registry, kind "task")."""
