"""One checkout's offline generation (``Generator.generate``, as ``Predictor.predict`` and
``wenxin predict`` run it) on an ERNIE-Gen export: 64 rows of two letter sources, 16 cache rows at
a time, one thread (the backend ``auto``, or the third argument's); prints CPU and wall seconds. Run it for two checkouts (their
folders on ``PYTHONPATH``), alternating, for an A/B::

    PYTHONPATH=OLD_CHECKOUT python benchmarks/offline_generation.py EXPORT 8
    PYTHONPATH=. python benchmarks/offline_generation.py EXPORT 8

(the second argument: the tokens each answer decodes). An export converted with ``--format onnx``
compares its engines in one checkout: ``... EXPORT 32 paddle``, ``onnxruntime``, ``onnxruntime-int8``.
``generation_serving.erniegen_export`` builds such an export at ERNIE 3.0-medium's shape.
"""
import json
import os
import random
import sys
import time

from wenxin.inference.generator import Generator
from wenxin.inference.predictor import Predictor


def main() -> None:
    folder, new = sys.argv[1], int(sys.argv[2])
    predictor = Predictor(folder, num_threads=1, backend=sys.argv[3] if len(sys.argv) > 3 else "auto")
    rng = random.Random(3)
    letters = "abcdefgh"
    rows = [[" ".join(rng.choice(letters) for _ in range(rng.randint(2, 6))),
             " ".join(rng.choice(letters) for _ in range(rng.randint(4, 12)))] for _ in range(64)]
    settings = predictor.settings_for({"max_new_tokens": new})
    generator = Generator(predictor)
    generator.generate(rows[:4], settings, max_rows=16)  # warm-up
    cpu, wall = time.process_time(), time.perf_counter()
    generator.generate(rows, settings, max_rows=16)
    print(json.dumps({"checkout": os.environ.get("PYTHONPATH", ""), "backend": predictor.backend, "new_tokens": new,
                      "cpu_s": round(time.process_time() - cpu, 3), "wall_s": round(time.perf_counter() - wall, 3),
                      "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
