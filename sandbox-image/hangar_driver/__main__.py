"""``python3 -m hangar_driver``: the sandbox's hangar-driver process (see ``hangar_driver.main``)."""

import sys

from .main import main

if __name__ == "__main__":
    sys.exit(main())
