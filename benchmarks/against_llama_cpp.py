"""A token at batch 1: wenxin (Paddle, ONNX Runtime float32 and int8) against llama.cpp (float32 and
q8_0) on the same weights, in one run (issue 69).

The weights: an ERNIE 4.5 chat export (``--export``, converted with ``wenxin export --format
onnx``: ``advance_pair.onnx`` and its int8 copy, or an older export's ``advance.onnx``) and the
GGUF files llama.cpp's own ``convert_hf_to_gguf.py`` wrote from the same checkpoint's ``wenxin export --format pt`` folder
(``--gguf_f32``, ``--gguf_q8``). llama.cpp runs in its own virtual environment (``--llama_python``:
``pip install ../shared/wheels/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl``, built from
PyPI's sdist).

Each engine runs in a fresh process a round, rounds alternating the engines' order, each with
``--threads`` math threads: it loads the model, warms up once, then feeds the same ``--prompt``
token ids (no tokenizer: the ids themselves) and decodes ``--new`` tokens greedily, timing the
prompt and the decoding apart (CPU and wall). Medians over rounds are printed as a markdown table
with each engine's peak RSS. The check of a third runtime: each engine's logits after the prompt and
after the last token, and its greedy tokens, against wenxin's on Paddle, printed beside the table.

    python benchmarks/against_llama_cpp.py --export EXPORT --gguf_f32 model-f32.gguf \\
        --gguf_q8 model-q8_0.gguf --llama_python /tmp/llamavenv/bin/python --threads 1 2 --streams 1 4 16 32

``--streams``: each engine also decodes that many streams together (unlike prompts of ``--prompt``
ids, prefilled first, untimed), as its server batches them: wenxin's rows in one ``KVSlots``
through one ``advance`` call a step, llama.cpp's sequences in one context through one
``llama_decode`` a step; a table per thread count gives CPU-ms a token and tokens a CPU-second.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List

import numpy as np

from measure import load_note

ENGINES = {  # name: (runtime, what it loads)
    "wenxin paddle float32": ("wenxin", "paddle"),
    "wenxin onnxruntime float32": ("wenxin", "onnxruntime"),
    "wenxin onnxruntime int8": ("wenxin", "onnxruntime-int8"),
    "llama.cpp float32": ("llama", "gguf_f32"),
    "llama.cpp q8_0": ("llama", "gguf_q8"),
}


def prompt_ids(length: int, seed: int = 0) -> List[int]:
    """A fixed prompt of ``length`` token ids (above the special ones); ``seed``: another one."""
    return [int(i) for i in np.random.default_rng(7 + seed).integers(3, 1000, length)]


def greedy_timed(prefill: Callable[[], np.ndarray], step: Callable[[int], np.ndarray], new: int) -> Dict[str, Any]:
    """``prefill()`` (the prompt's next logits ``[vocab]``), then ``new - 1`` greedy ``step(token)``
    calls, timed apart (CPU and wall): the same loop for every engine."""
    c0, w0 = time.process_time(), time.perf_counter()
    first = prefill()
    c1, w1 = time.process_time(), time.perf_counter()
    tokens, last = [int(first.argmax())], first
    for _ in range(new - 1):
        last = step(tokens[-1])
        tokens.append(int(last.argmax()))
    c2, w2 = time.process_time(), time.perf_counter()
    return {"prompt_cpu": c1 - c0, "prompt_wall": w1 - w0, "decode_cpu": c2 - c1, "decode_wall": w2 - w1,
            "tokens": tokens, "first_logits": first.tolist(), "last_logits": last.tolist()}


def advance_in_place(predictor: Any, slots: Any, tokens: List[int]) -> np.ndarray:
    """One step of every row of ``slots`` (``KVSlots``; each row's next token in ``tokens``) as the
    service's batch runs it: one ``advance`` call reading the cache in place, the new keys and values
    written after each row's own; each row's next logits ``[rows, vocab]``."""
    out = predictor.run_step("advance", {"tokens": np.asarray(tokens, dtype=np.int64)[:, None],
                                         "positions": slots.lengths[:, None].copy(), **slots.inputs(1)})
    slots.write(out["new_cache"])
    logits = np.asarray(out["logits"])
    return logits.reshape(len(tokens), -1, logits.shape[-1])[:, -1]


def wenxin_worker(export: str, backend: str, threads: int, prompt: List[int], new: int) -> Dict[str, Any]:
    """The exported step program through wenxin's Predictor (``run_step``), as serving runs a row:
    the prompt's prefill, then ``new`` greedy steps of one token with the row's cache kept in place
    (``KVSlots``, the service's batch) where the export's ``advance`` reads it so, else ``extend``
    on the padded cache (an export from before it)."""
    from wenxin.inference.predictor import Predictor
    from wenxin.models.kv_slots import KVSlots
    predictor = Predictor(export, num_threads=threads, backend=backend)
    state: Dict[str, Any] = {}  # the row's cache (or its slots) and its next position

    def prefill() -> np.ndarray:
        out = predictor.run_step("prefill", {"ids": np.asarray([prompt], dtype=np.int64)})
        state.update(cache=out["cache"], position=int(np.asarray(out["position"]).reshape(-1)[0]))
        if predictor.in_place_cache is not None:
            state["slots"] = KVSlots(predictor.in_place_cache)
            state["slots"].append(out["cache"])
        return np.asarray(out["logits"])[0]

    def step(token: int) -> np.ndarray:
        position = state["position"]
        state["position"] = position + 1
        if "slots" in state:
            return advance_in_place(predictor, state["slots"], [token])[0]
        cache = state["cache"]
        out = predictor.run_step("extend", {"tokens": np.asarray([token], dtype=np.int64),
                                            "positions": np.asarray([position], dtype=np.int64), "cache": cache,
                                            "visible": np.ones((1, int(cache.shape[4]) + 1), np.float32)})
        state["cache"] = out["cache"]
        return np.asarray(out["logits"])[0]

    greedy_timed(prefill, step, new)  # warm-up
    return greedy_timed(prefill, step, new)


def llama_worker(gguf: str, threads: int, prompt: List[int], new: int) -> Dict[str, Any]:
    """llama.cpp through llama-cpp-python: ``eval`` of the prompt's ids, then ``new`` greedy
    steps of one token."""
    from llama_cpp import Llama
    llm = Llama(model_path=gguf, n_ctx=max(256, 2 * (len(prompt) + new)), n_threads=threads,
                n_threads_batch=threads, n_batch=512, verbose=False)
    vocab = llm.n_vocab()

    def evaluated(ids: List[int]) -> np.ndarray:  # the last token's logits (llama-cpp-python keeps scores only
        llm.eval(ids)  # with logits_all)
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,)).astype(np.float32)

    def prefill() -> np.ndarray:
        llm.reset()
        return evaluated(prompt)

    greedy_timed(prefill, lambda token: evaluated([token]), new)  # warm-up
    return greedy_timed(prefill, lambda token: evaluated([token]), new)


def streams_timed(step: Callable[[List[int]], List[np.ndarray]], first: List[int], new: int) -> Dict[str, Any]:
    """``new`` greedy steps of every stream at once (``step``: each stream's next token in, each
    one's logits out), after a warm-up step, timed (CPU and wall)."""
    tokens = list(first)
    tokens = [int(logits.argmax()) for logits in step(tokens)]  # warm-up
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(new):
        tokens = [int(logits.argmax()) for logits in step(tokens)]
    return {"step_cpu": (time.process_time() - c0) / new, "step_wall": (time.perf_counter() - w0) / new}


def wenxin_streams(export: str, backend: str, threads: int, prompts: List[List[int]], new: int) -> Dict[str, Any]:
    """``len(prompts)`` streams decoded together as the service's batch does: each prompt prefilled
    (not timed), every row's cache in one ``KVSlots``, then one ``advance`` call a step for all rows."""
    from wenxin.inference.predictor import Predictor
    from wenxin.models.kv_slots import KVSlots
    predictor = Predictor(export, num_threads=threads, backend=backend)
    if predictor.in_place_cache is None:
        raise SystemExit(f"{export}: its advance does not read the cache in place (an older export)")
    slots = KVSlots(predictor.in_place_cache)
    first = []
    for prompt in prompts:
        out = predictor.run_step("prefill", {"ids": np.asarray([prompt], dtype=np.int64)})
        slots.append(out["cache"])
        first.append(int(np.asarray(out["logits"])[0].argmax()))

    return streams_timed(lambda tokens: list(advance_in_place(predictor, slots, tokens)), first, new)


def llama_streams(gguf: str, threads: int, prompts: List[List[int]], new: int) -> Dict[str, Any]:
    """``len(prompts)`` streams decoded together as llama.cpp's server does: one sequence each in
    one context (``n_seq_max``), each prompt decoded alone (not timed), then one ``llama_decode`` a
    step of a batch holding every sequence's next token (llama-cpp-python's low-level API)."""
    import llama_cpp as llama
    llama.llama_backend_init()
    model = llama.llama_model_load_from_file(gguf.encode(), llama.llama_model_default_params())
    count, per_sequence = len(prompts), max(len(p) for p in prompts) + new + 8
    params = llama.llama_context_default_params()
    params.n_ctx, params.n_seq_max = count * per_sequence, count
    params.n_batch = params.n_ubatch = max(count, max(len(p) for p in prompts))
    params.n_threads = params.n_threads_batch = threads
    context = llama.llama_init_from_model(model, params)
    vocab = llama.llama_vocab_n_tokens(llama.llama_model_get_vocab(model))
    batch = llama.llama_batch_init(params.n_batch, 0, 1)
    positions = [0] * count

    def decode(entries: List[tuple]) -> List[np.ndarray]:  # (sequence, token, wants logits)
        batch.n_tokens = len(entries)
        for i, (sequence, token, wants) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, positions[sequence], 1
            batch.seq_id[i][0], batch.logits[i] = sequence, wants
            positions[sequence] += 1
        if llama.llama_decode(context, batch) != 0:
            raise RuntimeError("llama_decode failed")
        return [np.ctypeslib.as_array(llama.llama_get_logits_ith(context, i), shape=(vocab,)).copy()
                for i, (_, _, wants) in enumerate(entries) if wants]

    first = []
    for sequence, prompt in enumerate(prompts):
        first.append(int(decode([(sequence, t, i == len(prompt) - 1) for i, t in enumerate(prompt)])[0].argmax()))
    result = streams_timed(lambda tokens: decode([(s, t, True) for s, t in enumerate(tokens)]), first, new)
    llama.llama_batch_free(batch)
    llama.llama_free(context)
    llama.llama_model_free(model)
    return result


def run_engine(args: argparse.Namespace, engine: str, threads: int, streams: int = 0) -> Dict[str, Any]:
    """One round of ``engine`` in a fresh process (this script with ``--worker``): batch 1, or
    ``streams`` streams decoded together (their prompts of ``--prompt`` ids each, unlike)."""
    runtime, what = ENGINES[engine]
    python = args.llama_python if runtime == "llama" else sys.executable
    target = getattr(args, what) if runtime == "llama" else args.export
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "GLOG_minloglevel": "2"}
    prompts = [prompt_ids(args.prompt, seed) for seed in range(streams)] if streams else prompt_ids(args.prompt)
    proc = subprocess.run([python, os.path.abspath(__file__), "--worker", runtime, target, what, str(threads),
                           json.dumps(prompts), str(args.new)],
                          capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{engine}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def worker_main(argv: List[str]) -> None:
    runtime, target, what, threads, prompt, new = argv
    prompts = json.loads(prompt)
    if prompts and isinstance(prompts[0], list):  # streams decoded together
        result = (wenxin_streams(target, what, int(threads), prompts, int(new)) if runtime == "wenxin" else
                  llama_streams(target, int(threads), prompts, int(new)))
    elif runtime == "wenxin":
        result = wenxin_worker(target, what, int(threads), prompts, int(new))
    else:
        result = llama_worker(target, int(threads), prompts, int(new))
    result["rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    print(json.dumps(result))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True, help="an ERNIE 4.5 chat export converted with --format onnx")
    parser.add_argument("--gguf_f32", required=True)
    parser.add_argument("--gguf_q8", required=True)
    parser.add_argument("--llama_python", required=True, help="the Python of a venv with llama-cpp-python")
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--new", type=int, default=32, help="tokens decoded")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--streams", type=int, nargs="*", default=[],
                        help="also decode this many streams together, each count a table (e.g. 1 4 16 32)")
    args = parser.parse_args()
    print(f"prompt of {args.prompt} ids, {args.new} tokens decoded greedily, {args.rounds} rounds; {load_note()}")
    for threads in args.threads:
        runs: Dict[str, List[Dict[str, Any]]] = {engine: [] for engine in args.engines}
        for round_ in range(args.rounds):
            order = args.engines if round_ % 2 == 0 else list(reversed(args.engines))
            for engine in order:
                runs[engine].append(run_engine(args, engine, threads))
        print(f"\n{threads} thread(s); {load_note()}")
        print("| engine | decode CPU-ms a token (wall) | prompt CPU-ms a token (wall) | peak RSS GiB |")
        print("|---|---|---|---|")
        for engine, results in runs.items():
            def med(key: str, per: int, results: List[Dict[str, Any]] = results) -> float:
                return statistics.median(r[key] for r in results) * 1e3 / per
            print(f"| {engine} | {med('decode_cpu', args.new - 1):.1f} ({med('decode_wall', args.new - 1):.1f}) | "
                  f"{med('prompt_cpu', args.prompt):.2f} ({med('prompt_wall', args.prompt):.2f}) | "
                  f"{max(r['rss_gib'] for r in results):.2f} |")
        reference = "wenxin paddle float32"
        if reference in runs:
            exact = runs[reference][0]
            scale = float(np.abs(exact["first_logits"]).max())
            for engine, results in runs.items():
                if engine == reference:
                    continue
                other = results[0]
                agree = next((i for i, (a, b) in enumerate(zip(other["tokens"], exact["tokens"])) if a != b),
                             len(exact["tokens"]))
                # the last logits are comparable only after the same tokens
                keys = ("first_logits", "last_logits") if agree == len(exact["tokens"]) else ("first_logits",)
                difference = max(float(np.abs(np.asarray(other[key]) - exact[key]).max()) for key in keys)
                print(f"{engine}: {' and '.join(k.split('_')[0] for k in keys)} logits within {difference:.3g} of "
                      f"wenxin paddle float32's (largest "
                      f"{scale:.3g}); greedy tokens equal for the first {agree} of {len(exact['tokens'])}")
        if args.streams:
            streams_table(args, threads)


def streams_table(args: argparse.Namespace, threads: int) -> None:
    """Each engine decoding ``--streams`` streams together, rounds alternating the engines' order:
    CPU-ms a token, tokens a CPU-second and a second, and the tokens a CPU-second against the
    engine's own at the fewest streams."""
    runs: Dict[tuple, List[Dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        for streams in args.streams:
            order = args.engines if round_ % 2 == 0 else list(reversed(args.engines))
            for engine in order:
                runs.setdefault((engine, streams), []).append(run_engine(args, engine, threads, streams))
    print(f"\n{threads} thread(s), streams decoded together after prompts of {args.prompt} ids, {args.new} "
          f"steps; {load_note()}")
    print("| engine | streams | CPU-ms a token | tokens / CPU-s | tokens / s | x tokens / CPU-s |")
    print("|---|---|---|---|---|---|")
    for engine in args.engines:
        base = None
        for streams in args.streams:
            cpu = statistics.median(r["step_cpu"] for r in runs[(engine, streams)]) / streams
            wall = statistics.median(r["step_wall"] for r in runs[(engine, streams)]) / streams
            base = base or 1 / cpu
            print(f"| {engine} | {streams} | {cpu * 1e3:.1f} | {1 / cpu:.1f} | {1 / wall:.1f} | {1 / cpu / base:.2f} |")


if __name__ == "__main__":
    main()
