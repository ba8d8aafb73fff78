"""What the package is and where it lives: its version and its folder (importing it imports nothing else)."""

import os

__version__ = '0.1.0'
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))  # the scepter_like folder
