"""``python -m sim.cli``: the ``ipusim`` command line, as ``python -m sim``."""

import sys

from .main import main

sys.exit(main())
