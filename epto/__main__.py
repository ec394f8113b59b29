"""``python -m epto``: the ``epto`` command (``epto --help``)."""

import sys

from epto.cli import main

sys.exit(main())
