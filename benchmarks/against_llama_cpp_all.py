"""Every measurement of issue 69 against llama.cpp, in one invocation: for each ``--shapes``
(``small``, the benchmarks' ERNIE 4.5 shape, and ``0.3b``, ERNIE-4.5-0.3B's; random weights), the
export and its ONNX programs (float32 and int8), made once under ``--work``; the GGUF files (f32
and q8_0) written by llama.cpp's own ``convert_hf_to_gguf.py`` from the folder the export was made
from (the same weights); then, each a table:

- ``against_llama_cpp.py``: a token at batch 1 and a prompt's token, CPU and wall, peak RSS, with
  each ``--threads``; ``--streams`` decoded together (tokens a CPU-second and a second); and the
  third runtime's check (llama.cpp float32's logits and greedy tokens against wenxin's);
- ``served_against_llama_cpp.py``, given ``--llama_server``: ``wenxin serve`` against
  ``llama-server`` under the same load at each ``--streams`` (tokens a second and a CPU-second, time
  to the first token and between tokens p50/p99, ``/health`` p99, the server's RSS).

llama.cpp comes from llama-cpp-python's sdist (``pip download --no-deps --no-binary :all:
llama-cpp-python==0.3.36``): ``--llama_cpp`` is its ``vendor/llama.cpp`` folder (the converter, its
``gguf-py`` and ``conversion`` package), run by ``--converter_python`` (a venv with torch's CPU
build, numpy, sentencepiece, safetensors, pyyaml and transformers); ``--llama_python`` is a venv's
Python with llama-cpp-python installed (built from the same sdist); ``--llama_server`` a
``llama-server`` built from the same sources. Nothing here is a dependency of wenxin::

    python benchmarks/against_llama_cpp_all.py --work /tmp/vs-llama --llama_cpp SDIST/vendor/llama.cpp \\
        --converter_python /tmp/convvenv/bin/python --llama_python /tmp/llamavenv/bin/python \\
        --shapes small 0.3b --threads 1 2 --streams 1 4 16 32 [--llama_server BUILD/bin/llama-server]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
GGUF_TYPES = ("f32", "q8_0")


def gguf_written(llama_cpp: str, converter_python: str, folder: str, outtype: str, target: str) -> str:
    """``target``: the GGUF of ``outtype`` that llama.cpp's converter writes from ``folder``, once."""
    if os.path.isfile(target):
        return target
    converter = os.path.join(llama_cpp, "convert_hf_to_gguf.py")
    if not os.path.isfile(converter):
        raise SystemExit(f"--llama_cpp: {converter} does not exist (the sdist's vendor/llama.cpp folder)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(llama_cpp, "gguf-py"), llama_cpp])}
    partial = target + ".partial"
    done = subprocess.run([converter_python, converter, folder, "--outtype", outtype, "--outfile", partial],
                          cwd=llama_cpp, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        if os.path.exists(partial):
            os.remove(partial)
        raise SystemExit(f"llama.cpp's converter failed on {folder} ({outtype}):\n{done.stderr[-3000:]}")
    os.replace(partial, target)
    return target


def run(script: str, arguments: List[str]) -> None:
    """A sibling benchmark in its own process, its tables printed as it prints them."""
    command = [sys.executable, os.path.join(HERE, script), *arguments]
    print(f"\n$ {' '.join(command)}", flush=True)
    if subprocess.run(command).returncode != 0:
        raise SystemExit(f"{script} failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True, help="a folder for the exports and GGUF files (kept; made once)")
    parser.add_argument("--llama_cpp", required=True, help="llama-cpp-python's sdist's vendor/llama.cpp folder")
    parser.add_argument("--converter_python", required=True, help="a Python that runs llama.cpp's converter")
    parser.add_argument("--llama_python", required=True, help="the Python of a venv with llama-cpp-python")
    parser.add_argument("--llama_server", default="", help="llama-server, for the served comparison")
    parser.add_argument("--shapes", nargs="+", default=["small", "0.3b"], choices=["small", "0.3b"])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens at batch 1")
    parser.add_argument("--new", type=int, default=32, help="tokens decoded at batch 1")
    parser.add_argument("--seconds", type=float, default=20.0, help="the served comparison's window")
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    from generation_serving import ernie45_source, export_made_once
    os.makedirs(args.work, exist_ok=True)
    for shape in args.shapes:
        print(f"\n## ERNIE 4.5, {shape} shape", flush=True)
        export = export_made_once(args.work, "ernie45", shape, onnx=True)
        folder = ernie45_source(args.work, shape)  # what the export was made from
        gguf = {kind: gguf_written(args.llama_cpp, args.converter_python, folder, kind,
                                   os.path.join(args.work, f"ernie45-{shape}-{kind}.gguf")) for kind in GGUF_TYPES}
        files = ["--export", export, "--gguf_f32", gguf["f32"], "--gguf_q8", gguf["q8_0"]]
        run("against_llama_cpp.py", [*files, "--llama_python", args.llama_python, "--rounds", str(args.rounds),
                                     "--prompt", str(args.prompt), "--new", str(args.new),
                                     "--threads", *map(str, args.threads), "--streams", *map(str, args.streams)])
        for threads in args.threads if args.llama_server else ():
            run("served_against_llama_cpp.py", [*files, "--llama_server", args.llama_server, "--threads", str(threads),
                                                "--seconds", str(args.seconds), "--streams", *map(str, args.streams)])


if __name__ == "__main__":
    main()
