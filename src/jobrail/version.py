"""The version of jobrail, in a module of its own: the adapters that report it import it
from here, so that importing them never imports the package's facade."""

__version__ = "0.1.0"
