"""wenxin studio: launch, watch, compare and restart runs from a web page (``wenxin studio``).

Floors (top to bottom): ``server`` (the command's web server) -> ``app`` (pages and API) ->
``forms`` (launch forms from the task schema), ``run_files`` (what runs write), ``supervisor``
(queue, keepers) -> ``keeper`` (one run kept alive) -> ``store`` (SQLite state), ``security``.
The studio is a client of the command line: every run is an ordinary ``wenxin train`` or
``wenxin sweep`` process.
"""
