"""wenxin studio: launch, watch, compare and restart runs from a web page (``wenxin studio``).

Floors (top to bottom): ``server`` (the command's web server) -> ``app`` (pages and API) ->
``workspace`` (the state behind them: task files, launching, watching, trying) -> ``supervisor``
(the queue; starts keepers), ``keeper`` (one run kept alive), ``trying`` (a run's exported model,
its predictions and chat) -> ``run_files`` (what runs write), ``viewers`` (tracker viewers) ->
``forms`` (launch forms from the task schema), ``readiness`` (what a task file misses, and what
prepares it), ``run_commands``, ``machine`` (CPU, memory and GPU use), ``sign_in`` (addresses, QR
code), ``security``, ``store`` (SQLite state), ``i18n`` (English and Chinese: the pages' messages
and the notices the server writes), ``processes`` (processes by pid and start time). The
studio is a client of the command line: every run is an ordinary ``wenxin train`` or ``wenxin
sweep`` process.
"""
