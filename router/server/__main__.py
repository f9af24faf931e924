"""`python -m router.server ...` is `smp-router ...`."""

import sys

from .cli.main import main

sys.exit(main())
