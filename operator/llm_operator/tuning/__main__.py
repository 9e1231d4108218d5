"""``python -m llm_operator.tuning``: see :mod:`llm_operator.tuning.main`."""

import sys

from .main import main

sys.exit(main())
