"""The limit kinds, one module each (see ``jobrail.limits.kind`` for what a kind holds)."""
