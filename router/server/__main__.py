"""`python -m router.server ...` is `smp-router ...`."""

import sys

from .cli import main

sys.exit(main())
