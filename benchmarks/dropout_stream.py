"""How fast Paddle's CPU dropout draws its random stream, against the same stream compiled for this CPU.

    python benchmarks/dropout_stream.py [--elements 18300000] [--repeats 5]

Paddle's CPU dropout kernel draws one ``std::uniform_real_distribution<float>`` number from the
generator's ``std::mt19937_64`` per element and compares it with the dropout rate. An ERNIE
3.0-nano fine-tuning step (batch 16, 128 tokens) drops out about 18.3 million elements (attention
probabilities 4 x 16 x 12 x 128 x 128, and 9 hidden-state tensors of 16 x 128 x 312), which is why
dropout is the largest cost of that step after the matrix products (docs/performance.md, "ERNIE
training against the GEMM limit").

This times, per element and in CPU time, ``paddle.nn.functional.dropout`` (training, rate 0.1,
one thread) on that many elements, and a C++ loop drawing the same stream the same way (the
same engine, distribution, comparison, mask and scaling: a faster kernel that keeps the losses
must draw exactly these numbers) compiled twice with g++: ``-O2`` and ``-O3 -march=native``.
It needs g++; it is the best a scalar kernel keeping Paddle's stream could do here.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("GLOG_minloglevel", "2")

STREAM = r"""
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

static double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  size_t n = std::strtoull(argv[1], nullptr, 10);
  int repeats = std::atoi(argv[2]);
  std::vector<float> x(n, 1.0f), y(n);
  std::vector<uint8_t> mask(n);
  std::mt19937_64 engine(42);
  std::uniform_real_distribution<float> dist(0, 1);
  const float p = 0.1f;
  size_t kept = 0;
  for (int r = 0; r < repeats; ++r) {
    double start = cpu_seconds();
    for (size_t i = 0; i < n; ++i) {  // Paddle's CPU dropout, upscale_in_train
      if (dist(engine) < p) {
        mask[i] = 0;
        y[i] = 0;
      } else {
        mask[i] = 1;
        y[i] = x[i] / (1.0f - p);
      }
    }
    double seconds = cpu_seconds() - start;
    for (size_t i = 0; i < n; i += 4096) kept += mask[i];
    std::printf("%.3f\n", seconds * 1e9 / n);
  }
  std::fprintf(stderr, "%zu\n", kept);  // the loop's results are used
  return 0;
}
"""


def compiled_stream(flags: list[str], elements: int, repeats: int, folder: str) -> float:
    """The C++ loop's median ns of CPU an element, built with ``flags``."""
    source = os.path.join(folder, "stream.cc")
    with open(source, "w", encoding="utf-8") as f:
        f.write(STREAM)
    binary = os.path.join(folder, "stream_" + "_".join(flag.strip("-").replace("=", "") for flag in flags))
    subprocess.run(["g++", *flags, "-o", binary, source], check=True)
    out = subprocess.run([binary, str(elements), str(repeats)], check=True, capture_output=True, text=True).stdout
    return statistics.median(float(line) for line in out.split())


def paddle_dropout(elements: int, repeats: int) -> float:
    """``paddle.nn.functional.dropout``'s median ns of CPU an element (training, rate 0.1)."""
    import paddle
    paddle.set_device("cpu")
    paddle.seed(42)
    x = paddle.ones([elements], dtype="float32")
    paddle.nn.functional.dropout(x, p=0.1, training=True)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.process_time()
        y = paddle.nn.functional.dropout(x, p=0.1, training=True)
        float(y[0])  # finished
        times.append((time.process_time() - start) * 1e9 / elements)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=18_300_000, help="elements dropped out (a nano step's)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("g++") is None:
        raise SystemExit("g++ is needed to build the compiled stream")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(f"{args.elements:,} elements, rate 0.1, median of {args.repeats}; ns of CPU an element "
          f"(load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")
    print("| kernel | ns an element | ms for the elements |")
    print("|---|---|---|")
    rows = [("paddle.nn.functional.dropout", paddle_dropout(args.elements, args.repeats))]
    with tempfile.TemporaryDirectory() as folder:
        for flags in (["-O2"], ["-O3", "-march=native"]):
            rows.append((f"the same stream in C++, g++ {' '.join(flags)}",
                         compiled_stream(flags, args.elements, args.repeats, folder)))
    for name, ns in rows:
        print(f"| {name} | {ns:.2f} | {ns * args.elements / 1e6:.0f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
