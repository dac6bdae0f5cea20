"""Faster text conversion, plugged into ``wenxin.data.text_speedups`` when imported.

Hand-written for measured reasons (issue 39; docs/performance.md): converting text to ids one text
at a time in Python took most of a bag-of-words model's prediction time, and NFKC most of that.

- ``nfkc``: ``unicodedata``'s NFKC by table lookups where that is exact;
- ``char_ids``: a batch of texts to ids in a fixed number of numpy calls, or in one pass of the C
  kernel ``_char_ids_native`` where it was built at install (optional: ``setup.py``).

Both give the plain path's text and ids (``tests/test_char_ids.py``, ``tests/fast/test_nfkc.py``).
The registry imports this package with the built-in modules; ``WENXIN_SPEEDUPS=0`` keeps it out,
and every text then takes the plain path.
"""
from wenxin.data import text_speedups
from wenxin.speedups import char_ids, nfkc

SPEEDUPS = text_speedups.TextSpeedups(name="wenxin.speedups", normalize=nfkc.nfkc,
                                      batch_converter=char_ids.batch_converter, prepare=nfkc.prepare)
text_speedups.register(SPEEDUPS)
