"""``python -m disco.parity FIXTURE.npz ...``: see ``disco.parity``."""

import sys

from disco import parity

sys.exit(parity.main())
