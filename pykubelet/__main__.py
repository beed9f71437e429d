import sys

from pykubelet.cli import main

sys.exit(main())
