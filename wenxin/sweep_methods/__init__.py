"""How a sweep picks its trials' values: a registry (``RegisterSet.sweep_methods``) of
``SweepMethod`` subclasses, one module each (``grid``, ``random_search``, ``optuna_search``).

A method of your own is one module::

    @RegisterSet.sweep_methods.register("halving")
    class Halving(SweepMethod):
        def planned(self): ...    # every trial's values up front, or None to ask as trials start
        def ask(self, trial): ... # set trial["values"] (methods that plan nothing)

in the task's package (the sweep imports the task when the sweep file names a method that is not
built in); ``method: halving`` in the sweep file then names it.
"""
