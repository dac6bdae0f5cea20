"""wenxin studio: launch, watch, compare and restart runs from a web page (``wenxin studio``).

Floors (top to bottom): ``server`` (the command's web server) -> ``app`` (pages and API) ->
``run_files`` (what runs write), ``supervisor`` (the queue; starts keepers), ``keeper`` (one run
kept alive) -> ``forms`` (launch forms from the task schema), ``security``, ``store`` (SQLite
state), ``processes`` (processes by pid and start time). The studio is a client of the command
line: every run is an ordinary ``wenxin train`` or ``wenxin sweep`` process.
"""
