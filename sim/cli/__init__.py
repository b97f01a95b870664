"""The ``ipusim`` command line: one module per subcommand group.

``main`` holds the parser (``main.main`` is the console script) and ``run``/``systems``/``models``; ``sweep``, ``collective`` and
``bench`` their own subcommands; ``compare`` puts runs side by side; ``argtypes`` the argument types they share
and the -q/-v flags every subcommand takes.
"""
