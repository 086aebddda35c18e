"""``python -m lsmt_study``: the study driver's command line (:mod:`lsmt_study.study`)."""

import sys

from lsmt_study.study import main

sys.exit(main())
