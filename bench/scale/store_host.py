"""`python -m bench.scale.store_host`: a TCPStore hosted the way torchrun's agent hosts it, in its own process.

torch 2.13, torch/distributed/elastic/rendezvous/dynamic_rendezvous.py,
`DynamicRendezvousHandler._create_tcp_store_server`: `TCPStore(host_name, port=0, is_master=True,
multi_tenant=True)` (libuv server, the default since 2.4), created by `next_rendezvous` on the node that
becomes rank 0 unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1; the agent
(torch/distributed/elastic/agent/server/api.py, `SimpleElasticAgent._rendezvous`) hands its port to the
workers as MASTER_PORT. A process of its own, so the stand-in ranks' threads do not share its GIL or core
time the way a real agent process would not. Prints the port, then serves until stdin closes.
"""

from __future__ import annotations

import sys

import torch.distributed as dist


def main() -> int:
    host = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
    store = dist.TCPStore(host_name=host, port=0, is_master=True, multi_tenant=True)
    print(store.port, flush=True)
    sys.stdin.read()  # the harness closes our stdin (or dies): stop serving
    return 0


if __name__ == "__main__":
    sys.exit(main())
