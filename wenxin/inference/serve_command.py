"""``wenxin serve``'s command: its flags into the service's settings, the API key, workers, signals."""
from __future__ import annotations

import argparse
import logging
from typing import Union

from wenxin.common import startup_notes
from wenxin.common.errors import EXIT_OK
from wenxin.common.logs import lean_records, setup_logging
from wenxin.common.process import load_paddle, stop_on_signals
from wenxin.data.export_bundle import inference_folder
from wenxin.inference.api_key import resolve_api_key
from wenxin.inference.scheduler_front import SchedulerLimits
from wenxin.inference.server import Limits, ServeOptions, Service, loads_paddle_here
from wenxin.inference.workers import ServiceWorkers


def serve_options(args: argparse.Namespace) -> ServeOptions:
    """The service's settings from ``wenxin serve``'s flags (the API key checked against ``--host``)."""
    limits = Limits(max_batch=args.max_batch, max_body_bytes=args.max_body_bytes, read_timeout=args.read_timeout,
                    header_timeout=args.read_timeout, max_connections=args.max_connections,
                    max_connections_per_client=args.max_connections_per_client,
                    max_new_tokens=args.max_new_tokens, generation_timeout=args.generation_timeout,
                    max_messages=args.max_messages, max_prompt_bytes=args.max_prompt_bytes)
    room = SchedulerLimits(max_rows=args.max_rows, max_cached_tokens=args.max_cached_tokens,
                           max_waiting=args.max_waiting, prefill_tokens=args.prefill_tokens,
                           turn_prefill=args.turn_prefill, prefix_cache_mb=args.prefix_cache_mb)
    return ServeOptions(limits=limits, model_batch=args.model_batch, max_wait_ms=args.max_wait_ms,
                        model_threads=args.model_threads, num_threads=args.num_threads, backend=args.backend,
                        onednn=args.onednn, task=args.task, generation=room,
                        api_key=resolve_api_key(args.api_key, args.host), model_name=getattr(args, "model_name", ""),
                        listen_while_loading=args.workers == 1,  # several workers: each reports once loaded
                        decode_process=args.decode_process)


def serve(args: argparse.Namespace) -> int:
    """Serve ``args.model_dir`` until SIGTERM or Ctrl-C; every request in flight is answered."""
    folder = inference_folder(args.model_dir)
    options = serve_options(args)
    if loads_paddle_here(folder, options, args.workers):
        load_paddle()  # first, in this thread, with signals held (wenxin.common.process)
    setup_logging()
    lean_records()  # a line a request
    log = logging.getLogger("wenxin")
    service: Union[Service, ServiceWorkers]
    if args.workers == 1:
        service = Service(folder, args.host, args.port, options)
    else:
        service = ServiceWorkers(folder, args.host, args.port, args.workers, options)
    stop_on_signals(service.stop)
    for note in startup_notes.take():  # once the model loaded: an error stays the only output
        log.info("%s", note)  # the BLAS path and the allocator serve as they train
    log.info("%s %s with %s on http://%s:%d (GET /openapi.json lists the endpoints)%s",
             "serving" if args.workers == 1 else f"starting {args.workers} workers serving", folder,
             service.backend, args.host, service.port,
             "; clients send Authorization: Bearer KEY" if options.api_key else "")
    service.run()
    log.info("stopped: every request in flight was answered")
    return EXIT_OK
