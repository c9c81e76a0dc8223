"""The plugin's version (also in setup.py); recorded in every data folder."""

__version__ = "0.3.0"
