"""``python -m llm_operator.inpod.tuner``: see :mod:`llm_operator.inpod.tuner.main`."""

import sys

from .main import main

sys.exit(main())
