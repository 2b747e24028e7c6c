"""The sleeper agent: works until killed (exercises wall-time budgets and process-group cleanup)."""
import time

print("sleeper: working until the budget ends", flush=True)
while True:
    time.sleep(1)
