"""``python -m sim.onnx model.onnx ...``: the command line (:func:`sim.onnx.main`)."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
