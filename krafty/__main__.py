import sys

from krafty.cli import main

sys.exit(main())
