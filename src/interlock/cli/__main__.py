"""``python -m interlock.cli`` is ``interlock``."""

import sys

from interlock.cli.main import main

sys.exit(main())
