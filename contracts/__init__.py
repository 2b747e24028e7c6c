"""What crosses the boundaries between a2rl's packages, at the bottom of the import stack.

orchestrator -> evaluators / envs / agents -> contracts. Nothing here imports those packages: specs (cells, budgets,
tasks), durable record files and code snapshots, the output layout, the run registry, refusal codes, the Task and
Environment interfaces, the name registry, and the one way to (re)deploy a Serve application.
"""
