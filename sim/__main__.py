"""``python -m sim``: the ``ipusim`` command line."""

import sys

from .cli.main import main

sys.exit(main())
