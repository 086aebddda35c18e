"""``python -m lsmt_study``: the study driver's command line (:mod:`lsmt_study.cli`)."""

import sys

from lsmt_study.cli import main

sys.exit(main())
