import sys

from epto.cli import main

sys.exit(main())
