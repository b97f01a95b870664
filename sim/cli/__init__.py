"""The ``ipusim`` command line: one module per subcommand group.

``main`` holds the parser (``main.main`` is the console script) and ``run``/``systems``/``models``; ``sweep``, ``collective`` and
``bench`` their own subcommands; ``argtypes`` the argument types they share.
"""
