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
from types import ModuleType
from typing import Any


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--alias", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--n-parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    # speculative decoding: a small draft model of the same tokenizer proposes tokens that the served model
    # checks in one batch; the served model's sampler decides every token, so replies keep its distribution
    ap.add_argument("--draft-model-path", default=None)
    ap.add_argument("--draft-max", type=int, default=8, help="tokens the draft proposes per step")
    ap.add_argument("--draft-min", type=int, default=0)
    ap.add_argument("--draft-p-min", type=float, default=0.75, help="stop drafting below this draft probability")
    ap.add_argument("--ngram", action="store_true", help="draft from n-grams already in the context instead")
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
    _speculative(params, args, xllamacpp)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # loads the model and starts listening
    print(f"ready {args.alias} on {args.host}:{args.port}", flush=True)
    stop.wait()
    del server
    return 0


def _speculative(params: Any, args: argparse.Namespace, xllamacpp: ModuleType) -> None:
    kinds = xllamacpp.common_speculative_type
    spec = params.speculative
    if args.draft_model_path:
        spec.types = [kinds.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        spec.draft.mparams.path = args.draft_model_path
        spec.draft.n_max, spec.draft.n_min, spec.draft.p_min = args.draft_max, args.draft_min, args.draft_p_min
        spec.draft.cpuparams.n_threads = args.threads
        spec.draft.cpuparams_batch.n_threads = args.threads
    elif args.ngram:
        spec.types = [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_MOD]


if __name__ == "__main__":
    sys.exit(main())
