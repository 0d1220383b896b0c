"""The shared kernel of the contexts: the integration events they exchange."""
