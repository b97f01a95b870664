"""``python -m sim``: the ``ipusim`` command line."""

import sys

from .cli import main

sys.exit(main())
