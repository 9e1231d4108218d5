"""``python -m llm_operator.cli``: the same as the ``llm-operator`` console script."""

import sys

from . import main

sys.exit(main())
