"""One llama.cpp server process for one pool model (run as `python -m trinity.pool.llamacpp_worker`).

`trinity pool up` starts one of these per model in its own process session, so a crash or a kill of
one model's server never takes the others (or the caller) down. It serves llama.cpp's
OpenAI-compatible HTTP API on loopback until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--alias", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--n-parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model_path
    params.model_alias = args.alias
    params.hostnames = [args.host]
    params.port = args.port
    # n_ctx is shared by all slots in llama.cpp: give every slot the configured context.
    params.n_ctx = args.n_ctx * args.n_parallel
    params.n_parallel = args.n_parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.endpoint_metrics = True

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # loads the model and starts listening
    print(f"ready {args.alias} on {args.host}:{args.port}", flush=True)
    stop.wait()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
