"""`python -m agents.proxy --port 0 --admin-token-env A2RL_PROXY_ADMIN_TOKEN`: the proxy as a process.

Prints `A2RL_PROXY_URL=http://127.0.0.1:PORT` once listening. Cells are then registered over HTTP:
POST /admin/cells {cell_id, driver, limits, records_path} with the admin token in x-a2rl-admin-token.
The real provider keys must be in this process's environment.
"""
from __future__ import annotations

import argparse
import os
import sys

from agents.proxy.app import ProxyState, make_app
from agents.proxy.server import run_forever
from agents.proxy.upstream import RetryPolicy


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m agents.proxy", description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--admin-token-env", default="A2RL_PROXY_ADMIN_TOKEN",
                    help="environment variable holding the admin token (admin API off if unset)")
    ap.add_argument("--max-attempts", type=int, default=RetryPolicy.max_attempts)
    ap.add_argument("--backoff-s", type=float, default=RetryPolicy.base_s)
    args = ap.parse_args(argv)
    token = os.environ.get(args.admin_token_env)
    if not token:
        print(f"warning: ${args.admin_token_env} is not set; the admin API is off", file=sys.stderr)
    state = ProxyState(RetryPolicy(max_attempts=args.max_attempts, base_s=args.backoff_s), admin_token=token)
    run_forever(make_app(state), args.host, args.port,
                on_bound=lambda url: print(f"A2RL_PROXY_URL={url}", flush=True))


if __name__ == "__main__":
    main()
