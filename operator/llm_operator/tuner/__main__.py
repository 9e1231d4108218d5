"""``python -m llm_operator.tuner``: see :mod:`llm_operator.tuner.main`."""

import sys

from .main import main

sys.exit(main())
