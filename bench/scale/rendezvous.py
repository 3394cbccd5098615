"""The real c10d rendezvous handler with N stand-in agents, one per simulated node, as threads of one process.

torch 2.13: each agent is what torchrun builds (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py
`create_backend`, then dynamic_rendezvous.py `create_handler`) and calls `DynamicRendezvousHandler.next_rendezvous`
(the join and the wait for the round to close, every state change a compare_set of one key in the store).
The store is hosted in a process of its own (store_host.py); every agent connects first (this sandbox's slow
connects are measured apart: docs/scale.md) and then all join at once: the figure is the rendezvous alone.

`python -m bench.scale.rendezvous N`: one size, as one JSON line; `python -m bench.scale.rendezvous N static`: the
static rendezvous of a job of fixed size (`static_rendezvous`), trainctl's default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..common import ROOT, Figure, figure, unavailable
from .control import growth


def all_at_once(calls: list[Callable[[], int]]) -> tuple[float, list[int], list[str]]:
    """Each call in a thread of its own, all released together: (seconds until the last ended, the results in
    the calls' order, or the errors)."""
    results: list[int | None] = [None] * len(calls)
    errors: list[str] = []
    go = threading.Event()

    def run(i: int) -> None:
        go.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    go.set()
    for t in threads:
        t.join(timeout=900)
    return time.perf_counter() - t0, [r for r in results if r is not None], errors


def rendezvous(nodes: int, port: int) -> dict[str, Any]:
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"  # the agent store is the rendezvous store: no second server
    params = RendezvousParameters(backend="c10d", endpoint=f"127.0.0.1:{port}", run_id="scale", min_nodes=nodes,
                                  max_nodes=nodes, is_host="false", join_timeout="900", read_timeout="120")  # fmt: skip
    t0 = time.perf_counter()
    handlers = []
    for _ in range(nodes):
        backend, store = create_backend(params)
        handlers.append(create_handler(store, backend, params))
    connect_s = time.perf_counter() - t0
    took, ranks, errors = all_at_once([lambda h=h: h.next_rendezvous().rank for h in handlers])
    if errors or sorted(ranks) != list(range(nodes)):
        raise RuntimeError(f"{nodes} agents: ranks {len(ranks)}, errors {errors[:3]}")
    for h in handlers:
        h.shutdown()
    return {"nodes": nodes, "rendezvous_s": round(took, 3), "connect_s": round(connect_s, 2),
            "load_avg": round(os.getloadavg()[0], 2)}  # fmt: skip


def static_rendezvous(nodes: int, local_world: int = 8) -> dict[str, Any]:
    """torchrun's rendezvous for a job of fixed size, trainctl's default (launcher/platforms.py: `static` unless
    the job is elastic): each stand-in agent runs torch's `StaticTCPRendezvous.next_rendezvous` (node 0 hosts the
    TCPStore, `world_size` = nodes, and waits for every agent to connect; static_tcp_rendezvous.py) and then
    `SimpleElasticAgent._assign_worker_ranks` (each agent `set`s its role info, node 0 `multi_get`s them all and
    `multi_set`s every agent's ranks, each agent `get`s its own: O(N) operations; agent/server/api.py), all at once.
    The figure is from the start to the last agent holding its workers' global ranks."""
    import socket

    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent, WorkerSpec
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = WorkerSpec(role="default", local_world_size=local_world, rdzv_handler=None, entrypoint="stand-in")  # type: ignore[arg-type]

    stores: list[object] = []  # a real agent holds its store for the whole job: node 0's going early closes the
    # server under the agents still reading their ranks (CI saw "Failed to recv, got 0 bytes" at 8 agents)

    def agent(rank: int) -> int:
        info = StaticTCPRendezvous("127.0.0.1", port, rank, nodes, "scale", 600).next_rendezvous()
        stores.append(info.store)
        workers = SimpleElasticAgent._assign_worker_ranks(None, info.store, rank, nodes, spec)  # type: ignore[arg-type]
        return int(workers[0].global_rank)

    took, firsts, errors = all_at_once([lambda r=r: agent(r) for r in range(nodes)])
    stores.clear()
    if errors or firsts != [r * local_world for r in range(nodes)]:
        raise RuntimeError(f"{nodes} agents: {len(firsts)} ranked, errors {errors[:3]}")
    return {"nodes": nodes, "rendezvous_s": round(took, 3), "load_avg": round(os.getloadavg()[0], 2)}


def main(argv: list[str]) -> int:
    from .ranks import StoreHost

    if argv[1:2] == ["static"]:
        print(json.dumps(static_rendezvous(int(argv[0]))), flush=True)
        return 0
    with StoreHost() as host:
        print(json.dumps(rendezvous(int(argv[0]), host.port)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


CAP_S = 240  # one size's cap (BENCH_RDZV_CAP_S): 256 agents in one process ran 6.5 min at 100 % CPU unfinished


def run(quick: bool = False) -> list[Figure]:
    """Sizes 8 (quick) or 8, 32, 64, 128 nodes, each in a process of its own; the growth fitted. Then the static
    rendezvous (`run_static`)."""
    sizes = [8] if quick else [int(s) for s in os.environ.get("BENCH_RDZV_SIZES", "8,32,64,128").split(",") if s]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    got, late, cap = [], [], int(os.environ.get("BENCH_RDZV_CAP_S", CAP_S))
    for n in sizes:
        try:
            proc = subprocess.run([sys.executable, "-m", "bench.scale.rendezvous", str(n)], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=cap)  # fmt: skip
        except subprocess.TimeoutExpired:
            late.append(unavailable("rendezvous", f"c10d rendezvous of {n} stand-in agents",
                                    f"did not finish within {cap} s (load {os.getloadavg()[0]:.1f}): docs/scale.md",
                                    "< 60", "s"))  # fmt: skip
            break  # a larger size would not finish either
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"rendezvous of {n} agents exited {proc.returncode}: {proc.stderr[-1500:]}")
        got.append(json.loads(lines[-1]))
    figs = [figure("rendezvous", f"c10d rendezvous of {r['nodes']} stand-in agents", [r["rendezvous_s"]], unit="s",
                   target="< 60", note="DynamicRendezvousHandler.next_rendezvous, all joining at once, after connecting",
                   detail={"connect_s": r["connect_s"], "load_avg": r["load_avg"]}) for r in got]  # fmt: skip
    b = growth([r["nodes"] for r in got], [r["rendezvous_s"] for r in got])
    if b is not None:
        figs.append(figure("rendezvous", f"growth exponent b of rendezvous_s ~ N^b, N = {got[0]['nodes']}-{got[-1]['nodes']}", [b],
                           unit="b"))  # fmt: skip
    return figs + late + run_static(quick, env, cap)


def run_static(quick: bool, env: dict[str, str], cap: int) -> list[Figure]:
    """The static rendezvous (trainctl's default for a job of fixed size) at 8 (quick) or 8-1,024 nodes."""
    default = "8,64,256,1024"
    sizes = [8] if quick else [int(s) for s in os.environ.get("BENCH_RDZV_STATIC_SIZES", default).split(",") if s]
    got: list[dict[str, Any]] = []
    for n in sizes:
        proc = subprocess.run([sys.executable, "-m", "bench.scale.rendezvous", str(n), "static"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=cap)  # fmt: skip
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"static rendezvous of {n} agents exited {proc.returncode}: {proc.stderr[-1500:]}")
        got.append(json.loads(lines[-1]))
    note = "torchrun's static rendezvous + _assign_worker_ranks, all joining at once (trainctl's default: a fixed size)"
    figs = [figure("rendezvous", f"static rendezvous of {r['nodes']} stand-in agents ({r['nodes'] * 8} ranks)",
                   [r["rendezvous_s"]], unit="s", target="< 60", note=note, detail={"load_avg": r["load_avg"]})
            for r in got]  # fmt: skip
    b = growth([r["nodes"] for r in got], [r["rendezvous_s"] for r in got])
    if b is not None:
        figs.append(figure("rendezvous", f"growth exponent b of static rendezvous_s ~ N^b, N = {got[0]['nodes']}-{got[-1]['nodes']}",
                           [b], unit="b"))  # fmt: skip
    return figs
