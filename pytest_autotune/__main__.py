"""``python -m pytest_autotune``: the same as the ``pytest-autotune`` console script."""
import sys

from .cli import main

sys.exit(main())
