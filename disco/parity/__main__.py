"""``python -m disco.parity FIXTURE.npz ...``: see ``disco.parity``."""

import sys

from disco.parity import check

sys.exit(check.main())
