"""``python -m elmscale``: the command line (``elmscale.app.cli``)."""

import sys

from elmscale.app.cli import main

sys.exit(main())
