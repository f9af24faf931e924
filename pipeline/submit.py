"""Entry file for spark-submit: `spark-submit [spark options] pipeline/submit.py stats ...`.

The master and deploy settings come from spark-submit; the arguments after this
file are those of `smp-pipeline`.
"""

import sys

from pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], spark_submit=True))
